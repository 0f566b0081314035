"""The :class:`Worker`: reserves due jobs in batches, runs a handler per topic
with at most ``concurrency`` running at once, extends the leases of running
handlers, acks and nacks in batches, and stops gracefully.

One worker serves both forms of handler:

- ``async def`` handlers run as tasks on the worker's asyncio event loop
  (the loop ``run()`` starts, or yours with ``await worker.run_async()``);
- plain functions run in a pool of ``concurrency`` threads.

Either way at most ``concurrency`` handlers run at once, and the worker's
own calls to dq (reserve, ack:batch, nack:batch, touch:batch) are made
beside them, on the event loop, through a few threads of its own.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Generic, TypeVar, Union, overload

from .aio import AsyncClient
from .client import Client
from .errors import Dead, DqError, RetryLater, TransportError
from .models import AckItem, Job, NackItem, TouchItem

__all__ = ["Worker", "WorkerStats", "Handler"]

log = logging.getLogger("dq_client.worker")

Handler = Union[Callable[[Job], Any], Callable[[Job], Awaitable[Any]]]
H = TypeVar("H", bound=Handler)
T = TypeVar("T")


@dataclass
class WorkerStats:
    """What a worker did so far (readable while it runs)."""

    reserved: int = 0
    #: Reserve calls that failed (dq unreachable or refusing); retried with backoff.
    reserve_errors: int = 0
    #: Handlers that returned (acked).
    done: int = 0
    #: Acks dq confirmed.
    acked: int = 0
    #: Nacks dq confirmed.
    nacked: int = 0
    #: Handlers that raised an ordinary exception (nacked: retried or dead per the topic).
    failed: int = 0
    #: Handlers that raised :class:`~dq_client.Dead` (dead at once).
    dead: int = 0
    #: Handlers that raised :class:`~dq_client.RetryLater` (released).
    retried_later: int = 0
    #: Jobs reserved but not started at shutdown, given back.
    handed_back: int = 0
    #: Acks and nacks dq refused (lease lost, job cancelled) or that could not be sent.
    report_errors: int = 0
    #: Handlers still running when the grace period ended.
    abandoned: int = 0


class _Reports(Generic[T]):
    """A queue of acks or nacks, sent in batches beside the reserve loop."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[T | None] = asyncio.Queue()

    def put(self, item: T) -> None:
        self.queue.put_nowait(item)

    def close(self) -> None:
        self.queue.put_nowait(None)


