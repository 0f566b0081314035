"""A worker process for the SIGTERM test: ``sigterm_worker.py URL TOPIC LOG``.
Each handler logs ``start <id>``, works for 1.5 s, logs ``done <id>``."""

import sys
import threading
import time

from dq_client import Client, Job, Worker

url, topic, log_path = sys.argv[1:4]
lock = threading.Lock()


def log(line: str) -> None:
    with lock, open(log_path, "a") as f:
        f.write(line + "\n")
        f.flush()


def handler(job: Job) -> None:
    log(f"start {job.id}")
    time.sleep(1.5)
    log(f"done {job.id}")


worker = Worker(Client(url), concurrency=4, grace=20)
worker.handle(topic, handler)
worker.run()
print("stopped", worker.stats, flush=True)
