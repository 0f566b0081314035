"""The transport against a scripted HTTP server (no dq needed): 503 with
Retry-After retried within the bound, keep-alive reuse and reconnection,
the API key header, timeouts."""

from __future__ import annotations

import http.server
import json
import threading
import time
from typing import Any, Callable, Iterator

import pytest

from dq_client import Client, DqError, TransportError

Reply = tuple[int, dict[str, str], Any]


class Scripted:
    def __init__(self, replies: Callable[[str, str, dict[str, str], bytes], Reply]) -> None:
        self.requests: list[tuple[str, str, dict[str, str], bytes, int]] = []
        self.close_after_each = False
        self.hang_up = False
        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                pass

            def _handle(self) -> None:
                n = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(n) if n else b""
                hdrs = {k.lower(): v for k, v in self.headers.items()}
                outer.requests.append((self.command, self.path, hdrs, body, id(self.connection)))
                if outer.hang_up:
                    self.close_connection = True
                    return
                status, extra, payload = replies(self.command, self.path, hdrs, body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in extra.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)
                if outer.close_after_each:
                    self.close_connection = True

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _handle

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def scripted() -> Iterator[Callable[..., Scripted]]:
    made: list[Scripted] = []

    def make(replies: Callable[[str, str, dict[str, str], bytes], Reply]) -> Scripted:
        s = Scripted(replies)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


JOB = {"topic": "t", "id": "x", "state": "ready", "due_at_ms": 1, "priority": 1, "attempts": 0, "body": {"a": 1}}
UNAVAILABLE = {"error": {"code": "store_unavailable", "message": "redis down"}}


def test_503_retry_after_is_retried(scripted: Callable[..., Scripted]) -> None:
    calls = {"n": 0}

    def replies(m: str, p: str, h: dict[str, str], b: bytes) -> Reply:
        calls["n"] += 1
        if calls["n"] <= 2:
            return 503, {"Retry-After": "0"}, UNAVAILABLE
        return 200, {}, JOB

    s = scripted(replies)
    c = Client(s.url, api_key="dqk_secret")
    assert c.get("t", "x").body == {"a": 1}
    assert calls["n"] == 3
    assert all(r[2]["authorization"] == "Bearer dqk_secret" for r in s.requests)
    # all three over one keep-alive connection
    assert len({r[4] for r in s.requests}) == 1


def test_503_gives_up_after_bound(scripted: Callable[..., Scripted]) -> None:
    s = scripted(lambda *a: (503, {"Retry-After": "1"}, UNAVAILABLE))
    c = Client(s.url, retry_for=1.5)
    t0 = time.monotonic()
    with pytest.raises(DqError) as ei:
        c.ack("t", "x", "tok")  # retried too: the server said when to come back
    took = time.monotonic() - t0
    assert ei.value.status == 503 and ei.value.code == "store_unavailable"
    assert ei.value.retry_after_ms == 1000
    assert 0.9 < took < 3 and len(s.requests) == 2


def test_503_without_retry_after_not_retried(scripted: Callable[..., Scripted]) -> None:
    s = scripted(lambda *a: (503, {}, {"error": {"code": "store_outcome_unknown", "message": "m"}}))
    with pytest.raises(DqError) as ei:
        Client(s.url).get("t", "x")
    assert ei.value.code == "store_outcome_unknown" and ei.value.retry_after_ms is None
    assert len(s.requests) == 1


def test_reconnects_after_server_closes(scripted: Callable[..., Scripted]) -> None:
    s = scripted(lambda *a: (200, {}, JOB))
    c = Client(s.url, retry_for=0)
    c.get("t", "x")
    # The server drops its keep-alive connections (as a restart or idle limit would).
    s.close_after_each = True
    c.get("t", "x")  # answered, then closed by the server
    c.ack("t", "x", "tok")  # not idempotent: still goes through on a fresh connection
    assert len(s.requests) == 3


def test_error_reply_without_json(scripted: Callable[..., Scripted]) -> None:
    s = scripted(lambda *a: (502, {}, "bad gateway"))
    with pytest.raises(DqError) as ei:
        Client(s.url).get("t", "x")
    assert ei.value.status == 502 and ei.value.code == "http_502"


def test_timeout_is_transport_error(scripted: Callable[..., Scripted]) -> None:
    def slow(*a: Any) -> Reply:
        time.sleep(1.5)
        return 200, {}, JOB

    s = scripted(slow)
    with pytest.raises(TransportError) as ei:
        Client(s.url, timeout=0.3, retry_for=0).get("t", "x")
    assert "0.3" in str(ei.value)


def test_path_segments_are_encoded(scripted: Callable[..., Scripted]) -> None:
    s = scripted(lambda *a: (200, {}, JOB))
    Client(s.url).get("orders/eu", "a b?#%")
    assert s.requests[0][1] == "/v1/topics/orders%2Feu/jobs/a%20b%3F%23%25"


def test_https_needs_verification() -> None:
    c = Client("https://127.0.0.1:1", retry_for=0, connect_timeout=0.5)
    assert c._pool.ssl_context is not None
    assert c._pool.ssl_context.check_hostname


def test_broken_call_retried_only_when_repeatable(scripted: Callable[..., Scripted]) -> None:
    s = scripted(lambda *a: (200, {}, JOB))
    s.hang_up = True  # read the request, then close without an answer
    c = Client(s.url, retry_for=0.5)
    with pytest.raises(TransportError) as ei:
        c.ack("t", "x", "tok")
    assert ei.value.sent is True
    # one try, plus one on a fresh connection only if the first was a reused one
    assert len(s.requests) == 1
    with pytest.raises(TransportError):
        c.get("t", "x")
    assert len(s.requests) > 2  # a read is retried within retry_for


def test_forked_child_opens_its_own_connection(scripted: Callable[..., Scripted]) -> None:
    import os

    s = scripted(lambda *a: (200, {}, JOB))
    c = Client(s.url)
    c.get("t", "x")
    pid = os.fork()
    if pid == 0:  # the child: one call, on a connection of its own
        try:
            c.get("t", "x")
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    c.get("t", "x")  # the parent's kept-alive connection still works
    conns = [r[4] for r in s.requests]
    assert len(conns) == 3 and conns[0] == conns[2] != conns[1]
