"""The asyncio :class:`AsyncClient`: the calls of :class:`~dq_client.Client`
as coroutines. Each call runs the synchronous client's call on a bounded
pool of threads (``max_threads``), so the event loop never blocks and the
keep-alive connections are shared with the threads that use them."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import ssl
from typing import Awaitable, Callable, Concatenate, ParamSpec, TypeVar

from .client import Client

__all__ = ["AsyncClient"]

P = ParamSpec("P")
R = TypeVar("R")


def _async(
    fn: Callable[Concatenate[Client, P], R],
) -> Callable[Concatenate[AsyncClient, P], Awaitable[R]]:
    async def call(self: AsyncClient, /, *args: P.args, **kwargs: P.kwargs) -> R:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._executor, functools.partial(fn, self.sync, *args, **kwargs)
        )

    call.__name__ = fn.__name__
    call.__qualname__ = f"AsyncClient.{fn.__name__}"
    call.__doc__ = fn.__doc__
    return call


class AsyncClient:
    """``AsyncClient(url, api_key=None, ...)`` takes the arguments of
    :class:`~dq_client.Client` (or ``AsyncClient.wrap(client)``), plus
    ``max_threads``: how many calls may be in flight at once (default 16).
    Every method of ``Client`` is here with the same arguments, as a
    coroutine: ``await client.enqueue("orders", {...}, delay_ms=1000)``."""

    def __init__(
        self,
        url: str,
        api_key: str | None = None,
        *,
        max_threads: int = 16,
        timeout: float = 60.0,
        connect_timeout: float = 5.0,
        retry_for: float = 30.0,
        ca_file: str | None = None,
        verify: bool = True,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.sync = Client(
            url,
            api_key,
            timeout=timeout,
            connect_timeout=connect_timeout,
            retry_for=retry_for,
            ca_file=ca_file,
            verify=verify,
            ssl_context=ssl_context,
        )
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=max_threads, thread_name_prefix="dq-client"
        )

    @classmethod
    def wrap(cls, client: Client, *, max_threads: int = 16) -> AsyncClient:
        """An async client making its calls through ``client``."""
        self = cls.__new__(cls)
        self.sync = client
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=max_threads, thread_name_prefix="dq-client"
        )
        return self

    async def aclose(self) -> None:
        """Closes the idle connections and stops the threads."""
        self.sync.close()
        self._executor.shutdown(wait=False)

    def close(self) -> None:
        self.sync.close()
        self._executor.shutdown(wait=False)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"AsyncClient({self.sync.url!r})"

    request = _async(Client.request)
    enqueue = _async(Client.enqueue)
    enqueue_batch = _async(Client.enqueue_batch)
    get = _async(Client.get)
    cancel = _async(Client.cancel)
    reschedule = _async(Client.reschedule)
    list_jobs = _async(Client.list_jobs)
    reserve = _async(Client.reserve)
    ack = _async(Client.ack)
    nack = _async(Client.nack)
    release = _async(Client.release)
    touch = _async(Client.touch)
    ack_batch = _async(Client.ack_batch)
    nack_batch = _async(Client.nack_batch)
    touch_batch = _async(Client.touch_batch)
    get_topic = _async(Client.get_topic)
    configure_topic = _async(Client.configure_topic)
    delete_topic = _async(Client.delete_topic)
    list_topics = _async(Client.list_topics)
    topics = _async(Client.topics)
    list_dead = _async(Client.list_dead)
    replay_dead = _async(Client.replay_dead)
    purge_dead = _async(Client.purge_dead)
    put_schedule = _async(Client.put_schedule)
    get_schedule = _async(Client.get_schedule)
    list_schedules = _async(Client.list_schedules)
    pause_schedule = _async(Client.pause_schedule)
    resume_schedule = _async(Client.resume_schedule)
    delete_schedule = _async(Client.delete_schedule)
    ready = _async(Client.ready)


