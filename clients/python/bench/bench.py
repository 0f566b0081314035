"""Throughput of the Python Worker with a no-op handler (a benchmark, not a test).

    DQ_URL=http://127.0.0.1:7070 JOBS=20000 python clients/python/bench/bench.py

Enqueues JOBS jobs (default 20000) due now to a fresh topic in batches of
1000, then runs a Worker at concurrency 16 with a no-op handler until every
job is acked, and prints ``jobs/s: <n>`` (acked jobs / seconds from the
worker's start to the last ack). FORM=threads (a plain-function handler,
the default) or FORM=asyncio (an ``async def`` handler); FORM=both runs
each on its own topic and prints a line per form.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import uuid

from dq_client import Client, Job, NewJob, Worker


def enqueue(client: Client, topic: str, n: int) -> None:
    for k in range(0, n, 1000):
        res = client.enqueue_batch(topic, [NewJob({"i": i}) for i in range(k, min(n, k + 1000))])
        bad = [r for r in res if not hasattr(r, "created")]
        if bad:
            sys.exit(f"enqueue failed: {bad[0]}")


def run(client: Client, form: str, n: int) -> float:
    topic = f"bench-py-{form}-{uuid.uuid4().hex[:8]}"
    enqueue(client, topic, n)
    worker = Worker(client, concurrency=16)
    if form == "asyncio":

        async def noop_async(job: Job) -> None:
            return None

        worker.handle(topic, noop_async)
    else:

        def noop(job: Job) -> None:
            return None

        worker.handle(topic, noop)
    thread = threading.Thread(target=worker.run, daemon=True)
    start = time.monotonic()
    thread.start()
    last_ack = start
    acked = 0
    # The worker's own count of acks dq confirmed: no extra load on dq.
    while acked < n:
        time.sleep(0.005)
        if worker.stats.acked != acked:
            acked = worker.stats.acked
            last_ack = time.monotonic()
        if not thread.is_alive():
            sys.exit("the worker stopped early")
    worker.stop()
    thread.join(30)
    client.delete_topic(topic)
    return acked / (last_ack - start)


def main() -> None:
    url = os.environ.get("DQ_URL", "http://127.0.0.1:7070")
    n = int(os.environ.get("JOBS", "20000"))
    form = os.environ.get("FORM", "threads")
    client = Client(url)
    forms = ["threads", "asyncio"] if form == "both" else [form]
    for f in forms:
        rate = run(client, f, n)
        label = "" if len(forms) == 1 else f" ({f})"
        print(f"jobs/s: {rate:.0f}{label}", flush=True)


if __name__ == "__main__":
    main()
