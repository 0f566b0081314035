"""The README tour through a Python client generated from dq's OpenAPI
document (openapi-python-client), against a running dq serve.

    python3 tour.py GENERATED_DIR BASE_URL

GENERATED_DIR holds the generated `dq_client` package. Exits non-zero (an
AssertionError) on the first step that does not behave as documented."""
import sys
import time

sys.path.insert(0, sys.argv[1])
base = sys.argv[2]

from dq_client import Client  # noqa: E402
from dq_client.api.default import (  # noqa: E402
    ack, cancel_job, enqueue, get_job, list_dead, nack, put_topic, replay_dead, reserve)
from dq_client.models import (  # noqa: E402
    EnqueueRequest, NackRequest, ReplayDeadBody, ReserveRequest, TokenRequest, TopicConfigPatch)

c = Client(base_url=base, raise_on_unexpected_status=True)
t = f"py-tour-{int(time.time() * 1000)}"

# A topic whose jobs go dead on their first failure.
r = put_topic.sync_detailed(t, client=c, body=TopicConfigPatch(max_attempts=1))
assert r.status_code in (200, 201), r

# Close unpaid order 42 in 300 ms; the same id again changes nothing.
r = enqueue.sync_detailed(t, client=c, body=EnqueueRequest(id="order-42", delay_ms=300, body={"order": 42}))
assert r.status_code == 201 and r.parsed.created and r.parsed.state == "scheduled", r
again = enqueue.sync_detailed(t, client=c, body=EnqueueRequest(id="order-42", delay_ms=300, body={"order": 42}))
assert again.status_code == 200 and not again.parsed.created, again

# Order 43 is paid: cancel its timeout.
enqueue.sync(t, client=c, body=EnqueueRequest(id="order-43", delay_ms=300, body={"order": 43}))
r = cancel_job.sync_detailed(t, "order-43", client=c)
assert r.status_code == 200, r
assert get_job.sync_detailed(t, "order-43", client=c).status_code == 404

# Nothing is handed out early; order 42 comes when due.
early = reserve.sync(client=c, body=ReserveRequest(topics=[t], max_=10, wait_ms=0))
assert early.jobs == [], early
started = time.monotonic()
got = reserve.sync(client=c, body=ReserveRequest(topics=[t], max_=10, wait_ms=5000))
assert [j.id for j in got.jobs] == ["order-42"], got
assert got.jobs[0].body == {"order": 42}
assert time.monotonic() - started < 2
r = ack.sync_detailed(t, "order-42", client=c, body=TokenRequest(token=got.jobs[0].token))
assert r.status_code == 200, r
assert get_job.sync_detailed(t, "order-42", client=c).status_code == 404, "acked jobs are gone"

# A job that fails goes to the dead letters (max_attempts 1), and comes back on replay.
enqueue.sync(t, client=c, body=EnqueueRequest(id="order-44", body={"order": 44}))
job = reserve.sync(client=c, body=ReserveRequest(topics=[t], wait_ms=1000)).jobs[0]
out = nack.sync(t, job.id, client=c, body=NackRequest(token=job.token, error="payment API down"))
assert out.state == "dead", out
dead = list_dead.sync(t, client=c)
assert [j.id for j in dead.jobs] == ["order-44"], dead
assert dead.jobs[0].last_error == "payment API down"
r = replay_dead.sync(t, client=c, body=ReplayDeadBody(ids=["order-44"]))
assert r.replayed == 1, r
back = reserve.sync(client=c, body=ReserveRequest(topics=[t], wait_ms=1000)).jobs
assert [j.id for j in back] == ["order-44"] and back[0].attempt == 1, back
ack.sync(t, "order-44", client=c, body=TokenRequest(token=back[0].token))
print("tour ok")
