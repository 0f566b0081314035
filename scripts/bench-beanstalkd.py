#!/usr/bin/env python3
"""Put/reserve/delete throughput over the beanstalkd protocol: C connections,
each doing put -> reserve -> delete in a loop for D seconds, against any
beanstalkd-protocol server (dq serve --beanstalkd, or beanstalkd itself).

    scripts/bench-beanstalkd.py HOST:PORT [--connections 50] [--seconds 10]
    scripts/bench-beanstalkd.py HOST:PORT --http   # the same cycle over dq's HTTP API

With --http, HOST:PORT is dq's HTTP listener and each cycle is enqueue ->
reserve -> ack (POST …/jobs, POST /v1/reserve, POST …/ack) on a keep-alive
connection, written and read by the same kind of asyncio client, so the two
protocols compare in one run.

Prints one JSON line: cycles, cycles/s (one cycle = 3 commands), errors.
The client is Python asyncio on one core: compare servers in the same run,
and read the figures as a floor for fast servers."""
import argparse
import asyncio
import json
import time


async def worker(host, port, stop_at, tube, out):
    r, w = await asyncio.open_connection(host, port)
    w.write(f"use {tube}\r\nwatch {tube}\r\nignore default\r\n".encode())
    for _ in range(3):
        await r.readline()
    body = b"x" * 100
    done = errors = 0
    while time.monotonic() < stop_at:
        w.write(b"put 1024 0 60 %d\r\n%s\r\n" % (len(body), body))
        line = await r.readline()
        if not line.startswith(b"INSERTED"):
            errors += 1
            continue
        w.write(b"reserve-with-timeout 5\r\n")
        line = await r.readline()
        if not line.startswith(b"RESERVED"):
            errors += 1
            continue
        job_id, size = line.split()[1:3]
        await r.readexactly(int(size) + 2)
        w.write(b"delete %s\r\n" % job_id)
        line = await r.readline()
        if line != b"DELETED\r\n":
            errors += 1
            continue
        done += 1
    w.close()
    out.append((done, errors))


async def http_call(r, w, host, path, body):
    data = json.dumps(body).encode()
    w.write(b"POST %s HTTP/1.1\r\nhost: %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
            % (path.encode(), host.encode(), len(data), data))
    status = int((await r.readline()).split()[1])
    length = 0
    while True:
        line = await r.readline()
        if line in (b"\r\n", b""):
            break
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            length = int(v)
    return status, json.loads(await r.readexactly(length)) if length else None


async def http_worker(host, port, stop_at, tube, out):
    r, w = await asyncio.open_connection(host, port)
    body = "x" * 100
    done = errors = 0
    while time.monotonic() < stop_at:
        s, _ = await http_call(r, w, host, f"/v1/topics/{tube}/jobs", {"body": body})
        if s != 201:
            errors += 1
            continue
        s, v = await http_call(r, w, host, "/v1/reserve", {"topics": [tube], "max": 1, "wait_ms": 5000})
        if s != 200 or not v["jobs"]:
            errors += 1
            continue
        job = v["jobs"][0]
        s, _ = await http_call(r, w, host, f"/v1/topics/{tube}/jobs/{job['id']}/ack", {"token": job["token"]})
        if s != 200:
            errors += 1
            continue
        done += 1
    w.close()
    out.append((done, errors))


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("addr")
    p.add_argument("--connections", type=int, default=50)
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--http", action="store_true", help="dq's HTTP API instead of the beanstalkd protocol")
    a = p.parse_args()
    host, port = a.addr.rsplit(":", 1)
    out = []
    start = time.monotonic()
    stop_at = start + a.seconds
    tube = f"bench-{int(start * 1000)}"
    run = http_worker if a.http else worker
    await asyncio.gather(*(run(host, int(port), stop_at, tube, out) for _ in range(a.connections)))
    took = time.monotonic() - start
    cycles = sum(d for d, _ in out)
    print(json.dumps({"protocol": "http" if a.http else "beanstalkd", "connections": a.connections, "seconds": round(took, 2), "cycles": cycles,
                      "cycles_per_s": round(cycles / took), "errors": sum(e for _, e in out)}))


asyncio.run(main())