class Worker:
    """Runs handlers for due jobs.

    ``Worker(client, concurrency=4)``, then ``worker.handle(topic, fn)`` per
    topic (or ``@worker.handle(topic)``), then ``worker.run()``.

    A handler gets the :class:`~dq_client.Job` (``.id``, ``.topic``,
    ``.body``, ``.attempt``, ``.token``, ``.due_at_ms``, ...). Returning acks
    the job; raising :class:`~dq_client.Dead` nacks it with ``dead: true``
    (dead letter at once); raising ``RetryLater(delay_ms)`` releases it, due
    again after the delay, the attempt not counted; raising anything else
    nacks it with the exception's message (the topic's retry policy decides:
    retried later, or dead after the last attempt).

    Options: ``lease_ms`` (30 s; extended every third of it while a handler
    runs, all running jobs in one ``touch:batch``), ``batch`` (most jobs per
    reserve, 100; never more than the free slots), ``wait_ms`` (a reserve's
    long-poll, 1 s: how quickly a stop is noticed), ``grace`` (seconds
    running handlers get to finish after a stop, 10), ``install_signals``
    (``run()`` stops on SIGTERM/SIGINT, default true), ``event_field`` (the
    body field ``handle(..., event=)`` dispatches on, ``"event"``).
    """

    def __init__(
        self,
        client: Client | AsyncClient,
        concurrency: int = 4,
        *,
        lease_ms: int = 30_000,
        batch: int = 100,
        wait_ms: int = 1_000,
        grace: float = 10.0,
        install_signals: bool = True,
        event_field: str = "event",
    ) -> None:
        self.client = client.sync if isinstance(client, AsyncClient) else client
        self.concurrency = max(1, int(concurrency))
        self.lease_ms = max(300, int(lease_ms))
        self.batch = min(max(1, int(batch)), 1000)
        self.wait_ms = max(0, int(wait_ms))
        self.grace = grace
        self.install_signals = install_signals
        self.stats = WorkerStats()
        self.event_field = event_field
        # topic -> event (None: any) -> (handler, is_async)
        self._handlers: dict[str, dict[str | None, tuple[Handler, bool]]] = {}
        self._stop_requested = threading.Event()
        self._stopped = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None
        self._force_event: asyncio.Event | None = None
        self._running = False

    # -- set up ------------------------------------------------------------

    @overload
    def handle(self, topic: str, *, event: str | None = None) -> Callable[[H], H]: ...

    @overload
    def handle(self, topic: str, fn: H, *, event: str | None = None) -> H: ...

    def handle(
        self, topic: str, fn: H | None = None, *, event: str | None = None
    ) -> H | Callable[[H], H]:
        """Runs ``fn`` for the jobs of ``topic``: ``async def`` on the event
        loop, a plain function in the thread pool. Usable as a decorator:
        ``@worker.handle("orders")``.

        With ``event``, ``fn`` takes only the topic's jobs whose body is an
        object with that ``event`` field (``event_field``); the handler
        registered without ``event`` takes the rest. A job no handler takes
        is a dead letter at once (``no handler for event "…" on topic "…"``),
        as with the Rust worker."""

        def register(f: H) -> H:
            is_async = inspect.iscoroutinefunction(f) or inspect.iscoroutinefunction(
                getattr(f, "__call__", None)
            )
            self._handlers.setdefault(topic, {})[event] = (f, is_async)
            return f

        return register(fn) if fn is not None else register

    @property
    def topics(self) -> list[str]:
        return list(self._handlers)

    # -- run / stop --------------------------------------------------------

    def stop(self) -> None:
        """Stops the worker gracefully: callable from any thread (or a
        handler), any number of times; a second call ends the grace period
        at once. ``run()`` / ``run_async()`` return once stopped."""
        first = not self._stop_requested.is_set()
        self._stop_requested.set()
        loop = self._loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self._on_stop, first)
            except RuntimeError:
                pass

    def _on_stop(self, first: bool) -> None:
        if self._stop_event is not None:
            if not first and self._force_event is not None:
                self._force_event.set()
            self._stop_event.set()

    def wait_stopped(self, timeout: float | None = None) -> bool:
        """Blocks until a run has finished (for a thread that called :meth:`stop`)."""
        return self._stopped.wait(timeout)

    def run(self) -> None:
        """Runs until SIGTERM or SIGINT (or :meth:`stop`), then stops
        gracefully: stops reserving, gives back jobs reserved but not
        started, lets running handlers finish within ``grace``, flushes
        acks and nacks. Starts its own event loop (use :meth:`run_async`
        inside one). The signal handlers are installed only when called
        from the main thread, and removed on return."""
        asyncio.run(self._run_with_signals())

    async def _run_with_signals(self) -> None:
        loop = asyncio.get_running_loop()
        installed: list[signal.Signals] = []
        previous: dict[signal.Signals, Any] = {}
        if self.install_signals and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                try:
                    loop.add_signal_handler(sig, self.stop)
                    installed.append(sig)
                except (NotImplementedError, RuntimeError):  # pragma: no cover (Windows)
                    previous[sig] = signal.signal(sig, lambda *_: self.stop())
        try:
            await self.run_async()
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)
            for sig, h in previous.items():  # pragma: no cover
                signal.signal(sig, h)

    async def run_async(self) -> None:
        """The worker on the running event loop, until :meth:`stop` (no
        signal handlers: wire your own to :meth:`stop`)."""
        if not self._handlers:
            raise ValueError("Worker has no handler: call worker.handle(topic, fn) first")
        if self._running:
            raise RuntimeError("this Worker is running already")
        self._running = True
        self._stopped.clear()
        loop = asyncio.get_running_loop()
        self._stop_event = asyncio.Event()
        self._force_event = asyncio.Event()
        self._loop = loop
        if self._stop_requested.is_set():
            self._stop_event.set()
        try:
            await _Run(self, loop).run()
        finally:
            self._loop = None
            self._running = False
            self._stop_requested.clear()
            self._stopped.set()


