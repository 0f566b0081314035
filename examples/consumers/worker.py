"""A dq consumer in Python (requests): reserve (long-poll), work, ack or nack."""
import os

import requests

DQ = os.environ.get("DQ", "http://127.0.0.1:7070")
IDLE_EXIT = os.environ.get("EXIT_WHEN_IDLE") == "1"  # for tests: stop when nothing is due


def close_if_unpaid(order):  # your work; must be idempotent
    if order < 0:
        raise ValueError(f"no such order {order}")
    print(f"closed order {order}")


s = requests.Session()
while True:
    jobs = s.post(f"{DQ}/v1/reserve", json={"topics": ["orders"], "max": 10,
                  "wait_ms": 1000 if IDLE_EXIT else 30000, "lease_ms": 60000}, timeout=40).json()["jobs"]
    if IDLE_EXIT and not jobs:
        break
    for job in jobs:
        url = f"{DQ}/v1/topics/orders/jobs/{requests.utils.quote(job['id'], safe='')}"
        try:
            close_if_unpaid(job["body"]["order"])
            s.post(f"{url}/ack", json={"token": job["token"]})
        except Exception as e:
            s.post(f"{url}/nack", json={"token": job["token"], "error": str(e)})
