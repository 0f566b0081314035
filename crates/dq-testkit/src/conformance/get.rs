//! Reading one job: what `get` reports (state, times, limits, bodies of
//! either kind) and its counts of what happened to the job.

use dq_core::*;

use super::T0;
use super::support::{id, job, one, put, strict_topic, topic};

/// Get reports state, due, priority, attempts, body (JSON or bytes).
pub async fn get_reports_job_and_bodies_round_trip(s: &dyn Store) {
    let t = topic("get");
    let mut j = NewJob::new(
        id("bin"),
        Body::Bytes(vec![0, 159, 255, b'\n']),
        When::DelayMs(7),
    );
    j.priority = 3;
    j.lease_ms = Some(2500);
    put(s, &t, j, T0).await;
    let info = s.get(&t, &id("bin")).await.unwrap().unwrap();
    assert_eq!(info.body, Body::Bytes(vec![0, 159, 255, b'\n']));
    assert_eq!(
        (info.state, info.due_at_ms, info.priority),
        (JobState::Scheduled, T0 + 7, 3)
    );
    assert_eq!(
        (info.attempts, info.lease_ms, info.created_at_ms),
        (0, 2500, T0)
    );
    let l = one(s, &t, None, T0 + 7).await;
    assert_eq!(l.lease_deadline_ms, T0 + 7 + 2500, "job's own lease");
    assert_eq!(l.body, Body::Bytes(vec![0, 159, 255, b'\n']));
    let info = s.get(&t, &id("bin")).await.unwrap().unwrap();
    assert_eq!((info.state, info.attempts), (JobState::Reserved, 1));
    assert_eq!(info.lease_deadline_ms, Some(T0 + 2507));

    let json = "{\"order\":42,\"s\":\"ü\"}";
    put(
        s,
        &t,
        NewJob::new(id("js"), Body::Json(json.into()), When::DelayMs(0)),
        T0,
    )
    .await;
    assert_eq!(
        s.get(&t, &id("js")).await.unwrap().unwrap().body,
        Body::Json(json.into())
    );
    assert!(s.get(&t, &id("nope")).await.unwrap().is_none());
    assert!(
        s.get(&topic("no-such-topic"), &id("x"))
            .await
            .unwrap()
            .is_none()
    );
}

/// A job's counts: leases that expired, attempts given back (nack to
/// retry, release), times dead, times replayed — each exactly once per event.
pub async fn get_counts_what_happened_to_a_job(s: &dyn Store) {
    let t = topic("counts");
    strict_topic(s, &t).await;
    put(s, &t, job("j", When::DelayMs(0)), T0).await;
    let fresh = s.get(&t, &id("j")).await.unwrap().unwrap();
    assert_eq!(fresh.counts, JobCounts::default());
    // A lease of 1 s that runs out.
    let l = one(s, &t, Some(1000), T0).await;
    let r = s.requeue_expired(&t, 10, T0 + 1001).await.unwrap();
    assert_eq!(r.retried, 1);
    let mut now = T0 + 1001 + 100;
    drop(l);
    // Given back by a nack, then by a release.
    let l = one(s, &t, None, now).await;
    s.nack(&t, &l.id, Nack::retry(&l.token, "x").retry_in(0), now)
        .await
        .unwrap();
    let l = one(s, &t, None, now).await;
    s.release(&t, &l.id, &l.token, 0, now).await.unwrap();
    // Dead at once, then replayed.
    let l = one(s, &t, None, now).await;
    s.nack(&t, &l.id, Nack::dead(&l.token, "x"), now)
        .await
        .unwrap();
    now += 1;
    assert_eq!(s.replay_dead(&t, None, 10, now).await.unwrap(), 1);
    let j = s.get(&t, &id("j")).await.unwrap().unwrap();
    assert_eq!(
        j.counts,
        JobCounts {
            timeouts: 1,
            releases: 2,
            buries: 1,
            kicks: 1
        }
    );
}
