//! dq-api: the HTTP/JSON wire format of dq, written once.
//!
//! Every request body and every response body of `/v1` (and of the health
//! routes) is one of these types. The server (`dq-server`) parses requests
//! into them and renders responses from them, the Rust client (`dq-client`)
//! does the reverse, and a test in `dq-server` checks the OpenAPI document
//! field by field against them (a field added here and not there fails it).
//!
//! Requests refuse unknown fields (a typo is an error, not a silent default);
//! optional fields left out are not sent. Numbers a client may get wrong by
//! sign (`delay_ms`, `due_at_ms`, `retry_in_ms`) are `i64`, so the server can
//! answer "must be >= 0" instead of a parse error. Bodies travel as
//! [`RawJson`]: the JSON text exactly as it was sent.
//!
//! docs/api.md describes each route; this crate is its vocabulary.
//!
//! One module per resource, each type re-exported here (`dq_api::Job` is
//! the one path to use):
//!
//! - `body`: [`RawJson`] and the readers of a job's `body` / `body_base64`.
//! - `error`: [`ErrorBody`], the body of every refusal, and the reader the
//!   untagged per-item results of the batch routes share.
//! - `jobs`: enqueue (one, or a batch), get, cancel, reschedule.
//! - `export`: a topic's jobs listed for an export ([`JobRecord`],
//!   [`JobPage`]) and written back by an import.
//! - `leases`: reserve, then ack, nack, release, touch, and their batches.
//! - `topics`: settings and counts, listing, configure, delete.
//! - `dead`: dead letters: list, replay, purge.
//! - `schedules`: cron and interval schedules.
//! - `keys`: API keys.
//! - `admin`: backup and drain.
//! - `health`: `/healthz` and `/readyz`.
//!
//! [`units`] is the text form of durations and retry policies the CLI's
//! flags and the admin page's settings share (`30s`, `1m,3m,5m`).

mod admin;
mod body;
mod dead;
mod error;
mod export;
mod health;
mod jobs;
mod keys;
mod leases;
mod schedules;
mod topics;
pub mod units;

pub use admin::{BackupDone, BackupRequest, DrainRequest, DrainStatus};
pub use body::RawJson;
pub use dead::{DeadList, Purged, ReplayRequest, Replayed};
pub use error::{ErrorBody, ErrorDetail};
pub use export::{ImportRequest, ImportResponse, ImportResult, JobPage, JobRecord};
pub use health::{Health, NotReady, StoreHealth};
pub use jobs::{
    BatchRequest, BatchResponse, BatchResult, Cancelled, EnqueueRequest, Enqueued, Job,
    RescheduleRequest, Rescheduled,
};
pub use keys::{CreateKeyRequest, KeyCreated, KeyInfo, KeyList, KeyRevoked};
pub use leases::{
    AckBatchRequest, AckBatchResponse, AckItem, AckRequest, AckResult, Acked, Leased,
    NackBatchRequest, NackBatchResponse, NackItem, NackRequest, NackResult, Nacked, ReleaseRequest,
    Released, ReserveRequest, Reserved, TouchBatchRequest, TouchBatchResponse, TouchItem,
    TouchRequest, TouchResult, Touched,
};
pub use schedules::{
    CatchUp, LastJob, ScheduleDeleted, ScheduleInfo, ScheduleList, ScheduleSpec, Slot,
};
pub use topics::{
    PutTopicRequest, SettingLine, TopicConfigured, TopicDeleted, TopicInfo, TopicList,
    TopicListQuery, config_sources, settings_in_words, source_in_words,
};

#[cfg(test)]
mod tests;
