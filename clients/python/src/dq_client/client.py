"""The synchronous :class:`Client`: every call of dq's HTTP API that a
producer or a consumer makes, with typed results."""

from __future__ import annotations

import json
import random
import ssl
import time
import urllib.parse
from typing import Any, Iterable, Mapping, Sequence, Union

from . import __version__
from ._http import Pool
from .errors import DqError, TransportError, error_from_reply, item_error
from .models import (
    AckItem,
    Cancelled,
    Enqueued,
    Job,
    JobInfo,
    JobPage,
    NackItem,
    Nacked,
    NewJob,
    RawJson,
    Released,
    ScheduleInfo,
    TopicInfo,
    TopicPage,
    TouchItem,
    encode_body,
)

__all__ = ["Client"]

AckLike = Union[AckItem, Job]
TouchLike = Union[TouchItem, Job]


def seg(s: str) -> str:
    """Percent-encodes one path segment (a topic, a job id, a schedule name)."""
    return urllib.parse.quote(s, safe="-._~:")


def _dumps(obj: Mapping[str, Any], raw: RawJson | None = None) -> bytes:
    text = json.dumps(obj, separators=(",", ":"), allow_nan=False)
    if raw is not None:
        text = '{"body":' + raw.text + ("," + text[1:] if len(text) > 2 else "}")
    return text.encode("utf-8")


def _retry_after_ms(headers: Mapping[str, str]) -> int | None:
    v = headers.get("retry-after")
    if v is None:
        return None
    try:
        return max(0, int(float(v.strip()) * 1000))
    except ValueError:
        return None


