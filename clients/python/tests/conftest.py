"""Fixtures: a real ``dq serve`` per store (embedded; and Redis when
``DQ_TEST_REDIS_URL`` is set), started from ``DQ_BIN`` (default
``<repo>/target/debug/dq``) on a free loopback port, killed after."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

from dq_client import Client

REPO = Path(__file__).resolve().parents[3]
REDIS_URL = os.environ.get("DQ_TEST_REDIS_URL") or None
STORES = ["embedded"] + (["redis"] if REDIS_URL else [])


def dq_bin() -> str:
    path = os.environ.get("DQ_BIN") or str(REPO / "target" / "debug" / "dq")
    if not os.access(path, os.X_OK):
        pytest.fail(
            f"no dq binary at {path}: build it (cargo build -p dq-cli) or set DQ_BIN",
            pytrace=False,
        )
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class DqServer:
    """One ``dq serve`` process; ``restart()`` keeps its port and data."""

    def __init__(self, store: str, tls: tuple[str, str] | None = None) -> None:
        self.store = store
        self.tls = tls
        self.port = free_port()
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        self.data_dir = tempfile.mkdtemp(prefix="dq-py-")
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = open(os.path.join(self.data_dir, "serve.log"), "ab")

    def args(self) -> list[str]:
        a = [
            dq_bin(),
            "serve",
            "--listen",
            f"127.0.0.1:{self.port}",
            "--config",
            "/dev/null",
            "--shutdown-grace",
            "3s",
            "--log-level",
            "warn",
        ]
        if self.tls:
            a += ["--tls-cert", self.tls[0], "--tls-key", self.tls[1]]
        if self.store == "redis":
            assert REDIS_URL
            a += ["--redis", REDIS_URL, "--redis-timeout", "1s"]
        else:
            a += ["--data-dir", os.path.join(self.data_dir, "data")]
        return a

    def start(self, timeout: float = 20.0) -> None:
        self.proc = subprocess.Popen(
            self.args(), stdout=self.log, stderr=self.log, stdin=subprocess.DEVNULL
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"dq serve exited with {self.proc.returncode}: "
                    + Path(self.log.name).read_text(errors="replace")[-2000:]
                )
            try:
                ctx = ssl.create_default_context(cafile=self.tls[0]) if self.tls else None
                with urllib.request.urlopen(self.url + "/readyz", timeout=1, context=ctx) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"dq serve not ready within {timeout} s")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None

    def restart(self) -> None:
        self.kill()
        self.start()

    def close(self) -> None:
        self.kill()
        self.log.close()
        shutil.rmtree(self.data_dir, ignore_errors=True)


@pytest.fixture(scope="session", params=STORES)
def server(request: pytest.FixtureRequest) -> Iterator[DqServer]:
    """A dq serve shared by the tests of one store (topics are unique per test)."""
    s = DqServer(request.param)
    try:
        s.start()
        yield s
    finally:
        s.close()


@pytest.fixture(params=STORES)
def own_server(request: pytest.FixtureRequest) -> Iterator[DqServer]:
    """A dq serve of the test's own (for restarts, keys)."""
    s = DqServer(request.param)
    try:
        s.start()
        yield s
    finally:
        s.close()


@pytest.fixture
def client(server: DqServer) -> Iterator[Client]:
    c = Client(server.url, timeout=30)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def topic() -> str:
    return f"py-{uuid.uuid4().hex[:12]}"


def wait_for(cond: Callable[[], Any], timeout: float, what: str, every: float = 0.05) -> Any:
    """Polls ``cond`` until it returns something true, or fails after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(every)


def raw_get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def stats(client: Client, topic: str) -> dict[str, int]:
    info = client.get_topic(topic)
    assert info.stats is not None
    s = info.stats
    return {
        "scheduled": s.scheduled,
        "ready": s.ready,
        "reserved": s.reserved,
        "dead": s.dead,
        "acked": int(s.counters.get("acked", 0)),
    }


class RunningWorker:
    """A Worker's ``run()`` in a thread, stopped (and joined) on exit."""

    def __init__(self, worker: Any) -> None:
        self.worker = worker
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self.worker.run()
        except BaseException as e:  # noqa: BLE001
            self.error = e

    def __enter__(self) -> RunningWorker:
        self.thread.start()
        return self

    def stop(self, timeout: float = 30) -> None:
        self.worker.stop()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "worker did not stop"
        if self.error is not None:
            raise self.error

    def __exit__(self, *exc: object) -> None:
        if self.thread.is_alive():
            self.worker.stop()
            self.thread.join(30)


__all__ = ["DqServer", "wait_for", "raw_get", "stats", "RunningWorker", "json"]
