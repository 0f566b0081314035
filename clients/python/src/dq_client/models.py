"""Typed results of the calls, and the items of batch calls.

Bodies: a JSON body comes back as the decoded JSON value (``json.loads`` of
the very text that was sent); a body sent as bytes (``body_base64`` on the
wire) comes back as :class:`bytes`. To send a JSON text exactly as written
(number spelling, key order, spacing), wrap it in :class:`RawJson`.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any, Mapping

__all__ = [
    "RawJson",
    "NewJob",
    "Enqueued",
    "JobInfo",
    "Job",
    "Nacked",
    "Released",
    "Cancelled",
    "AckItem",
    "NackItem",
    "TouchItem",
    "TopicStats",
    "TopicInfo",
    "TopicPage",
    "JobPage",
    "ScheduleInfo",
]


@dataclass(frozen=True)
class RawJson:
    """A JSON text sent as the job body exactly as written (checked with
    ``json.loads`` first): ``RawJson('{"amount": 1.10}')``."""

    text: str

    def __post_init__(self) -> None:
        json.loads(self.text)


def encode_body(body: Any, into: dict[str, Any]) -> RawJson | None:
    """Puts ``body`` into a request dict: bytes as ``body_base64``; a
    :class:`RawJson` is returned for the caller to splice in."""
    if isinstance(body, (bytes, bytearray, memoryview)):
        into["body_base64"] = base64.b64encode(bytes(body)).decode("ascii")
        return None
    if isinstance(body, RawJson):
        return body
    into["body"] = body
    return None


def decode_body(d: Mapping[str, Any]) -> Any:
    """The body of a job in a reply: bytes for ``body_base64``, else the JSON value."""
    b64 = d.get("body_base64")
    if isinstance(b64, str):
        return base64.b64decode(b64)
    return d.get("body")


@dataclass
class NewJob:
    """One job of :meth:`Client.enqueue_batch`; the fields are the enqueue's."""

    body: Any = None
    id: str | None = None
    delay_ms: int | None = None
    due_at_ms: int | None = None
    priority: int | None = None
    max_attempts: int | None = None
    lease_ms: int | None = None
    retry: Mapping[str, Any] | None = None
    replace: bool | None = None
    dedup_ms: int | None = None
    key: str | None = None

    def to_wire(self) -> tuple[dict[str, Any], RawJson | None]:
        d: dict[str, Any] = {}
        for name in (
            "id",
            "delay_ms",
            "due_at_ms",
            "priority",
            "max_attempts",
            "lease_ms",
            "retry",
            "replace",
            "dedup_ms",
            "key",
        ):
            v = getattr(self, name)
            if v is not None:
                d[name] = dict(v) if name == "retry" else v
        raw = encode_body(self.body, d)
        return d, raw


@dataclass(frozen=True)
class Enqueued:
    """The answer to an enqueue. ``created`` is false when the id existed
    (nothing changed) or the job was replaced (``replaced``);
    ``deduplicated``: nothing was stored (the id ended within its dedup
    window; ``due_at_ms`` and ``state`` are then ``None``)."""

    id: str
    created: bool
    replaced: bool = False
    deduplicated: bool = False
    due_at_ms: int | None = None
    state: str | None = None

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> Enqueued:
        return cls(
            id=d["id"],
            created=bool(d.get("created", False)),
            replaced=bool(d.get("replaced", False)),
            deduplicated=bool(d.get("deduplicated", False)),
            due_at_ms=d.get("due_at_ms"),
            state=d.get("state"),
        )


@dataclass(frozen=True)
class JobInfo:
    """A job as ``get``, the dead-letter list and the export listing show it.
    ``state``: ``scheduled``, ``ready``, ``reserved`` or ``dead``;
    ``attempts`` counts hand-outs so far. ``raw`` is the reply as decoded."""

    id: str
    state: str
    due_at_ms: int
    priority: int
    attempts: int
    body: Any
    topic: str | None = None
    max_attempts: int | None = None
    lease_ms: int | None = None
    last_error: str | None = None
    created_at_ms: int | None = None
    lease_deadline_ms: int | None = None
    died_at_ms: int | None = None
    key: str | None = None
    #: Its last failed attempts (at most ten), oldest first: dicts with
    #: ``attempt``, ``at_ms`` and ``error``.
    errors: list[Mapping[str, Any]] = field(default_factory=list)
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> JobInfo:
        return cls(
            id=d["id"],
            state=d.get("state", ""),
            due_at_ms=int(d.get("due_at_ms", 0)),
            priority=int(d.get("priority", 0)),
            attempts=int(d.get("attempts", 0)),
            body=decode_body(d),
            topic=d.get("topic"),
            max_attempts=d.get("max_attempts"),
            lease_ms=d.get("lease_ms"),
            last_error=d.get("last_error"),
            created_at_ms=d.get("created_at_ms"),
            lease_deadline_ms=d.get("lease_deadline_ms"),
            died_at_ms=d.get("died_at_ms"),
            key=d.get("key"),
            errors=list(d.get("errors") or []),
            raw=d,
        )


