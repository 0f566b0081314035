"""A small HTTP/1.1 transport on :mod:`http.client`: a pool of keep-alive
connections (each used by one thread at a time), TLS through :mod:`ssl`,
per-request timeouts, and one quiet retry on a fresh connection when a
reused keep-alive connection turns out to be closed by the server."""

from __future__ import annotations

import http.client
import os
import socket
import ssl
import threading
import time
import urllib.parse
from typing import Mapping

from .errors import TransportError

# dq closes a keep-alive connection idle for http_header_timeout (30 s by
# default); one idle for longer than this is not reused.
IDLE_LIMIT_S = 15.0

_STALE = (
    http.client.RemoteDisconnected,
    ConnectionResetError,
    ConnectionAbortedError,
    BrokenPipeError,
)


class Response:
    __slots__ = ("status", "headers", "data")

    def __init__(self, status: int, headers: Mapping[str, str], data: bytes) -> None:
        self.status = status
        self.headers = headers
        self.data = data


class Pool:
    """Keep-alive connections to one server."""

    def __init__(
        self,
        url: str,
        *,
        connect_timeout: float,
        ssl_context: ssl.SSLContext | None,
        max_idle: int = 64,
    ) -> None:
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https"):
            raise ValueError(f"dq URL must be http:// or https://, not {url!r}")
        if not u.hostname:
            raise ValueError(f"dq URL has no host: {url!r}")
        self.scheme = u.scheme
        self.host = u.hostname
        self.port = u.port or (443 if u.scheme == "https" else 80)
        self.prefix = u.path.rstrip("/")
        self.connect_timeout = connect_timeout
        self.ssl_context = ssl_context
        if self.scheme == "https" and self.ssl_context is None:
            self.ssl_context = ssl.create_default_context()
        self.max_idle = max_idle
        self._idle: list[tuple[http.client.HTTPConnection, float]] = []
        self._lock = threading.Lock()
        self._closed = False
        self._pid = os.getpid()

    def _new(self) -> http.client.HTTPConnection:
        if self.scheme == "https":
            return http.client.HTTPSConnection(
                self.host, self.port, timeout=self.connect_timeout, context=self.ssl_context
            )
        return http.client.HTTPConnection(self.host, self.port, timeout=self.connect_timeout)

    def _get(self) -> tuple[http.client.HTTPConnection, bool]:
        if self._pid != os.getpid():
            # A forked child must not share its parent's sockets.
            self._lock = threading.Lock()
            self._idle = []
            self._pid = os.getpid()
        now = time.monotonic()
        stale: list[http.client.HTTPConnection] = []
        found: http.client.HTTPConnection | None = None
        with self._lock:
            while self._idle:
                conn, since = self._idle.pop()
                if now - since > IDLE_LIMIT_S:
                    stale.append(conn)
                    continue
                found = conn
                break
        for c in stale:
            c.close()
        if found is not None:
            return found, True
        return self._new(), False

    def _put(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < self.max_idle:
                self._idle.append((conn, time.monotonic()))
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn, _ in idle:
            conn.close()

    def send(
        self,
        method: str,
        path: str,
        body: bytes | None,
        headers: Mapping[str, str],
        timeout: float,
    ) -> Response:
        target = self.prefix + path
        for fresh_try in (False, True):
            conn, reused = self._get() if not fresh_try else (self._new(), False)
            if conn.sock is None:
                conn.timeout = min(self.connect_timeout, timeout)
                try:
                    conn.connect()
                except (OSError, http.client.HTTPException) as e:
                    conn.close()
                    raise TransportError(
                        f"cannot connect to dq at {self.scheme}://{self.host}:{self.port}: {e!r}",
                        e,
                        sent=False,
                    ) from e
            try:
                assert conn.sock is not None
                conn.sock.settimeout(timeout)
                conn.request(method, target, body=body, headers=dict(headers))
                resp = conn.getresponse()
                data = resp.read()
            except _STALE as e:
                conn.close()
                if reused and not fresh_try:
                    continue  # a keep-alive connection the server had closed
                raise TransportError(f"connection to dq broke: {e!r}", e) from e
            except socket.timeout as e:
                conn.close()
                raise TransportError(f"dq did not answer within {timeout:g} s", e) from e
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                raise TransportError(
                    f"cannot reach dq at {self.scheme}://{self.host}:{self.port}: {e!r}", e
                ) from e
            hdrs = {k.lower(): v for k, v in resp.getheaders()}
            if resp.will_close:
                conn.close()
            else:
                self._put(conn)
            return Response(resp.status, hdrs, data)
        raise AssertionError("unreachable")
