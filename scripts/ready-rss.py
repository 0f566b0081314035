#!/usr/bin/env python3
"""The memory a `dq serve` on the embedded store holds per ready job.

    scripts/ready-rss.py BIN [JOBS]

Starts BIN (`dq serve`) on a fresh data directory, reads its VmRSS, enqueues
JOBS (default 1,000,000) jobs due now (batches of 1000, 64-byte bodies, no
consumer, so all stay ready), reads VmRSS again, then restarts it on the same
directory and reads VmRSS once it answers /readyz (what the start-up scan
keeps). Prints one JSON line. Run it for two builds in one sitting: SQLite's
page cache is in both figures, so only the difference between builds is the
memory of the ready jobs' order.
"""
import json, os, shutil, socket, subprocess, sys, tempfile, threading, time, urllib.request

bin_, jobs = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1_000_000


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def start(data, port):
    p = subprocess.Popen([bin_, "serve", "--listen", f"127.0.0.1:{port}", "--data-dir", data,
                          "--log-level", "warn"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t0 = time.time()
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1).read()
            return p, time.time() - t0
        except Exception:
            time.sleep(0.01)


def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    urllib.request.urlopen(req, timeout=60).read()


tmp = tempfile.mkdtemp()
data = os.path.join(tmp, "data")
port = free_port()
p, _ = start(data, port)
try:
    time.sleep(0.3)
    before = rss_kb(p.pid)
    body = "x" * 62
    batches = list(range(jobs // 1000))
    lock = threading.Lock()

    def producer():
        while True:
            with lock:
                if not batches:
                    return
                b = batches.pop()
            post(port, "/v1/topics/rss/jobs:batch",
                 {"jobs": [{"id": f"j{b}-{i}", "body": body, "delay_ms": 0} for i in range(1000)]})

    ts = [threading.Thread(target=producer) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    time.sleep(0.5)
    after = rss_kb(p.pid)
finally:
    p.terminate()
    p.wait()
p, took = start(data, port)
try:
    time.sleep(0.3)
    restarted = rss_kb(p.pid)
    stats = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/topics/rss").read())
finally:
    p.terminate()
    p.wait()
    shutil.rmtree(tmp)
print(json.dumps({"jobs": jobs, "ready": stats.get("stats", stats).get("ready"),
                  "rss_kb_empty": before, "rss_kb_filled": after, "rss_kb_restarted": restarted,
                  "start_s": round(took, 3),
                  "bytes_per_job_filled": round((after - before) * 1024 / jobs, 1)}))
