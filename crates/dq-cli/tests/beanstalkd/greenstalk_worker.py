"""A producer and a worker written against greenstalk (the Python beanstalkd
client), unchanged, talking to dq serve --beanstalkd. Usage:
greenstalk_worker.py BEANSTALKD_PORT HTTP_BASE. Prints "ok" when every check held."""
import json
import sys
import time
import urllib.request

import greenstalk

port, http = int(sys.argv[1]), sys.argv[2]
c = greenstalk.Client(("127.0.0.1", port), use="orders", watch="orders")
assert c.using() == "orders"
assert c.watching() == ["orders"]

# Producer: priorities 2, 1, 0 in turn; a worker gets them by (priority, id).
ids = [c.put(f"order {i}", priority=2 - i % 3, ttr=30) for i in range(9)]
assert ids == sorted(ids) and len(set(ids)) == 9, ids
expected = sorted(ids, key=lambda i: (2 - ids.index(i) % 3, i))

# The job is a dq job too.
with urllib.request.urlopen(f"{http}/v1/topics/orders/jobs/{ids[0]}") as r:
    assert json.load(r)["state"] == "ready"

got = []
for _ in range(9):
    job = c.reserve(timeout=2)
    assert job.body == f"order {ids.index(job.id)}", job.body
    got.append(job.id)
    c.delete(job)
assert got == expected, (got, expected)

# Delayed, released, buried, kicked, touched: greenstalk's own calls.
start = time.monotonic()
delayed = c.put("later", delay=1, ttr=10)
assert c.peek_delayed().id == delayed
job = c.reserve(timeout=3)
assert job.id == delayed and time.monotonic() - start >= 1.0
stats = c.stats_job(job)
assert stats["state"] == "reserved" and stats["tube"] == "orders" and stats["ttr"] == 10, stats
c.touch(job)
c.release(job, delay=0)
job = c.reserve(timeout=1)
assert job.id == delayed
c.bury(job)
assert c.peek_buried().id == delayed
assert c.kick(5) == 1
job = c.reserve(timeout=1)
c.delete(job)
try:
    c.reserve(timeout=0)
    raise AssertionError("nothing should be left")
except greenstalk.TimedOutError:
    pass
try:
    c.delete(123456789)
    raise AssertionError("NOT_FOUND expected")
except greenstalk.NotFoundError:
    pass

tube = c.stats_tube("orders")
assert tube["name"] == "orders" and tube["current-jobs-ready"] == 0, tube
assert "orders" in c.tubes()
assert c.stats()["current-connections"] >= 1
c.close()
print("ok")
