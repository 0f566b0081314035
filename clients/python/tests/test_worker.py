"""The Worker against a real dq serve: due times, retries and dead letters,
lease extension, graceful stop (SIGTERM in a subprocess), a dq restart."""

from __future__ import annotations

import asyncio
import collections
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import DqServer, RunningWorker, stats, wait_for

from dq_client import Client, Dead, DqError, Job, NewJob, RetryLater, Worker

HERE = Path(__file__).resolve().parent


def enqueue_spread(client: Client, topic: str, n: int, over_ms: int, lead_ms: int = 300) -> int:
    """Enqueues ``n`` jobs due evenly over ``over_ms`` from now + ``lead_ms``."""
    start = int(time.time() * 1000) + lead_ms
    jobs = [NewJob({"i": i}, id=f"j{i:05}", due_at_ms=start + i * over_ms // n) for i in range(n)]
    for k in range(0, n, 1000):
        res = client.enqueue_batch(topic, jobs[k : k + 1000])
        assert all(not isinstance(r, DqError) for r in res), res
    return start


def clock_slack_ms(client: Client) -> int:
    """How far dq's clock runs ahead of this host's (0 when behind)."""
    r = client.request("GET", "/readyz")
    return max(0, int(r.get("clock_offset_ms", 0)))


def ack_calls(client: Client) -> tuple[int, int]:
    """The ack:batch calls and single acks the server has answered 200 (its /metrics)."""
    with urllib.request.urlopen(client.url + "/metrics", timeout=10) as r:
        text = r.read().decode()

    def count(route: str) -> int:
        prefix = f'dq_http_request_duration_seconds_count{{method="POST",route="{route}",status="200"}} '
        for line in text.splitlines():
            if line.startswith(prefix):
                return int(line[len(prefix) :])
        return 0

    return count("/v1/ack:batch"), count("/v1/topics/{topic}/jobs/{id}/ack")


@pytest.mark.parametrize("form", ["threads", "asyncio"])
def test_thousand_jobs_none_early_twice_or_lost(client: Client, topic: str, form: str) -> None:
    n = 1000
    seen: dict[str, int] = collections.Counter()
    early: list[tuple[str, int, int]] = []
    lock = threading.Lock()
    all_done = threading.Event()
    slack = clock_slack_ms(client)

    # Handlers running at once, and the most seen: never above the limit.
    running = [0, 0]

    def record(job: Job) -> None:
        now = int(time.time() * 1000)
        with lock:
            if now + slack < job.due_at_ms:
                early.append((job.id, now, job.due_at_ms))
            seen[job.id] += 1
            if len(seen) == n:
                all_done.set()

    def begin() -> None:
        with lock:
            running[0] += 1
            running[1] = max(running[1], running[0])

    def end() -> None:
        with lock:
            running[0] -= 1

    worker = Worker(client, concurrency=4)
    if form == "threads":

        def sync_handler(job: Job) -> None:
            begin()
            try:
                time.sleep(0.002)
                record(job)
            finally:
                end()

        worker.handle(topic, sync_handler)
    else:

        async def handler(job: Job) -> None:
            begin()
            try:
                await asyncio.sleep(0.002)
                record(job)
            finally:
                end()

        worker.handle(topic, handler)
    enqueue_spread(client, topic, n, over_ms=2000)
    batches_before, singles_before = ack_calls(client)
    with RunningWorker(worker) as rw:
        assert all_done.wait(60), f"only {len(seen)} of {n} jobs handled"
        wait_for(lambda: stats(client, topic)["acked"] == n, 30, "every ack")
        rw.stop()
    assert early == []
    assert len(seen) == n and max(seen.values()) == 1, "a job was handled twice"
    s = stats(client, topic)
    assert s == {"scheduled": 0, "ready": 0, "reserved": 0, "dead": 0, "acked": n}
    assert worker.stats.done == n and worker.stats.report_errors == 0
    assert running[1] <= 4, f"{running[1]} handlers ran at once with a concurrency of 4"
    # The acks went in batches (of what was done while the call before was in
    # flight), none one by one.
    batches, singles = ack_calls(client)
    batches, singles = batches - batches_before, singles - singles_before
    assert 0 < batches < n and singles == 0, f"{n} acks in {batches} ack:batch calls, {singles} single"


def test_failing_handler_retried_then_dead(client: Client, topic: str) -> None:
    client.configure_topic(topic, max_attempts=3, retry={"fixed_ms": 50})
    attempts: list[int] = []
    dead_seen = threading.Event()

    def handler(job: Job) -> None:
        attempts.append(job.attempt)
        raise ValueError(f"boom on attempt {job.attempt}")

    worker = Worker(client, concurrency=4)
    worker.handle(topic, handler)
    client.enqueue(topic, {"x": 1}, id="f")
    with RunningWorker(worker) as rw:
        dead = wait_for(lambda: client.list_dead(topic), 30, "the dead letter")
        dead_seen.set()
        rw.stop()
    assert attempts == [1, 2, 3]
    assert [d.id for d in dead] == ["f"]
    assert dead[0].attempts == 3 and dead[0].last_error == "boom on attempt 3"
    assert worker.stats.failed == 3


def test_dead_and_retry_later(client: Client, topic: str) -> None:
    client.configure_topic(topic, max_attempts=5)
    calls: list[tuple[str, int]] = []
    released = threading.Event()

    async def handler(job: Job) -> None:
        calls.append((job.id, job.attempt))
        if job.id == "dead":
            raise Dead("permanent: no such order")
        if job.id == "later" and not released.is_set():
            released.set()
            raise RetryLater(200)

    worker = Worker(client, concurrency=2)
    worker.handle(topic, handler)
    client.enqueue(topic, 1, id="dead")
    client.enqueue(topic, 2, id="later")
    with RunningWorker(worker) as rw:
        wait_for(lambda: stats(client, topic)["acked"] == 1 and client.list_dead(topic), 30, "outcomes")
        rw.stop()
    dead = client.list_dead(topic)
    assert [d.id for d in dead] == ["dead"] and dead[0].last_error == "permanent: no such order"
    assert dead[0].attempts == 1
    assert [c for c in calls if c[0] == "later"] == [("later", 1), ("later", 1)]
    assert worker.stats.retried_later == 1 and worker.stats.dead == 1


def test_slow_handler_lease_extended(client: Client, topic: str) -> None:
    """A handler slower than its lease keeps the job: no second delivery
    (another worker watches the topic), one ack."""
    lease_ms = 900
    calls: list[str] = []

    def slow(job: Job) -> None:
        calls.append(job.id)
        time.sleep(3 * lease_ms / 1000)

    w1 = Worker(client, concurrency=1, lease_ms=lease_ms)
    w1.handle(topic, slow)
    w2 = Worker(client, concurrency=1, lease_ms=lease_ms)
    w2.handle(topic, slow)
    client.enqueue(topic, "slow", id="s")
    with RunningWorker(w1) as r1, RunningWorker(w2) as r2:
        wait_for(lambda: stats(client, topic)["acked"] == 1, 30, "the ack")
        r1.stop()
        r2.stop()
    assert calls == ["s"]
    info = client.get_topic(topic)
    assert info.stats is not None
    assert info.stats.counters.get("expired", 0) == 0 and info.stats.counters.get("failed", 0) == 0


def test_sigterm_mid_run(client: Client, server: DqServer, topic: str, tmp_path: Path) -> None:
    """SIGTERM to a process in worker.run(): running handlers finish and are
    acked, nothing is left reserved, the rest wait for the next worker."""
    n = 30
    client.enqueue_batch(topic, [NewJob({"i": i}, id=f"t{i:02}") for i in range(n)])
    log = tmp_path / "events.log"
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "sigterm_worker.py"), server.url, topic, str(log)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:

        def started() -> list[str]:
            if not log.exists():
                return []
            return [ln.split()[1] for ln in log.read_text().splitlines() if ln.startswith("start ")]

        wait_for(lambda: len(started()) >= 4, 30, "four handlers running")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out.decode(errors="replace")
    lines = log.read_text().splitlines()
    starts = [ln.split()[1] for ln in lines if ln.startswith("start ")]
    dones = [ln.split()[1] for ln in lines if ln.startswith("done ")]
    assert sorted(starts) == sorted(dones), "a handler did not finish"
    assert 4 <= len(starts) < n
    for job_id in starts:
        with pytest.raises(DqError) as ei:
            client.get(topic, job_id)
        assert ei.value.code == "job_not_found", f"{job_id} not acked"
    s = stats(client, topic)
    assert s["reserved"] == 0
    assert s["acked"] == len(starts) and s["ready"] == n - len(starts)
    assert "stopped" in out.decode()


def test_stop_from_another_thread_async(client: Client, topic: str) -> None:
    """run_async() inside an existing loop; stop() from a thread: in-flight acked."""
    client.enqueue_batch(topic, [NewJob(i, id=f"a{i}") for i in range(10)])
    started = threading.Event()

    async def handler(job: Job) -> None:
        started.set()
        await asyncio.sleep(0.5)

    worker = Worker(client, concurrency=3, grace=10)
    worker.handle(topic, handler)

    async def main() -> None:
        task = asyncio.create_task(worker.run_async())
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 10)
        threading.Thread(target=worker.stop).start()
        await asyncio.wait_for(task, 20)

    asyncio.run(main())
    s = stats(client, topic)
    assert s["reserved"] == 0 and s["acked"] >= 3 and s["acked"] + s["ready"] == 10
    assert worker.stats.done == s["acked"]


