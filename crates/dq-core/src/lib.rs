//! dq-core: the job model and the contract every dq store keeps.
//!
//! No I/O lives here. The modules:
//! - [`model`]: validated names ([`Topic`], [`JobId`]), [`Body`], jobs, leases,
//!   and the request/response types of the [`Store`] contract.
//! - [`limits`]: the bounds on input ([`Limits`]) and their checks.
//! - [`check`]: the rules for a new job ([`NewJob::check`]) and a reserve
//!   ([`ReserveParams::check`]), which every front-end shares.
//! - [`retry`]: [`RetryPolicy`], the backoff between failed attempts.
//! - [`topic`]: [`TopicConfig`] and its partial update [`TopicConfigPatch`].
//! - [`flow`]: [`RateLimit`], the token bucket of a topic's hand-outs.
//! - [`forward`]: what a `redis_stream` / `redis_list` topic writes for a job.
//! - [`sink`]: [`ForwardSink`], where and how those writes go (the binary
//!   gives the server dq-redis's).
//! - [`nulls`]: [`nulls::not_null`], how an optional wire field refuses `null`.
//! - [`clock`]: [`Clock`], the one source of "now" for code that depends on time.
//! - [`store`]: the [`Store`] trait, [`StoreError`] and what a backup
//!   answers ([`BackupReport`], [`BackupError`]).

pub mod check;
pub mod clock;
pub mod flow;
pub mod forward;
pub mod hash;
pub mod limits;
pub mod model;
pub mod nulls;
pub mod retry;
pub mod sink;
pub mod store;
pub mod topic;
pub mod trace;

pub use check::{MAX_RESERVE_TOPICS, ReserveParams};
pub use clock::{Clock, ManualClock, MonotonicClock, SystemClock};
pub use flow::RateLimit;
pub use limits::{InvalidInput, Limits};
pub use model::*;
pub use retry::RetryPolicy;
pub use sink::{ForwardConn, ForwardSink};
pub use store::{
    BackupError, BackupReport, MAX_RECORD_BYTES, Record, Store, StoreError, StoreResult, WakeFn,
    WorkCounter,
};
pub use topic::{
    Delivery, OnExpiry, PushConfig, PushMethod, SettingSource, TopicConfig, TopicConfigPatch,
};
pub use trace::TraceContext;
