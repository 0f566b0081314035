"""A dq consumer in Python (requests): reserve (long-poll), work, ack or nack.
Waits and retries while dq is unreachable or busy; stops on a refused key."""
import os
import sys
import time
from urllib.parse import quote

import requests

DQ = os.environ.get("DQ", "http://127.0.0.1:7070")
KEY = os.environ.get("DQ_TOKEN")  # an API key, when dq requires one
IDLE_EXIT = os.environ.get("EXIT_WHEN_IDLE") == "1"  # for tests: stop when nothing is due


def close_if_unpaid(order):  # your work; must be idempotent
    if order < 0:
        raise ValueError(f"no such order {order}")
    print(f"closed order {order}", flush=True)


s = requests.Session()
if KEY:
    s.headers["Authorization"] = f"Bearer {KEY}"
backoff = 1
while True:
    try:
        r = s.post(f"{DQ}/v1/reserve", json={"topics": ["orders"], "max": 10,
                   "wait_ms": 1000 if IDLE_EXIT else 30000, "lease_ms": 60000}, timeout=40)
        status, failure = r.status_code, str(r.status_code)
    except requests.RequestException as e:
        r, status, failure = None, 0, f"dq unreachable: {e.__class__.__name__}"
    if 400 <= status < 500 and status != 429:  # a refused key or a bad request: retrying won't help
        sys.exit(f"dq refused the reserve ({status}): {r.text}")
    if status != 200:  # dq down, restarting or busy: wait, try again
        wait = int(r.headers.get("Retry-After", backoff)) if r is not None else backoff
        print(f"reserve failed ({failure}), retrying in {wait} s", file=sys.stderr, flush=True)
        time.sleep(wait)
        backoff = min(backoff * 2, 30)
        continue
    backoff = 1
    jobs = r.json()["jobs"]
    if IDLE_EXIT and not jobs:
        break
    for job in jobs:  # an ack or nack that fails is fine: the job comes back after its lease
        url = f"{DQ}/v1/topics/orders/jobs/{quote(job['id'], safe='')}"
        try:
            close_if_unpaid(job["body"]["order"])
            s.post(f"{url}/ack", json={"token": job["token"]}, timeout=10)
        except requests.RequestException:
            pass
        except Exception as e:
            try:
                s.post(f"{url}/nack", json={"token": job["token"], "error": str(e)}, timeout=10)
            except requests.RequestException:
                pass