def test_dq_restart_mid_run(own_server: DqServer, topic: str) -> None:
    """Kill dq mid-run and start it again on the same port and data: the
    worker reconnects and every job is done."""
    client = Client(own_server.url, timeout=10)
    n = 300
    seen: collections.Counter[str] = collections.Counter()
    lock = threading.Lock()

    def handler(job: Job) -> None:
        time.sleep(0.005)
        with lock:
            seen[job.id] += 1

    worker = Worker(client, concurrency=4, lease_ms=3000)
    worker.handle(topic, handler)
    enqueue_spread(client, topic, n, over_ms=3000)
    with RunningWorker(worker) as rw:
        wait_for(lambda: len(seen) >= 50, 30, "some jobs done")
        own_server.kill(signal.SIGKILL)
        time.sleep(0.5)  # dq stays down a moment (not synchronisation)
        own_server.start()
        wait_for(lambda: len(seen) == n, 60, "every job handled")
        wait_for(
            lambda: (s := stats(client, topic))["scheduled"] + s["ready"] + s["reserved"] == 0,
            60,
            "every job acked",
            every=0.2,
        )
        rw.stop()
    assert set(seen) == {f"j{i:05}" for i in range(n)}
    assert worker.stats.reserve_errors > 0, "dq was never seen down"
    s = stats(client, topic)
    assert s["dead"] == 0 and s["reserved"] == 0
    for i in range(0, n, 37):
        with pytest.raises(DqError):
            client.get(topic, f"j{i:05}")
    client.close()


def test_worker_needs_a_handler(client: Client) -> None:
    with pytest.raises(ValueError):
        Worker(client).run()



def test_event_dispatch(client: Client, topic: str) -> None:
    got: list[tuple[str, str]] = []

    def on_a(job: Job) -> None:
        got.append(("a", job.id))

    async def on_b(job: Job) -> None:
        got.append(("b", job.id))

    worker = Worker(client, concurrency=2)
    worker.handle(topic, on_a, event="a")
    worker.handle(topic, event="b")(on_b)
    client.enqueue(topic, {"event": "a"}, id="ja")
    client.enqueue(topic, {"event": "b"}, id="jb")
    client.enqueue(topic, {"event": "c"}, id="jc")
    client.enqueue(topic, [1, 2], id="jplain")
    with RunningWorker(worker) as rw:
        wait_for(lambda: stats(client, topic)["dead"] == 2 and stats(client, topic)["acked"] == 2, 30, "outcomes")
        rw.stop()
    assert sorted(got) == [("a", "ja"), ("b", "jb")]
    dead = {d.id: d.last_error for d in client.list_dead(topic)}
    assert dead == {
        "jc": f'no handler for event "c" on topic "{topic}"',
        "jplain": f'no handler for event "" on topic "{topic}"',
    }
