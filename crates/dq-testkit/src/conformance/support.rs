//! What the scenarios share: names and jobs made short (`topic`, `id`,
//! `job`, `keyed`), enqueue-and-reserve steps (`put`, `one`, `ready_jobs`),
//! and topic settings several areas start from (`strict_topic`,
//! `key_limits`, `bucket`).

use dq_core::*;

pub(super) fn topic(name: &str) -> Topic {
    Topic::new(name).unwrap()
}

pub(super) fn id(s: &str) -> JobId {
    JobId::new(s).unwrap()
}

pub(super) fn job(i: &str, when: When) -> NewJob {
    NewJob::new(id(i), Body::Json(format!("{{\"n\":\"{i}\"}}")), when)
}

pub(super) async fn put(s: &dyn Store, t: &Topic, j: NewJob, now: u64) -> Enqueued {
    s.enqueue(t, &[j], now).await.unwrap().remove(0)
}

/// Reserves the next job of `t` (there must be one).
pub(super) async fn one(s: &dyn Store, t: &Topic, lease_ms: Option<u64>, now: u64) -> Lease {
    s.reserve(t, 1, lease_ms, now)
        .await
        .unwrap()
        .leases
        .pop()
        .expect("a job to reserve")
}

pub(super) fn ids(c: &Reservation) -> Vec<String> {
    c.leases.iter().map(|l| l.id.to_string()).collect()
}

/// Exact retry waits, no jitter: 100, 300, 700 ms; 4 attempts.
pub(super) async fn strict_topic(s: &dyn Store, t: &Topic) {
    s.configure_topic(
        t,
        &TopicConfigPatch {
            max_attempts: Some(4),
            retry: Some(RetryPolicy::DelaysMs(vec![100, 300, 700])),
            ..Default::default()
        },
    )
    .await
    .unwrap();
}

/// A rate limit of `(limit, per_ms, burst)`.
pub(super) fn bucket((limit, per_ms, burst): (u64, u64, u64)) -> RateLimit {
    RateLimit {
        limit,
        per_ms,
        burst,
    }
}

/// Enqueues `n` jobs of `t` due at `now`, named `<prefix><i>`.
pub(super) async fn ready_jobs(s: &dyn Store, t: &Topic, prefix: &str, n: usize, now: u64) {
    let jobs: Vec<NewJob> = (0..n)
        .map(|i| job(&format!("{prefix}{i:03}"), When::DelayMs(0)))
        .collect();
    s.enqueue(t, &jobs, now).await.unwrap();
}

/// A job of `t` named `i` with flow-control key `key`.
pub(super) fn keyed(i: &str, key: &str, when: When) -> NewJob {
    NewJob {
        key: Some(JobKey::new(key).unwrap()),
        ..job(i, when)
    }
}

/// Sets `t`'s key limits.
pub(super) async fn key_limits(
    s: &dyn Store,
    t: &Topic,
    concurrency: Option<Option<u32>>,
    rate: Option<Option<(u64, u64, u64)>>,
) {
    s.configure_topic(
        t,
        &TopicConfigPatch {
            key_concurrency: concurrency,
            key_rate_limit: rate.map(|r| r.map(bucket)),
            ..Default::default()
        },
    )
    .await
    .unwrap();
}