class Client:
    """A client of one dq server.

    ``Client("http://127.0.0.1:7070", api_key="dqk_…")``. Thread-safe: it
    keeps a pool of keep-alive connections, one per thread making a call.

    - ``api_key``: sent as ``Authorization: Bearer`` (an API key or the
      admin token).
    - ``timeout``: seconds a call may take (a reserve's ``wait_ms`` is added).
    - ``connect_timeout``: seconds to open a connection.
    - ``retry_for``: seconds within which a ``503`` with ``Retry-After``, and
      a connection that cannot be opened, and a connection that broke during
      a call that is safe to repeat (reads, settings, touch, reserve, an
      enqueue with an id), are retried before the error is raised (0: never
      retry).
    - ``ca_file`` / ``verify`` / ``ssl_context``: TLS for ``https://``:
      certificates are verified against the system's roots by default;
      ``ca_file`` trusts a CA (or a self-signed certificate) instead;
      ``verify=False`` turns verification off (tests only).
    """

    def __init__(
        self,
        url: str,
        api_key: str | None = None,
        *,
        timeout: float = 60.0,
        connect_timeout: float = 5.0,
        retry_for: float = 30.0,
        ca_file: str | None = None,
        verify: bool = True,
        ssl_context: ssl.SSLContext | None = None,
        user_agent: str | None = None,
    ) -> None:
        if ssl_context is None and url.startswith("https:"):
            ssl_context = ssl.create_default_context(cafile=ca_file)
            if not verify:
                ssl_context.check_hostname = False
                ssl_context.verify_mode = ssl.CERT_NONE
        self.url = url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout
        self.retry_for = retry_for
        self._pool = Pool(self.url, connect_timeout=connect_timeout, ssl_context=ssl_context)
        self._headers = {
            "Accept": "application/json",
            "User-Agent": user_agent or f"dq-client-python/{__version__}",
        }
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"

    def with_retry_for(self, retry_for: float) -> Client:
        """A client sharing this one's connections, with another ``retry_for``."""
        c = object.__new__(Client)
        c.__dict__.update(self.__dict__)
        c.retry_for = retry_for
        return c

    def close(self) -> None:
        """Closes the idle connections (calls after it open new ones)."""
        self._pool.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Client({self.url!r})"

    # -- the one call path ------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        idempotent: bool = False,
        timeout: float | None = None,
        raw_body: RawJson | None = None,
    ) -> Any:
        """Sends one call (``path`` under the server URL, e.g. ``/v1/topics``)
        and returns the decoded JSON reply; raises :class:`DqError` for an
        error reply and :class:`TransportError` when dq cannot be reached."""
        payload = _dumps(body, raw_body) if body is not None else None
        return self._call(method, path, payload, idempotent, timeout)

    def _call(
        self,
        method: str,
        path: str,
        payload: bytes | None,
        idempotent: bool,
        timeout: float | None,
    ) -> Any:
        headers = dict(self._headers)
        if payload is not None:
            headers["Content-Type"] = "application/json"
        t = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + self.retry_for
        attempt = 0
        while True:
            attempt += 1
            try:
                resp = self._pool.send(method, path, payload, headers, t)
            except TransportError as e:
                wait = min(0.1 * 2 ** (attempt - 1), 2.0) * (0.75 + random.random() / 2)
                if (idempotent or not e.sent) and time.monotonic() + wait < deadline:
                    time.sleep(wait)
                    continue
                raise
            if 200 <= resp.status < 300:
                if not resp.data:
                    return None
                try:
                    return json.loads(resp.data)
                except ValueError as e:
                    raise TransportError(f"dq sent a reply that is not JSON: {e}", e) from e
            try:
                decoded = json.loads(resp.data) if resp.data else None
            except ValueError:
                decoded = None
            retry_after = _retry_after_ms(resp.headers)
            err = error_from_reply(resp.status, decoded, retry_after)
            if resp.status == 503 and retry_after is not None:
                wait = max(retry_after / 1000.0, 0.05)
                if time.monotonic() + wait < deadline:
                    time.sleep(wait)
                    continue
            raise err

    # -- jobs ---------------------------------------------------------------

    def enqueue(
        self,
        topic: str,
        body: Any = None,
        id: str | None = None,
        delay_ms: int | None = None,
        due_at_ms: int | None = None,
        priority: int | None = None,
        key: str | None = None,
        dedup_ms: int | None = None,
        replace: bool | None = None,
        max_attempts: int | None = None,
        lease_ms: int | None = None,
        retry: Mapping[str, Any] | None = None,
    ) -> Enqueued:
        """Enqueues one job on ``topic``. ``body``: any JSON value, ``bytes``
        (sent as ``body_base64``) or :class:`RawJson`. ``id`` makes it
        idempotent (and lets the call be retried); ``delay_ms`` or
        ``due_at_ms`` (Unix ms), not both; ``priority`` lower first;
        ``key`` a flow-control key; ``dedup_ms`` the dedup window;
        ``replace`` rewrites a waiting job with this id; ``max_attempts``,
        ``lease_ms``, ``retry`` override the topic's."""
        job = NewJob(
            body=body,
            id=id,
            delay_ms=delay_ms,
            due_at_ms=due_at_ms,
            priority=priority,
            key=key,
            dedup_ms=dedup_ms,
            replace=replace,
            max_attempts=max_attempts,
            lease_ms=lease_ms,
            retry=retry,
        )
        d, raw = job.to_wire()
        r = self.request(
            "POST",
            f"/v1/topics/{seg(topic)}/jobs",
            d,
            raw_body=raw,
            idempotent=id is not None,
        )
        return Enqueued.from_wire(r)

    def enqueue_batch(
        self, topic: str, jobs: Iterable[NewJob | Mapping[str, Any]]
    ) -> list[Enqueued | DqError]:
        """Enqueues 1 to 1000 jobs in one atomic step; a result per job, in
        order: :class:`Enqueued`, or the :class:`DqError` of a job that was
        invalid (and skipped). Items are :class:`NewJob` or dicts with the
        same fields."""
        parts: list[bytes] = []
        all_ids = True
        for j in jobs:
            nj = j if isinstance(j, NewJob) else NewJob(**dict(j))
            all_ids = all_ids and nj.id is not None
            d, raw = nj.to_wire()
            parts.append(_dumps(d, raw))
        # Items are spliced in as text so RawJson bodies stay exact.
        text = b'{"jobs":[' + b",".join(parts) + b"]}"
        r = self._call("POST", f"/v1/topics/{seg(topic)}/jobs:batch", text, all_ids, None)
        return [
            item_error(it) if "error" in it else Enqueued.from_wire(it) for it in r["results"]
        ]

    def get(self, topic: str, id: str) -> JobInfo:
        """The job (any state); :class:`DqError` ``job_not_found`` (404) when
        it is gone (acked, cancelled, purged) or never was."""
        r = self.request("GET", f"/v1/topics/{seg(topic)}/jobs/{seg(id)}", idempotent=True)
        return JobInfo.from_wire(r)

    def cancel(self, topic: str, id: str) -> Cancelled:
        """Deletes the job in any state; ``state`` is the state it had."""
        r = self.request("DELETE", f"/v1/topics/{seg(topic)}/jobs/{seg(id)}")
        return Cancelled(id=r.get("id", id), state=r.get("state", ""))

    def reschedule(
        self,
        topic: str,
        id: str,
        *,
        delay_ms: int | None = None,
        due_at_ms: int | None = None,
    ) -> int:
        """Moves a waiting job's due time (``delay_ms`` from now or
        ``due_at_ms``); returns the new due time. 409 ``not_in_state`` for a
        reserved or dead job."""
        d: dict[str, Any] = {}
        if delay_ms is not None:
            d["delay_ms"] = delay_ms
        if due_at_ms is not None:
            d["due_at_ms"] = due_at_ms
        r = self.request(
            "PATCH", f"/v1/topics/{seg(topic)}/jobs/{seg(id)}", d, idempotent=True
        )
        return int(r["due_at_ms"])

    def list_jobs(
        self,
        topic: str,
        *,
        state: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> JobPage:
        """One page of a topic's jobs (the export listing); pass the page's
        ``cursor`` to the next call until it is ``None``."""
        q = _query(state=state, limit=limit, cursor=cursor)
        r = self.request("GET", f"/v1/topics/{seg(topic)}/jobs{q}", idempotent=True)
        return JobPage(jobs=[JobInfo.from_wire(j) for j in r["jobs"]], cursor=r.get("cursor"))

    # -- consuming -----------------------------------------------------------

    def reserve(
        self,
        topics: str | Sequence[str],
        *,
        max: int = 1,
        lease_ms: int | None = None,
        wait_ms: int = 0,
    ) -> list[Job]:
        """Leases up to ``max`` due jobs of ``topics`` (one name or several),
        waiting up to ``wait_ms`` for one to become due."""
        names = [topics] if isinstance(topics, str) else list(topics)
        d: dict[str, Any] = {"topics": names, "max": max, "wait_ms": wait_ms}
        if lease_ms is not None:
            d["lease_ms"] = lease_ms
        r = self.request(
            "POST",
            "/v1/reserve",
            d,
            idempotent=True,
            timeout=self.timeout + wait_ms / 1000.0,
        )
        return [Job.from_wire(j) for j in r["jobs"]]

    def ack(self, topic: str, id: str, token: str) -> None:
        """The job is done and deleted. 409 ``lease_mismatch`` for a stale
        token; 404 ``job_not_found`` when it was cancelled meanwhile."""
        self.request(
            "POST", f"/v1/topics/{seg(topic)}/jobs/{seg(id)}/ack", {"token": token}
        )

    def nack(
        self,
        topic: str,
        id: str,
        token: str,
        *,
        error: str | None = None,
        retry_in_ms: int | None = None,
        dead: bool = False,
    ) -> Nacked:
        """The attempt failed: retried after ``retry_in_ms`` (or the retry
        policy) while attempts remain, else dead; ``dead=True``: dead at
        once. ``error`` is kept as the job's ``last_error``."""
        d: dict[str, Any] = {"token": token}
        if error is not None:
            d["error"] = error
        if retry_in_ms is not None:
            d["retry_in_ms"] = retry_in_ms
        if dead:
            d["dead"] = True
        r = self.request("POST", f"/v1/topics/{seg(topic)}/jobs/{seg(id)}/nack", d)
        return Nacked(id=r.get("id", id), state=r["state"], due_at_ms=r.get("due_at_ms"))

    def release(
        self, topic: str, id: str, token: str, *, delay_ms: int | None = None
    ) -> Released:
        """Gives the job back without counting the attempt; due again after
        ``delay_ms`` (default 0)."""
        d: dict[str, Any] = {"token": token}
        if delay_ms is not None:
            d["delay_ms"] = delay_ms
        r = self.request("POST", f"/v1/topics/{seg(topic)}/jobs/{seg(id)}/release", d)
        return Released(id=r.get("id", id), state=r.get("state", ""), due_at_ms=int(r["due_at_ms"]))

    def touch(
        self, topic: str, id: str, token: str, *, lease_ms: int | None = None
    ) -> int:
        """Extends the lease to now + ``lease_ms`` (default the job's, then the
        topic's lease); returns the new deadline (Unix ms)."""
        d: dict[str, Any] = {"token": token}
        if lease_ms is not None:
            d["lease_ms"] = lease_ms
        r = self.request(
            "POST", f"/v1/topics/{seg(topic)}/jobs/{seg(id)}/touch", d, idempotent=True
        )
        return int(r["lease_deadline_ms"])

    def ack_batch(self, items: Iterable[AckLike]) -> list[DqError | None]:
        """Acks up to 1000 jobs (:class:`AckItem` or the :class:`Job` itself)
        in one call; per item ``None`` (acked) or its :class:`DqError`."""
        acks = [{"topic": i.topic, "id": i.id, "token": i.token} for i in items]
        r = self.request("POST", "/v1/ack:batch", {"acks": acks})
        return [item_error(it) if "error" in it else None for it in r["results"]]

    def nack_batch(self, items: Iterable[NackItem]) -> list[Nacked | DqError]:
        """Nacks up to 1000 jobs in one call; per item :class:`Nacked` or its
        :class:`DqError`."""
        its = list(items)
        r = self.request("POST", "/v1/nack:batch", {"nacks": [i.to_wire() for i in its]})
        out: list[Nacked | DqError] = []
        for it, res in zip(its, r["results"]):
            if "error" in res:
                out.append(item_error(res))
            else:
                out.append(Nacked(id=it.id, state=res["state"], due_at_ms=res.get("due_at_ms")))
        return out

    def touch_batch(
        self, items: Iterable[TouchLike], *, lease_ms: int | None = None
    ) -> list[int | DqError]:
        """Extends up to 1000 leases in one call (:class:`TouchItem`, or
        :class:`Job` with ``lease_ms``); per item the new deadline or its
        :class:`DqError`."""
        touches = []
        for i in items:
            d: dict[str, Any] = {"topic": i.topic, "id": i.id, "token": i.token}
            lm = i.lease_ms if isinstance(i, TouchItem) and i.lease_ms is not None else lease_ms
            if lm is not None:
                d["lease_ms"] = lm
            touches.append(d)
        r = self.request("POST", "/v1/touch:batch", {"touches": touches}, idempotent=True)
        return [
            item_error(it) if "error" in it else int(it["lease_deadline_ms"])
            for it in r["results"]
        ]

    # -- topics ------------------------------------------------------------

    def get_topic(self, topic: str) -> TopicInfo:
        """The topic's settings and counts; 404 ``topic_not_found``."""
        return TopicInfo.from_wire(
            self.request("GET", f"/v1/topics/{seg(topic)}", idempotent=True)
        )

    def configure_topic(
        self, topic: str, settings: Mapping[str, Any] | None = None, /, **more: Any
    ) -> dict[str, Any]:
        """Changes a topic's settings (creating it if new): the wire names,
        as a dict and/or keywords, e.g. ``configure_topic("t",
        max_attempts=3, retry={"fixed_ms": 100}, rate_limit=None)``. Fields
        left out keep their value; ``None`` removes a limit. Returns the
        topic's settings."""
        d = dict(settings or {})
        d.update(more)
        r = self.request("PUT", f"/v1/topics/{seg(topic)}", d, idempotent=True)
        return dict(r.get("config") or {})

    def delete_topic(self, topic: str) -> int:
        """Deletes the topic and every job in it; returns how many jobs."""
        r = self.request("DELETE", f"/v1/topics/{seg(topic)}")
        return int(r.get("deleted_jobs", 0))

    def list_topics(
        self,
        *,
        prefix: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> TopicPage:
        """One page of topics in name order, with their counts."""
        q = _query(limit=limit, cursor=cursor, prefix=prefix)
        r = self.request("GET", f"/v1/topics{q}", idempotent=True)
        return TopicPage(
            topics=[TopicInfo.from_wire(t) for t in r["topics"]],
            next_cursor=r.get("next_cursor"),
        )

    def topics(self, prefix: str | None = None) -> list[TopicInfo]:
        """Every topic (following the pages), optionally those starting with ``prefix``."""
        out: list[TopicInfo] = []
        cursor: str | None = None
        while True:
            page = self.list_topics(prefix=prefix, limit=1000, cursor=cursor)
            out.extend(page.topics)
            if page.next_cursor is None:
                return out
            cursor = page.next_cursor

    # -- dead letters --------------------------------------------------------

    def list_dead(self, topic: str, *, offset: int = 0, limit: int = 100) -> list[JobInfo]:
        """The topic's dead letters, oldest death first."""
        q = _query(offset=offset, limit=limit)
        r = self.request("GET", f"/v1/topics/{seg(topic)}/dead{q}", idempotent=True)
        return [JobInfo.from_wire(j) for j in r["jobs"]]

    def replay_dead(self, topic: str, ids: Sequence[str] | None = None) -> int:
        """Makes dead letters due now with a fresh attempt count: those of
        ``ids``, or all when ``ids`` is ``None``. Returns how many."""
        d: dict[str, Any] = {} if ids is None else {"ids": list(ids)}
        r = self.request("POST", f"/v1/topics/{seg(topic)}/dead/replay", d, idempotent=True)
        return int(r["replayed"])

    def purge_dead(self, topic: str) -> int:
        """Deletes the topic's dead letters; returns how many."""
        r = self.request("DELETE", f"/v1/topics/{seg(topic)}/dead", idempotent=True)
        return int(r["purged"])

    # -- schedules -------------------------------------------------------------

    def put_schedule(
        self,
        name: str,
        topic: str,
        *,
        cron: str | None = None,
        every: str | None = None,
        timezone: str | None = None,
        body: Any = None,
        priority: int | None = None,
        catch_up: str | None = None,
        paused: bool | None = None,
        start_at: str | None = None,
        end_at: str | None = None,
    ) -> ScheduleInfo:
        """Creates or replaces a schedule that enqueues a job on ``topic`` at
        every slot of ``cron`` (with ``timezone``) or ``every`` (``"90s"``)."""
        d: dict[str, Any] = {"topic": topic}
        for k, v in (
            ("cron", cron),
            ("every", every),
            ("timezone", timezone),
            ("body", body),
            ("priority", priority),
            ("catch_up", catch_up),
            ("paused", paused),
            ("start_at", start_at),
            ("end_at", end_at),
        ):
            if v is not None:
                d[k] = v
        r = self.request("PUT", f"/v1/schedules/{seg(name)}", d, idempotent=True)
        return ScheduleInfo.from_wire(r)

    def get_schedule(self, name: str) -> ScheduleInfo:
        """One schedule; 404 ``schedule_not_found``."""
        return ScheduleInfo.from_wire(
            self.request("GET", f"/v1/schedules/{seg(name)}", idempotent=True)
        )

    def list_schedules(self) -> list[ScheduleInfo]:
        """Every schedule, by name."""
        r = self.request("GET", "/v1/schedules", idempotent=True)
        return [ScheduleInfo.from_wire(s) for s in r["schedules"]]

    def pause_schedule(self, name: str) -> ScheduleInfo:
        """Fires nothing more until resumed."""
        r = self.request("POST", f"/v1/schedules/{seg(name)}/pause", idempotent=True)
        return ScheduleInfo.from_wire(r)

    def resume_schedule(self, name: str) -> ScheduleInfo:
        """Fires again from now on."""
        r = self.request("POST", f"/v1/schedules/{seg(name)}/resume", idempotent=True)
        return ScheduleInfo.from_wire(r)

    def delete_schedule(self, name: str) -> None:
        """Deletes a schedule; 404 ``schedule_not_found``."""
        self.request("DELETE", f"/v1/schedules/{seg(name)}")

    # -- health ------------------------------------------------------------------

    def ready(self) -> bool:
        """Whether ``/readyz`` answers 200 (the store answers, not draining)."""
        try:
            self.with_retry_for(0).request("GET", "/readyz")
            return True
        except (DqError, TransportError):
            return False


def _query(**params: Any) -> str:
    items = [(k, str(v)) for k, v in params.items() if v is not None]
    return "?" + urllib.parse.urlencode(items, quote_via=urllib.parse.quote) if items else ""
