//! dq-client: use dq from Rust.
//!
//! - [`Client`]: a typed async client for the whole HTTP API (enqueue, batch
//!   enqueue, get, cancel, reschedule, reserve, ack, nack (and `nack_dead`:
//!   dead at once), release, touch, the batches of ack, nack and touch,
//!   topics, dead letters). Connections are pooled; idempotent calls
//!   are retried on transient errors; errors are an [`Error`] enum mirroring
//!   the API's codes.
//! - [`Worker`]: reserves due jobs in batches and runs a handler per topic and
//!   event, at most `concurrency` at once; extends the leases of running
//!   handlers in one call per interval; acks and nacks in batches; a
//!   panicking handler is a failed attempt; on
//!   shutdown it stops reserving, gives back jobs not started and lets
//!   running handlers finish within a grace period.
//! - Traces: [`NewJob::trace`] enqueues a job in the producer's W3C trace
//!   context; the Worker runs each handler in a `job` span carrying the
//!   job's `trace_id` (so the handler's log lines join its trace), and with
//!   the `otel` feature that span's OpenTelemetry parent is the job's trace
//!   context (through `tracing-opentelemetry`: add its layer to your
//!   subscriber), so the handler's spans continue the producer's trace
//!   across the delay.
//!
//! ```no_run
//! use std::time::Duration;
//! use dq_client::{Client, NewJob, Outcome, Worker};
//! use tokio_util::sync::CancellationToken;
//!
//! # async fn demo() -> dq_client::Result<()> {
//! let client = Client::new("http://127.0.0.1:7070")?;
//! // Producer: close order 42 in 30 minutes unless it is paid.
//! client
//!     .enqueue("orders", &NewJob::json(serde_json::json!({"event": "order.timeout", "order": 42}))
//!         .id("order-42")
//!         .delay(Duration::from_secs(1800)))
//!     .await?;
//! // Paid: cancel the timeout.
//! client.cancel("orders", "order-42").await?;
//!
//! // Consumer.
//! let shutdown = CancellationToken::new();
//! Worker::new(client)
//!     .topic("orders")
//!     .handle("order.timeout", |task| async move {
//!         let order: serde_json::Value = task.json().unwrap_or_default();
//!         println!("closing order {}", order["order"]);
//!         Outcome::Done
//!     })
//!     .concurrency(16)
//!     .run(shutdown)
//!     .await
//! # }
//! ```
//!
//! The client uses reqwest with rustls but no crypto provider of its own: for
//! `https://` servers, install one at start
//! (`rustls::crypto::ring::default_provider().install_default()`).

mod client;
mod error;
mod worker;

pub use client::{
    Ack, Client, Enqueued, Job, Leased, NackItem, Nacked, NewJob, RawJson, Reserve, TopicInfo,
    TouchItem, encode_segment,
};
/// The wire types of the HTTP API (the same crate the server renders with).
pub use dq_api as wire;
pub use dq_core::{JobState, RetryPolicy, TopicConfig, TopicConfigPatch, TopicStats};
pub use error::{Error, Result};
pub use worker::{Outcome, Task, Worker, WorkerStats};
