"""Errors: :class:`DqError` (dq answered with an error), :class:`TransportError`
(dq could not be reached, or the connection broke), and the two a worker's
handler raises to decide its job's outcome: :class:`Dead` and :class:`RetryLater`.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "DqClientError",
    "DqError",
    "TransportError",
    "Dead",
    "RetryLater",
    "error_from_reply",
]


class DqClientError(Exception):
    """Base of every error this package raises about a call."""


class DqError(DqClientError):
    """dq answered with an error: ``status`` (HTTP), ``code`` (dq's stable,
    machine-readable code such as ``job_not_found`` or ``invalid_delay``),
    ``message`` (for people) and ``retry_after_ms`` when dq sent
    ``Retry-After``.

    Also the value of a refused item in a batch's results (``status`` is then
    what the single call would have answered).
    """

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        retry_after_ms: int | None = None,
    ) -> None:
        super().__init__(f"dq {status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.retry_after_ms = retry_after_ms

    def __repr__(self) -> str:
        return (
            f"DqError(status={self.status!r}, code={self.code!r}, "
            f"message={self.message!r}, retry_after_ms={self.retry_after_ms!r})"
        )

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, DqError)
            and (self.status, self.code, self.message, self.retry_after_ms)
            == (other.status, other.code, other.message, other.retry_after_ms)
        )

    def __hash__(self) -> int:
        return hash((self.status, self.code, self.message))

    @property
    def transient(self) -> bool:
        """Whether trying again later may succeed (503: unavailable, shutting down)."""
        return self.status == 503


class TransportError(DqClientError):
    """dq could not be reached, the connection broke, or a call timed out.
    ``cause`` is the underlying exception (also the ``__cause__``)."""

    def __init__(
        self, message: str, cause: BaseException | None = None, *, sent: bool = True
    ) -> None:
        super().__init__(message)
        self.cause = cause
        #: False when the request never left (no connection could be
        #: opened): then it is safe to send again, whatever the call.
        self.sent = sent

    transient = True


class Dead(Exception):
    """Raise it from a worker's handler: the job goes to the dead letters at
    once (``nack`` with ``dead: true``), whatever attempts are left. The
    message is kept as the job's ``last_error``."""


class RetryLater(Exception):
    """Raise it from a worker's handler: the job is given back (``release``)
    and is due again after ``delay_ms``; the attempt is not counted
    ("not yet, look again in a minute")."""

    def __init__(self, delay_ms: int = 0, message: str = "") -> None:
        super().__init__(message or f"retry in {delay_ms} ms")
        self.delay_ms = int(delay_ms)


_ITEM_STATUS = {
    "job_not_found": 404,
    "topic_not_found": 404,
    "lease_mismatch": 409,
    "not_in_state": 409,
    "body_too_large": 413,
}


def error_from_reply(
    status: int, body: Any, retry_after_ms: int | None = None
) -> DqError:
    """The :class:`DqError` for an error reply (``{"error": {"code", "message"}}``)."""
    code = ""
    message = ""
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict):
            code = str(err.get("code", ""))
            message = str(err.get("message", ""))
    if not code:
        code = f"http_{status}"
    return DqError(status, code, message, retry_after_ms)


def item_error(body: Any) -> DqError:
    """A batch item's ``{"error": {...}}`` as the error the single call raises."""
    err = body.get("error", {}) if isinstance(body, dict) else {}
    code = str(err.get("code", "")) if isinstance(err, dict) else ""
    if code in _ITEM_STATUS:
        status = _ITEM_STATUS[code]
    elif code.startswith("store_"):
        status = 503
    else:
        status = 400
    return error_from_reply(status, body)
