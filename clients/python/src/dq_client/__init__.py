"""dq_client: the Python client and worker of dq, the delay-queue HTTP service.

>>> from dq_client import Client, Worker
>>> client = Client("http://127.0.0.1:7070")
>>> client.enqueue("orders", {"order": 42}, id="order-42", delay_ms=30 * 60_000)
>>> worker = Worker(client, concurrency=4)
>>> worker.handle("orders", lambda job: close_if_unpaid(job.body["order"]))
>>> worker.run()   # until SIGTERM / SIGINT, then stops gracefully
"""

__version__ = "0.1.0"

from .aio import AsyncClient
from .client import Client
from .errors import Dead, DqClientError, DqError, RetryLater, TransportError
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
    TopicStats,
    TouchItem,
)
from .worker import Worker, WorkerStats

__all__ = [
    "__version__",
    "Client",
    "AsyncClient",
    "Worker",
    "WorkerStats",
    "DqClientError",
    "DqError",
    "TransportError",
    "Dead",
    "RetryLater",
    "RawJson",
    "NewJob",
    "Enqueued",
    "Job",
    "JobInfo",
    "JobPage",
    "Nacked",
    "Released",
    "Cancelled",
    "AckItem",
    "NackItem",
    "TouchItem",
    "TopicInfo",
    "TopicPage",
    "TopicStats",
    "ScheduleInfo",
]