class _Run:
    """One run of a worker: its loops and the jobs in flight."""

    def __init__(self, w: Worker, loop: asyncio.AbstractEventLoop) -> None:
        self.w = w
        self.loop = loop
        assert w._stop_event is not None and w._force_event is not None
        self.stop_event = w._stop_event
        self.force_event = w._force_event
        # The worker's own calls are not retried inside the client: its loops
        # retry them with backoff, and notice a stop meanwhile.
        self.api = AsyncClient.wrap(w.client.with_retry_for(0), max_threads=6)
        self.pool: concurrent.futures.ThreadPoolExecutor | None = None
        if any(not a for hs in w._handlers.values() for _, a in hs.values()):
            self.pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=w.concurrency, thread_name_prefix="dq-handler"
            )
        self.tasks: set[asyncio.Task[None]] = set()
        self.side_tasks: set[asyncio.Task[None]] = set()
        self.slot_free = asyncio.Event()
        self.in_flight: dict[str, TouchItem] = {}
        self.stopping_since: float | None = None
        self.acks: _Reports[AckItem] = _Reports()
        self.nacks: _Reports[NackItem] = _Reports()

    async def run(self) -> None:
        w = self.w
        acker = asyncio.create_task(self._report_loop(self.acks, "ack"))
        nacker = asyncio.create_task(self._report_loop(self.nacks, "nack"))
        keeper_stop = asyncio.Event()
        keeper = asyncio.create_task(self._lease_loop(keeper_stop))
        try:
            await self._reserve_loop()
        finally:
            # Let running handlers finish within the grace period.
            if self.tasks:
                grace_end = asyncio.create_task(self._sleep_or(w.grace, self.force_event))
                pending_wait = asyncio.create_task(self._all_done())
                await asyncio.wait({grace_end, pending_wait}, return_when=asyncio.FIRST_COMPLETED)
                grace_end.cancel()
                pending_wait.cancel()
                if self.tasks:
                    n = len(self.tasks)
                    w.stats.abandoned += n
                    log.warning(
                        "%d handlers still running after the grace period (%.1f s); "
                        "their jobs come back when their leases end",
                        n,
                        w.grace,
                    )
                    for t in list(self.tasks):
                        t.cancel()
            self.stopping_since = time.monotonic()
            keeper_stop.set()
            await asyncio.gather(keeper, return_exceptions=True)
            if self.side_tasks:
                await asyncio.gather(*self.side_tasks, return_exceptions=True)
            self.acks.close()
            self.nacks.close()
            await asyncio.gather(acker, nacker, return_exceptions=True)
            if self.pool is not None:
                self.pool.shutdown(wait=False, cancel_futures=True)
            self.api._executor.shutdown(wait=False)

    async def _all_done(self) -> None:
        while self.tasks:
            await asyncio.wait(set(self.tasks))

    @staticmethod
    async def _sleep_or(seconds: float, event: asyncio.Event) -> bool:
        """Sleeps ``seconds`` unless ``event`` is set first; true when it was."""
        try:
            await asyncio.wait_for(event.wait(), timeout=seconds)
            return True
        except asyncio.TimeoutError:
            return event.is_set()

    async def _reserve_loop(self) -> None:
        w = self.w
        topics = w.topics
        failures = 0
        while not self.stop_event.is_set():
            free = w.concurrency - len(self.tasks)
            if free <= 0:
                self.slot_free.clear()
                waiters = {
                    asyncio.create_task(self.slot_free.wait()),
                    asyncio.create_task(self.stop_event.wait()),
                }
                _, pending = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
                for p in pending:
                    p.cancel()
                continue
            if free < w.concurrency // 2:
                # Handlers in threads finish one by one: a moment's wait lets
                # a reserve fill several free slots in one call, not one each.
                await self._sleep_or(0.002, self.stop_event)
                free = w.concurrency - len(self.tasks)
            # A reserve in flight is not abandoned at a stop: what it returns
            # is given back below, not stranded until its lease ends.
            try:
                jobs = await self.api.reserve(
                    topics,
                    max=min(free, w.batch),
                    lease_ms=w.lease_ms,
                    wait_ms=w.wait_ms,
                )
                failures = 0
            except (DqError, TransportError) as e:
                failures += 1
                w.stats.reserve_errors += 1
                if failures == 1 or failures % 30 == 0:
                    log.warning("reserve failed (%d in a row); retrying: %s", failures, e)
                await self._sleep_or(min(0.1 * failures, 2.0), self.stop_event)
                continue
            w.stats.reserved += len(jobs)
            for job in jobs:
                if self.stop_event.is_set():
                    self._spawn_side(self._hand_back(job))
                    continue
                self._start(job)

    def _spawn_side(self, coro: Awaitable[None]) -> None:
        t = asyncio.ensure_future(coro)
        self.side_tasks.add(t)
        t.add_done_callback(self.side_tasks.discard)

    def _start(self, job: Job) -> None:
        t = asyncio.create_task(self._run_job(job))
        self.tasks.add(t)

        def done(task: asyncio.Task[None]) -> None:
            self.tasks.discard(task)
            self.slot_free.set()

        t.add_done_callback(done)

    async def _hand_back(self, job: Job) -> None:
        for attempt in range(3):
            try:
                await self.api.release(job.topic, job.id, job.token, delay_ms=0)
                self.w.stats.handed_back += 1
                return
            except DqError as e:
                if not e.transient:
                    log.warning("cannot give back job %s/%s: %s", job.topic, job.id, e)
                    return
            except TransportError:
                pass
            await asyncio.sleep(0.2 * (attempt + 1))
        log.warning(
            "cannot give back job %s/%s at shutdown; it comes back when its lease ends",
            job.topic,
            job.id,
        )

    async def _run_job(self, job: Job) -> None:
        w = self.w
        handlers = w._handlers.get(job.topic, {})
        event = job.body.get(w.event_field) if isinstance(job.body, dict) else None
        chosen = handlers.get(event) if isinstance(event, str) else None
        chosen = chosen or handlers.get(None)
        if chosen is None:
            msg = f'no handler for event "{event if isinstance(event, str) else ""}" on topic "{job.topic}"'
            log.error("job %s/%s dead-lettered: %s", job.topic, job.id, msg)
            w.stats.dead += 1
            self.nacks.put(NackItem(job.topic, job.id, job.token, error=msg, dead=True))
            return
        fn, is_async = chosen
        self.in_flight[job.token] = TouchItem(job.topic, job.id, job.token, w.lease_ms)
        try:
            if is_async:
                await fn(job)
            else:
                assert self.pool is not None
                result = await self.loop.run_in_executor(self.pool, fn, job)
                if inspect.isawaitable(result):
                    await result
        except asyncio.CancelledError:
            raise
        except Dead as e:
            w.stats.dead += 1
            self.nacks.put(NackItem(job.topic, job.id, job.token, error=_message(e), dead=True))
        except RetryLater as e:
            w.stats.retried_later += 1
            try:
                await self.api.release(job.topic, job.id, job.token, delay_ms=e.delay_ms)
            except (DqError, TransportError) as err:
                w.stats.report_errors += 1
                log.warning(
                    "cannot give back job %s/%s: %s; it comes back when its lease ends",
                    job.topic,
                    job.id,
                    err,
                )
        except Exception as e:
            w.stats.failed += 1
            log.info("job %s/%s failed (attempt %d): %r", job.topic, job.id, job.attempt, e)
            self.nacks.put(NackItem(job.topic, job.id, job.token, error=_message(e)))
        else:
            w.stats.done += 1
            self.acks.put(AckItem(job.topic, job.id, job.token))
        finally:
            self.in_flight.pop(job.token, None)

    async def _report_loop(self, reports: _Reports[Any], verb: str) -> None:
        """Sends what is queued in one batch call (up to 1000), retrying a
        batch while dq is unreachable, for up to the lease (up to 5 s once
        the handlers are done at a stop)."""
        q = reports.queue
        closed = False
        while not closed:
            first = await q.get()
            if first is None:
                return
            batch = [first]
            while len(batch) < 1000 and not q.empty():
                item = q.get_nowait()
                if item is None:
                    closed = True
                    break
                batch.append(item)
            give_up = time.monotonic() + self.w.lease_ms / 1000.0
            tries = 0
            while True:
                try:
                    if verb == "ack":
                        results: list[Any] = await self.api.ack_batch(batch)
                    else:
                        results = await self.api.nack_batch(batch)
                except (DqError, TransportError) as e:
                    tries += 1
                    # While stopping, dq gets a few seconds, not a whole lease.
                    now = time.monotonic()
                    late = self.stopping_since is not None and now > self.stopping_since + 5.0
                    if e.transient and now < give_up and not late:
                        if tries == 1:
                            log.warning("%s:batch failed; retrying: %s", verb, e)
                        await asyncio.sleep(min(0.05 * 2**tries, 1.0))
                        continue
                    self.w.stats.report_errors += len(batch)
                    log.error(
                        "%s of %d jobs failed (%s); they come back when their leases end",
                        verb,
                        len(batch),
                        e,
                    )
                    break
                for item, r in zip(batch, results):
                    if not isinstance(r, DqError):
                        if verb == "ack":
                            self.w.stats.acked += 1
                        else:
                            self.w.stats.nacked += 1
                    else:
                        self.w.stats.report_errors += 1
                        log.warning(
                            "%s of %s/%s refused (lease lost or job cancelled): %s",
                            verb,
                            item.topic,
                            item.id,
                            r,
                        )
                break

    async def _lease_loop(self, stop: asyncio.Event) -> None:
        """Extends the leases of running handlers every third of the lease."""
        period = self.w.lease_ms / 3000.0
        while not await self._sleep_or(period, stop):
            items = list(self.in_flight.values())
            for i in range(0, len(items), 1000):
                chunk = items[i : i + 1000]
                try:
                    results = await self.api.touch_batch(chunk)
                except (DqError, TransportError) as e:
                    log.warning("cannot extend the leases of %d running jobs: %s", len(chunk), e)
                    continue
                for it, r in zip(chunk, results):
                    if isinstance(r, DqError) and it.token in self.in_flight:
                        log.warning(
                            "cannot extend the lease of running job %s/%s: %s", it.topic, it.id, r
                        )


def _message(e: BaseException) -> str:
    text = str(e)
    return text if text else type(e).__name__