@dataclass(frozen=True)
class Job:
    """A leased job, as ``reserve`` hands it out and a worker's handler gets
    it: ``attempt`` is which hand-out this is (1 for the first), ``token``
    the lease (for ack, nack, touch, release), ``due_at_ms`` when it was
    due, ``lease_deadline_ms`` when the lease ends unless extended."""

    topic: str
    id: str
    token: str
    attempt: int
    due_at_ms: int
    lease_deadline_ms: int
    priority: int
    body: Any
    key: str | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> Job:
        return cls(
            topic=d["topic"],
            id=d["id"],
            token=d["token"],
            attempt=int(d.get("attempt", 1)),
            due_at_ms=int(d.get("due_at_ms", 0)),
            lease_deadline_ms=int(d.get("lease_deadline_ms", 0)),
            priority=int(d.get("priority", 0)),
            body=decode_body(d),
            key=d.get("key"),
            raw=d,
        )

    @property
    def due_at(self) -> float:
        """The due time as a Unix timestamp in seconds (``time.time()`` scale)."""
        return self.due_at_ms / 1000.0


@dataclass(frozen=True)
class Nacked:
    """The answer to a nack: ``state`` is ``scheduled`` (retried at
    ``due_at_ms``) or ``dead``."""

    id: str
    state: str
    due_at_ms: int | None = None


@dataclass(frozen=True)
class Released:
    """The answer to a release: the job waits again, due at ``due_at_ms``."""

    id: str
    state: str
    due_at_ms: int


@dataclass(frozen=True)
class Cancelled:
    """The answer to a cancel: ``state`` is the state the job had."""

    id: str
    state: str


@dataclass(frozen=True)
class AckItem:
    """One ack of :meth:`Client.ack_batch` (a :class:`Job` works too)."""

    topic: str
    id: str
    token: str


@dataclass(frozen=True)
class NackItem:
    """One nack of :meth:`Client.nack_batch`."""

    topic: str
    id: str
    token: str
    error: str | None = None
    retry_in_ms: int | None = None
    dead: bool = False
    priority: int | None = None

    def to_wire(self) -> dict[str, Any]:
        d: dict[str, Any] = {"topic": self.topic, "id": self.id, "token": self.token}
        if self.error is not None:
            d["error"] = self.error
        if self.retry_in_ms is not None:
            d["retry_in_ms"] = self.retry_in_ms
        if self.dead:
            d["dead"] = True
        if self.priority is not None:
            d["priority"] = self.priority
        return d


@dataclass(frozen=True)
class TouchItem:
    """One lease extension of :meth:`Client.touch_batch` (a :class:`Job` works too)."""

    topic: str
    id: str
    token: str
    lease_ms: int | None = None


@dataclass(frozen=True)
class TopicStats:
    """A topic's counts now (``scheduled``, ``ready``, ``reserved``,
    ``dead``), ``oldest_overdue_ms`` and the ``counters`` since it was
    created (``enqueued``, ``acked``, ``failed``, ``expired``, ``dead``, …)."""

    scheduled: int = 0
    ready: int = 0
    reserved: int = 0
    dead: int = 0
    oldest_overdue_ms: int = 0
    counters: Mapping[str, int] = field(default_factory=dict)
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_wire(cls, d: Mapping[str, Any] | None) -> TopicStats:
        d = d or {}
        return cls(
            scheduled=int(d.get("scheduled", 0)),
            ready=int(d.get("ready", 0)),
            reserved=int(d.get("reserved", 0)),
            dead=int(d.get("dead", 0)),
            oldest_overdue_ms=int(d.get("oldest_overdue_ms", 0)),
            counters=dict(d.get("counters") or {}),
            raw=d,
        )


@dataclass(frozen=True)
class TopicInfo:
    """A topic: its ``name``, ``config`` (the settings as dq shows them, a
    dict with the wire names), ``stats`` and ``config_sources`` (where each
    setting comes from, by its wire name: ``"default"`` for the topic's
    delivery mode or ``"set"``); ``None`` where not sent."""

    name: str
    config: Mapping[str, Any] | None
    stats: TopicStats | None
    config_sources: Mapping[str, str] | None = None

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> TopicInfo:
        stats = d.get("stats")
        return cls(
            name=d["name"],
            config=d.get("config"),
            stats=TopicStats.from_wire(stats) if stats is not None else None,
            config_sources=d.get("config_sources"),
        )


@dataclass(frozen=True)
class TopicPage:
    """One page of :meth:`Client.list_topics`; ``next_cursor`` is ``None`` on the last."""

    topics: list[TopicInfo]
    next_cursor: str | None


@dataclass(frozen=True)
class JobPage:
    """One page of :meth:`Client.list_jobs`; ``cursor`` is ``None`` on the last."""

    jobs: list[JobInfo]
    cursor: str | None


@dataclass(frozen=True)
class ScheduleInfo:
    """A schedule: ``spec`` as stored, ``rule`` in words, ``last`` slot dealt
    with, its ``last_job``, and up to 5 ``next`` slots (dicts with the wire
    names: ``at``, ``at_ms``)."""

    name: str
    spec: Mapping[str, Any]
    rule: str
    next: list[Mapping[str, Any]]
    last: Mapping[str, Any] | None = None
    last_job: Mapping[str, Any] | None = None

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> ScheduleInfo:
        return cls(
            name=d["name"],
            spec=d.get("spec") or {},
            rule=d.get("rule", ""),
            next=list(d.get("next") or []),
            last=d.get("last"),
            last_job=d.get("last_job"),
        )
