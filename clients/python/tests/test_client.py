"""Every client call against a real dq serve, and its errors."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from conftest import STORES, DqServer, raw_get, stats

from dq_client import (
    AckItem,
    AsyncClient,
    Client,
    DqError,
    Enqueued,
    Job,
    NackItem,
    NewJob,
    RawJson,
    TouchItem,
    TransportError,
)

BODIES: list[Any] = [
    {"order": 42, "items": [1, 2.5, "x"], "nested": {"a": None, "b": True}},
    [1, "two", {"three": 3}],
    "a string with \"quotes\" and ünïcode ✓",
    123456789012345678901234567890,
    -0.5,
    None,
    False,
    {},
]


def reserve_one(client: Client, topic: str, **kw: Any) -> Job:
    jobs = client.reserve(topic, max=1, wait_ms=2000, **kw)
    assert len(jobs) == 1, jobs
    return jobs[0]


def test_bodies_round_trip(client: Client, topic: str) -> None:
    for i, body in enumerate(BODIES):
        e = client.enqueue(topic, body, id=f"j{i}")
        assert e.created and e.id == f"j{i}"
        assert client.get(topic, f"j{i}").body == body
    # bytes travel as body_base64 and come back as bytes
    blob = bytes(range(256))
    client.enqueue(topic, blob, id="bytes")
    assert client.get(topic, "bytes").body == blob
    # a RawJson text is stored exactly as written
    client.enqueue(topic, RawJson('{"amount": 1.10, "z": 1, "a": 2}'), id="raw", priority=7)
    got = client.get(topic, "raw")
    assert got.body == {"amount": 1.1, "z": 1, "a": 2} and got.priority == 7
    status, text = raw_get(f"{client.url}/v1/topics/{topic}/jobs/raw")
    assert status == 200 and b'{"amount": 1.10, "z": 1, "a": 2}' in text
    # and through reserve
    jobs = client.reserve(topic, max=100, wait_ms=1000)
    by_id = {j.id: j for j in jobs}
    assert by_id["bytes"].body == blob
    for i, body in enumerate(BODIES):
        assert by_id[f"j{i}"].body == body


def test_enqueue_options(client: Client, topic: str) -> None:
    now = int(time.time() * 1000)
    e = client.enqueue(topic, {"a": 1}, id="later", delay_ms=60_000, priority=5)
    assert isinstance(e, Enqueued) and e.created and e.state == "scheduled"
    assert e.due_at_ms is not None and e.due_at_ms >= now + 59_000
    again = client.enqueue(topic, {"a": 2}, id="later")
    assert not again.created and not again.replaced and again.due_at_ms == e.due_at_ms
    assert client.get(topic, "later").body == {"a": 1}
    rep = client.enqueue(topic, {"a": 3}, id="later", delay_ms=0, replace=True)
    assert rep.replaced and client.get(topic, "later").body == {"a": 3}
    at = now + 120_000
    e2 = client.enqueue(topic, "x", id="at", due_at_ms=at, key="tenant-1", max_attempts=2, lease_ms=5000)
    assert e2.due_at_ms == at
    info = client.get(topic, "at")
    assert info.key == "tenant-1" and info.max_attempts == 2 and info.lease_ms == 5000
    # dedup window: an ended id enqueued again stores nothing
    client.enqueue(topic, 1, id="dd", dedup_ms=60_000)
    client.cancel(topic, "dd")
    d = client.enqueue(topic, 1, id="dd")
    assert d.deduplicated and not d.created and d.state is None
    # without an id dq makes one
    gen = client.enqueue(topic, {"x": 1})
    assert gen.id and gen.created


def test_enqueue_errors(client: Client, topic: str) -> None:
    with pytest.raises(DqError) as ei:
        client.enqueue("bad topic!", 1)
    assert ei.value.status == 400 and ei.value.code == "invalid_topic"
    with pytest.raises(DqError) as ei:
        client.enqueue(topic, 1, delay_ms=10, due_at_ms=10)
    assert ei.value.code == "invalid_delay"
    with pytest.raises(DqError) as ei:
        client.enqueue(topic, 1, delay_ms=-1)
    assert ei.value.code == "invalid_delay"
    with pytest.raises(DqError) as ei:
        client.enqueue(topic, 1, lease_ms=1)
    assert ei.value.code == "invalid_lease" and "lease" in ei.value.message
    with pytest.raises(ValueError):
        client.enqueue(topic, float("nan"))


def test_enqueue_batch(client: Client, topic: str) -> None:
    res = client.enqueue_batch(
        topic,
        [
            NewJob({"n": 1}, id="b1"),
            {"body": {"n": 2}, "id": "b2", "delay_ms": 60_000},
            NewJob(b"\x00\x01", id="b3"),
            NewJob(1, id="bad", delay_ms=-5),
            NewJob(RawJson("[1, 2 ,3]"), id="b4"),
            NewJob(2, id="b1"),
        ],
    )
    assert [type(r) for r in res] == [Enqueued, Enqueued, Enqueued, DqError, Enqueued, Enqueued]
    assert isinstance(res[3], DqError) and res[3].code == "invalid_delay" and res[3].status == 400
    assert isinstance(res[5], Enqueued) and not res[5].created
    assert isinstance(res[1], Enqueued) and res[1].state == "scheduled"
    assert client.get(topic, "b3").body == b"\x00\x01"
    assert client.get(topic, "b4").body == [1, 2, 3]
    with pytest.raises(DqError) as ei:
        client.enqueue_batch(topic, [])
    assert ei.value.code == "invalid_batch"


def test_get_cancel_reschedule(client: Client, topic: str) -> None:
    with pytest.raises(DqError) as ei:
        client.get(topic, "nope")
    assert ei.value.status == 404 and ei.value.code in ("job_not_found", "topic_not_found")
    client.enqueue(topic, 1, id="a", delay_ms=60_000)
    due = client.reschedule(topic, "a", delay_ms=0)
    assert abs(due - time.time() * 1000) < 5_000
    later = int(time.time() * 1000) + 300_000
    assert client.reschedule(topic, "a", due_at_ms=later) == later
    assert client.get(topic, "a").state == "scheduled"
    c = client.cancel(topic, "a")
    assert c.id == "a" and c.state == "scheduled"
    with pytest.raises(DqError) as ei:
        client.cancel(topic, "a")
    assert ei.value.code == "job_not_found"
    with pytest.raises(DqError) as ei:
        client.get(topic, "a")
    assert ei.value.code == "job_not_found"
    # reschedule of a reserved job: not_in_state
    client.enqueue(topic, 1, id="r")
    reserve_one(client, topic)
    with pytest.raises(DqError) as ei:
        client.reschedule(topic, "r", delay_ms=10)
    assert ei.value.status == 409 and ei.value.code == "not_in_state"
    with pytest.raises(DqError) as ei:
        client.reschedule(topic, "gone", delay_ms=10)
    assert ei.value.status == 404


def test_reserve_ack_nack_touch_release(client: Client, topic: str) -> None:
    for i in range(3):
        client.enqueue(topic, {"i": i}, id=f"j{i}", priority=i)
    job = reserve_one(client, topic, lease_ms=10_000)
    assert job.id == "j0" and job.attempt == 1 and job.topic == topic and job.token
    assert job.lease_deadline_ms > job.due_at_ms and job.body == {"i": 0}
    assert client.get(topic, "j0").state == "reserved"
    deadline = client.touch(topic, "j0", job.token, lease_ms=20_000)
    assert deadline >= job.lease_deadline_ms
    # wrong token: lease_mismatch; unknown job: job_not_found
    with pytest.raises(DqError) as ei:
        client.ack(topic, "j0", "not-the-token")
    assert ei.value.status == 409 and ei.value.code == "lease_mismatch"
    with pytest.raises(DqError) as ei:
        client.ack(topic, "nope", job.token)
    assert ei.value.status == 404 and ei.value.code == "job_not_found"
    with pytest.raises(DqError) as ei:
        client.touch(topic, "j0", "stale")
    assert ei.value.code == "lease_mismatch"
    client.ack(topic, "j0", job.token)
    with pytest.raises(DqError):
        client.get(topic, "j0")
    # release: back, not counted
    j1 = reserve_one(client, topic)
    rel = client.release(topic, j1.id, j1.token, delay_ms=0)
    assert rel.id == "j1" and rel.state in ("ready", "scheduled")
    j1b = reserve_one(client, topic)
    assert j1b.id == "j1" and j1b.attempt == 1
    # nack with retry_in_ms → scheduled; the attempt counts
    n = client.nack(topic, "j1", j1b.token, error="boom", retry_in_ms=60_000)
    assert n.state == "scheduled" and n.due_at_ms is not None
    info = client.get(topic, "j1")
    assert info.last_error == "boom" and info.attempts == 1
    assert [(e["attempt"], e["error"]) for e in info.errors] == [(1, "boom")]
    # nack dead
    j2 = reserve_one(client, topic)
    d = client.nack(topic, j2.id, j2.token, error="fatal", dead=True)
    assert d.state == "dead"
    with pytest.raises(DqError) as ei:
        client.ack(topic, j2.id, j2.token)
    assert ei.value.status == 409
    with pytest.raises(DqError) as ei:
        client.reserve(topic, max=0)
    assert ei.value.code == "invalid_max"


def test_batches(client: Client, topic: str) -> None:
    client.enqueue_batch(topic, [NewJob(i, id=f"k{i}") for i in range(6)])
    jobs = client.reserve(topic, max=6, wait_ms=1000, lease_ms=10_000)
    assert sorted(j.id for j in jobs) == [f"k{i}" for i in range(6)]
    by = {j.id: j for j in jobs}
    touched = client.touch_batch(
        [by["k0"], TouchItem(topic, "k1", by["k1"].token, lease_ms=15_000), TouchItem(topic, "k2", "bad")],
        lease_ms=12_000,
    )
    assert isinstance(touched[0], int) and isinstance(touched[1], int)
    assert isinstance(touched[2], DqError) and touched[2].code == "lease_mismatch"
    acked = client.ack_batch([by["k0"], AckItem(topic, "k1", by["k1"].token), AckItem(topic, "zz", "t")])
    assert acked[0] is None and acked[1] is None
    assert isinstance(acked[2], DqError) and acked[2].code == "job_not_found" and acked[2].status == 404
    nacked = client.nack_batch(
        [
            NackItem(topic, "k2", by["k2"].token, error="e2", retry_in_ms=60_000),
            NackItem(topic, "k3", by["k3"].token, error="e3", dead=True),
            NackItem(topic, "k4", "wrong"),
        ]
    )
    assert nacked[0].state == "scheduled" and nacked[1].state == "dead"  # type: ignore[union-attr]
    assert isinstance(nacked[2], DqError) and nacked[2].code == "lease_mismatch"
    assert client.get(topic, "k2").last_error == "e2"
    with pytest.raises(DqError) as ei:
        client.ack_batch([])
    assert ei.value.code == "invalid_batch"


def test_topics(client: Client, topic: str) -> None:
    with pytest.raises(DqError) as ei:
        client.get_topic(topic)
    assert ei.value.status == 404 and ei.value.code == "topic_not_found"
    cfg = client.configure_topic(topic, max_attempts=3, retry={"fixed_ms": 100}, lease_ms=5000)
    assert cfg["max_attempts"] == 3 and cfg["lease_ms"] == 5000
    cfg = client.configure_topic(topic, {"rate_limit": {"limit": 10, "per_ms": 1000}})
    assert cfg["max_attempts"] == 3 and cfg.get("rate_limit")
    cfg = client.configure_topic(topic, rate_limit=None, paused=False)
    assert not cfg.get("rate_limit")
    with pytest.raises(DqError) as ei:
        client.configure_topic(topic, max_attempts=0)
    assert ei.value.code == "invalid_max_attempts"
    with pytest.raises(DqError) as ei:
        client.configure_topic(topic, no_such_setting=1)
    assert ei.value.code == "invalid_json"
    client.enqueue(topic, 1, id="a")
    client.enqueue(topic, 1, id="b", delay_ms=60_000)
    info = client.get_topic(topic)
    assert info.name == topic and info.stats is not None
    assert info.stats.ready == 1 and info.stats.scheduled == 1
    assert info.stats.counters["enqueued"] == 2
    assert info.config is not None and info.config["max_attempts"] == 3
    assert info.config_sources is not None
    assert info.config_sources["max_attempts"] == "set"
    assert info.config_sources["partitions"] == "default"
    page = client.list_topics(prefix=topic, limit=10)
    assert [t.name for t in page.topics] == [topic] and page.next_cursor is None
    assert [t.name for t in client.topics(prefix=topic)] == [topic]
    listed = client.list_jobs(topic, limit=100)
    assert sorted(j.id for j in listed.jobs) == ["a", "b"]
    assert client.delete_topic(topic) == 2
    with pytest.raises(DqError):
        client.get_topic(topic)
    with pytest.raises(DqError) as ei:
        client.list_topics(limit=0)
    assert ei.value.code == "invalid_limit"


def test_dead_letters(client: Client, topic: str) -> None:
    with pytest.raises(DqError) as ei:
        client.list_dead(topic)
    assert ei.value.code == "topic_not_found"
    for i in range(3):
        client.enqueue(topic, {"i": i}, id=f"d{i}")
    for j in client.reserve(topic, max=3, wait_ms=1000):
        client.nack(topic, j.id, j.token, error=f"bad {j.id}", dead=True)
    dead = client.list_dead(topic)
    assert sorted(d.id for d in dead) == ["d0", "d1", "d2"]
    d0 = next(d for d in dead if d.id == "d0")
    assert d0.state == "dead" and d0.last_error == "bad d0" and d0.body == {"i": 0}
    assert d0.died_at_ms is not None and d0.attempts == 1
    assert len(client.list_dead(topic, offset=1, limit=1)) == 1
    assert client.replay_dead(topic, ["d0"]) == 1
    assert client.get(topic, "d0").state in ("ready", "scheduled")
    assert client.purge_dead(topic) == 2
    assert client.list_dead(topic) == []
    for j in client.reserve(topic, max=3, wait_ms=1000):
        client.nack(topic, j.id, j.token, dead=True)
    assert client.replay_dead(topic) == 1


def test_schedules(client: Client, topic: str) -> None:
    name = f"s-{topic}"
    with pytest.raises(DqError) as ei:
        client.get_schedule(name)
    assert ei.value.status == 404 and ei.value.code == "schedule_not_found"
    s = client.put_schedule(name, topic, every="1h", body={"report": "hourly"}, priority=3)
    assert s.name == name and s.spec["topic"] == topic and s.rule and len(s.next) >= 1
    s2 = client.put_schedule(name, topic, cron="0 9 * * MON-FRI", timezone="Europe/Berlin")
    assert s2.spec["cron"] == "0 9 * * MON-FRI"
    assert name in [x.name for x in client.list_schedules()]
    assert client.get_schedule(name).name == name
    p = client.pause_schedule(name)
    assert p.spec.get("paused") is True and p.next == []
    r = client.resume_schedule(name)
    assert not r.spec.get("paused") and r.next
    with pytest.raises(DqError) as ei:
        client.put_schedule(name, topic, cron="not a cron")
    assert ei.value.code == "invalid_cron"
    client.delete_schedule(name)
    with pytest.raises(DqError) as ei:
        client.delete_schedule(name)
    assert ei.value.code == "schedule_not_found"


def test_transport_error() -> None:
    from conftest import free_port

    c = Client(f"http://127.0.0.1:{free_port()}", retry_for=0.5, connect_timeout=1)
    t0 = time.monotonic()
    with pytest.raises(TransportError):
        c.get("t", "x")  # idempotent: retried for 0.5 s, then raised
    assert time.monotonic() - t0 < 5
    with pytest.raises(TransportError) as ei:
        c.ack("t", "x", "tok")  # never sent: retried too, then raised
    assert ei.value.sent is False
    assert not c.ready()


def test_async_client(server: DqServer, topic: str) -> None:
    async def main() -> None:
        async with AsyncClient(server.url) as ac:
            e = await ac.enqueue(topic, {"a": 1}, id="x")
            assert e.created
            jobs = await ac.reserve(topic, max=1, wait_ms=1000)
            assert [j.id for j in jobs] == ["x"]
            await ac.ack(topic, "x", jobs[0].token)
            with pytest.raises(DqError) as ei:
                await ac.get(topic, "x")
            assert ei.value.code == "job_not_found"
            res = await asyncio.gather(*(ac.enqueue(topic, i) for i in range(20)))
            assert all(r.created for r in res)
            assert (await ac.get_topic(topic)).stats.ready == 20  # type: ignore[union-attr]

    asyncio.run(main())


def test_keep_alive_reuse(client: Client, topic: str) -> None:
    # Many calls go over few connections, and a server-side close is survived.
    for i in range(50):
        client.enqueue(topic, i)
    assert len(client._pool._idle) <= 2
    assert stats(client, topic)["ready"] == 50


@pytest.mark.parametrize("own_server", ["embedded"], indirect=True)
def test_api_key(own_server: DqServer, topic: str) -> None:
    # Embedded only: a key turns auth on for every client of the store, and
    # the Redis store may be shared with other suites.
    admin = Client(own_server.url)
    created = admin.request(
        "POST", "/v1/keys", {"name": "py-test", "scopes": ["admin"]}
    )
    secret = created["secret"]
    with pytest.raises(DqError) as ei:
        admin.enqueue(topic, 1)
    assert ei.value.status == 401 and ei.value.code == "unauthorized"
    keyed = Client(own_server.url, api_key=secret)
    assert keyed.enqueue(topic, 1, id="k").created
    assert keyed.get(topic, "k").body == 1
    wrong = Client(own_server.url, api_key="dqk_" + "0" * 64)
    with pytest.raises(DqError) as ei:
        wrong.get(topic, "k")
    assert ei.value.code == "unauthorized"


def test_json_helpers_exported() -> None:
    assert json.loads(RawJson("[1]").text) == [1]
    with pytest.raises(ValueError):
        RawJson("{not json")


@pytest.fixture(params=STORES)
def tls_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DqServer]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    cert, key = str(tmp_path / "cert.pem"), str(tmp_path / "key.pem")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", key, "-out", cert, "-days", "2", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )
    s = DqServer(request.param, tls=(cert, key))
    try:
        s.start()
        yield s
    finally:
        s.close()


def test_tls(tls_server: DqServer, topic: str) -> None:
    assert tls_server.tls is not None
    c = Client(tls_server.url, ca_file=tls_server.tls[0])
    assert c.enqueue(topic, {"tls": True}, id="t").created
    assert c.get(topic, "t").body == {"tls": True}
    for _ in range(5):  # over one kept-alive TLS connection
        c.get_topic(topic)
    assert len(c._pool._idle) == 1
    with pytest.raises(TransportError) as ei:
        Client(tls_server.url, retry_for=0).get(topic, "t")  # not trusted: refused
    assert "CERTIFICATE" in str(ei.value).upper()
    assert Client(tls_server.url, verify=False).get(topic, "t").body == {"tls": True}
