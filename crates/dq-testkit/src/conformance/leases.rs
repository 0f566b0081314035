//! Leases, one job at a time: expiry redelivers, a stale token is refused
//! (fencing) by ack, nack and touch, touch extends, release gives back
//! without counting the attempt, and `ack_and_write` to another server
//! does nothing.

use dq_core::*;

use super::T0;
use super::support::{id, job, key_limits, keyed, one, put, strict_topic, topic};

/// An expired lease makes the job come back as a failed attempt (attempt + 1),
/// after the retry wait; a lease is valid up to and including its deadline.
pub async fn requeue_expired_redelivers(s: &dyn Store) {
    let t = topic("expiry");
    strict_topic(s, &t).await;
    put(s, &t, job("j", When::DelayMs(0)), T0).await;
    let c = s.reserve(&t, 1, Some(1000), T0).await.unwrap();
    assert_eq!(c.leases[0].lease_deadline_ms, T0 + 1000);

    let r = s.requeue_expired(&t, 100, T0 + 1000).await.unwrap();
    assert_eq!((r.retried, r.dead), (0, 0), "not expired at its deadline");
    assert_eq!(r.next_deadline_ms, Some(T0 + 1000));
    assert!(
        s.reserve(&t, 1, None, T0 + 1000)
            .await
            .unwrap()
            .leases
            .is_empty()
    );

    let r = s.requeue_expired(&t, 100, T0 + 1001).await.unwrap();
    assert_eq!((r.retried, r.dead, r.next_deadline_ms), (1, 0, None));
    let info = s.get(&t, &id("j")).await.unwrap().unwrap();
    assert_eq!(info.state, JobState::Scheduled);
    assert_eq!(info.due_at_ms, T0 + 1001 + 100, "first retry wait");
    assert_eq!(info.last_error.as_deref(), Some("lease expired"));
    assert!(
        s.reserve(&t, 1, None, T0 + 1100)
            .await
            .unwrap()
            .leases
            .is_empty()
    );
    let c = s.reserve(&t, 1, None, T0 + 1101).await.unwrap();
    assert_eq!(c.leases[0].attempt, 2);
    let st = s.stats(&t, T0 + 1101).await.unwrap();
    assert_eq!((st.counters.expired, st.counters.failed), (1, 1));
}

/// Ack, nack and touch with a stale token are refused and change nothing.
pub async fn ack_nack_touch_refuse_a_stale_token(s: &dyn Store) {
    let t = topic("fence");
    strict_topic(s, &t).await;
    put(s, &t, job("j", When::DelayMs(0)), T0).await;
    let first = one(s, &t, Some(1000), T0).await;
    s.requeue_expired(&t, 10, T0 + 1001).await.unwrap();

    // While the job waits for its retry, the old token is stale.
    assert!(matches!(
        s.ack(&t, &id("j"), &first.token, 0).await,
        Err(StoreError::LeaseMismatch)
    ));
    let second = one(s, &t, Some(1000), T0 + 2000).await;
    assert_ne!(first.token, second.token);
    let j = id("j");
    assert!(matches!(
        s.ack(&t, &j, &first.token, 0).await,
        Err(StoreError::LeaseMismatch)
    ));
    assert!(matches!(
        s.nack(&t, &j, Nack::retry(&first.token, "x"), T0 + 2001)
            .await,
        Err(StoreError::LeaseMismatch)
    ));
    assert!(matches!(
        s.touch(&t, &j, &first.token, None, T0 + 2001).await,
        Err(StoreError::LeaseMismatch)
    ));
    assert!(matches!(
        s.ack(&t, &j, "", 0).await,
        Err(StoreError::LeaseMismatch)
    ));
    let info = s.get(&t, &j).await.unwrap().unwrap();
    assert_eq!((info.state, info.attempts), (JobState::Reserved, 2));
    assert_eq!(info.lease_deadline_ms, Some(T0 + 3000));
    s.ack(&t, &j, &second.token, 0).await.unwrap();
    assert!(s.get(&t, &j).await.unwrap().is_none(), "acked job is gone");
    assert!(matches!(
        s.ack(&t, &j, &second.token, 0).await,
        Err(StoreError::NotFound)
    ));
    assert!(matches!(
        s.ack(&t, &id("never"), "tok", 0).await,
        Err(StoreError::NotFound)
    ));
}

/// A stale token is refused alike for a plain job, a job with a flow-control
/// key and one with a dedup window, in a topic that has keys: each stays
/// reserved under its own lease. Their acks then do each job's own
/// bookkeeping and no other's: the key's slot is freed (its next job is
/// handed out), the window opened (the id is refused), the plain job leaves
/// neither behind (its id is new again).
pub async fn ack_refusals_and_acks_of_every_kind_of_job(s: &dyn Store) {
    let t = topic("ack-kinds");
    strict_topic(s, &t).await;
    key_limits(s, &t, Some(Some(1)), None).await;
    put(s, &t, keyed("k1", "kk", When::DelayMs(0)), T0).await;
    put(s, &t, keyed("k2", "kk", When::DelayMs(0)), T0).await;
    put(s, &t, job("plain", When::DelayMs(0)), T0).await;
    let windowed = || NewJob {
        dedup_ms: Some(1000),
        ..job("win", When::DelayMs(0))
    };
    put(s, &t, windowed(), T0).await;
    let leases = s.reserve(&t, 10, None, T0).await.unwrap().leases;
    let mut ids: Vec<&str> = leases.iter().map(|l| l.id.as_str()).collect();
    ids.sort_unstable();
    assert_eq!(ids, ["k1", "plain", "win"], "k2 waits for its key's slot");
    for l in &leases {
        let stale = format!("{}x", l.token);
        for token in [stale.as_str(), ""] {
            assert!(
                matches!(
                    s.ack(&t, &l.id, token, T0 + 1).await,
                    Err(StoreError::LeaseMismatch)
                ),
                "{}",
                l.id
            );
        }
        let info = s.get(&t, &l.id).await.unwrap().unwrap();
        assert_eq!(info.state, JobState::Reserved, "{}", l.id);
    }
    let stats = s.stats(&t, T0 + 1).await.unwrap();
    assert_eq!((stats.reserved, stats.ready), (3, 1));
    for l in &leases {
        s.ack(&t, &l.id, &l.token, T0 + 2).await.unwrap();
        assert!(s.get(&t, &l.id).await.unwrap().is_none(), "{}", l.id);
    }
    let next = s.reserve(&t, 10, None, T0 + 2).await.unwrap().leases;
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].id.as_str(), "k2", "the key's slot is free again");
    let again = put(s, &t, windowed(), T0 + 3).await;
    assert!(again.deduplicated && !again.created, "{again:?}");
    let again = put(s, &t, job("plain", When::DelayMs(0)), T0 + 3).await;
    assert!(again.created, "{again:?}");
}

/// Touch pushes the deadline; the job does not expire at the old one.
pub async fn touch_extends_lease(s: &dyn Store) {
    let t = topic("touch");
    put(s, &t, job("j", When::DelayMs(0)), T0).await;
    let l = one(s, &t, Some(1000), T0).await;
    let d = s
        .touch(&t, &id("j"), &l.token, Some(5000), T0 + 900)
        .await
        .unwrap();
    assert_eq!(d, T0 + 5900);
    let r = s.requeue_expired(&t, 10, T0 + 2000).await.unwrap();
    assert_eq!(r.retried + r.dead, 0);
    assert_eq!(r.next_deadline_ms, Some(T0 + 5900));
    let d = s
        .touch(&t, &id("j"), &l.token, None, T0 + 1000)
        .await
        .unwrap();
    assert_eq!(
        d,
        T0 + 1000 + TopicConfig::default().lease_ms,
        "topic lease by default"
    );
    put(s, &t, job("w", When::DelayMs(10_000)), T0).await;
    assert!(
        matches!(
            s.touch(&t, &id("w"), "x", None, T0).await,
            Err(StoreError::LeaseMismatch)
        ),
        "a waiting job has no lease: any token is stale"
    );
    assert!(matches!(
        s.touch(&t, &id("nope"), "x", None, T0).await,
        Err(StoreError::NotFound)
    ));
}

/// Release gives a held job back after a delay without counting the attempt.
pub async fn release_does_not_count_the_attempt(s: &dyn Store) {
    let t = topic("release");
    let mut j = job("j", When::DelayMs(0));
    j.max_attempts = Some(1);
    put(s, &t, j, T0).await;
    for round in 0..3u64 {
        let now = T0 + round * 1000;
        let l = one(s, &t, None, now).await;
        assert_eq!(l.attempt, 1, "released attempts are not counted");
        let due = s
            .release(&t, &id("j"), &l.token, 500, GiveBack::Released, now + 10)
            .await
            .unwrap();
        assert_eq!(due, now + 510);
        assert!(matches!(
            s.ack(&t, &id("j"), &l.token, 0).await,
            Err(StoreError::LeaseMismatch)
        ));
        assert!(
            s.reserve(&t, 1, None, now + 509)
                .await
                .unwrap()
                .leases
                .is_empty()
        );
    }
    let st = s.stats(&t, T0).await.unwrap();
    assert_eq!((st.scheduled, st.reserved, st.counters.failed), (1, 0, 0));
    let l = one(s, &t, None, T0 + 5000).await;
    let now_due = s
        .release(&t, &id("j"), &l.token, 0, GiveBack::Released, T0 + 5000)
        .await
        .unwrap();
    assert_eq!(now_due, T0 + 5000);
    assert_eq!(
        s.get(&t, &id("j")).await.unwrap().unwrap().state,
        JobState::Ready
    );
}

/// `ack_and_write` of `sink` (the forward sink `dq serve` gives over `s`)
/// for a target that is not the store's own server answers `None` for
/// every job and changes nothing: the job stays reserved. Not in
/// [`conformance_tests!`](crate::conformance_tests): each store's tests
/// run it with their sink.
pub async fn ack_and_write_elsewhere_does_nothing(s: &dyn Store, sink: &dyn ForwardSink) {
    use dq_core::forward::{AckWrite, StreamFields, StreamTarget, Target};
    let t = topic("fwd");
    put(s, &t, job("a", When::DelayMs(0)), T0).await;
    let l = one(s, &t, None, T0).await;
    let target = StreamTarget {
        url: "redis://192.0.2.1:1/0".into(),
        stream: "s".into(),
        maxlen: None,
        fields: StreamFields::Flat,
    };
    let w = Target::Stream(&target).write_for(&l);
    let r = sink
        .ack_and_write(
            &t,
            &target.url,
            &[AckWrite {
                id: &l.id,
                token: &l.token,
                write: &w,
            }],
            0,
        )
        .await
        .unwrap();
    assert!(matches!(r.as_slice(), [None]), "{r:?}");
    let info = s.get(&t, &id("a")).await.unwrap().unwrap();
    assert_eq!(info.state, JobState::Reserved);
}

/// A job keeps its last [`ERRORS_KEPT`] failed attempts, oldest first, each
/// with its attempt, time and error (a nack's, or `lease expired`), the
/// last one also as `last_error`; an import keeps them as they were.
pub async fn errors_keep_the_last_failed_attempts(s: &dyn Store) {
    let t = topic("errors");
    strict_topic(s, &t).await;
    let mut j = job("j", When::DelayMs(0));
    j.max_attempts = Some(20);
    put(s, &t, j, T0).await;
    assert!(
        s.get(&t, &id("j"))
            .await
            .unwrap()
            .unwrap()
            .errors
            .is_empty()
    );
    let n = ERRORS_KEPT as u64 + 1;
    for a in 1..=n {
        let now = T0 + a * 10;
        let c = s.reserve(&t, 1, None, now).await.unwrap();
        assert_eq!(c.leases[0].attempt as u64, a);
        let error = format!("e{a}");
        let nack = Nack {
            retry_in_ms: Some(0),
            ..Nack::retry(&c.leases[0].token, &error)
        };
        s.nack(&t, &id("j"), nack, now + 1).await.unwrap();
    }
    // Then a lease that runs out.
    let now = T0 + (n + 1) * 10;
    s.reserve(&t, 1, Some(1000), now).await.unwrap();
    let r = s.requeue_expired(&t, 100, now + 1001).await.unwrap();
    assert_eq!(r.retried, 1);
    let info = s.get(&t, &id("j")).await.unwrap().unwrap();
    let mut want: Vec<AttemptError> = (3..=n)
        .map(|a| AttemptError {
            attempt: a as u32,
            at_ms: T0 + a * 10 + 1,
            error: format!("e{a}"),
        })
        .collect();
    want.push(AttemptError {
        attempt: n as u32 + 1,
        at_ms: now + 1001,
        error: "lease expired".into(),
    });
    assert_eq!(info.errors, want);
    assert_eq!(info.last_error.as_deref(), Some("lease expired"));

    // Dead: the listing shows them too.
    let c = s.reserve(&t, 1, None, now + 100_000).await.unwrap();
    s.nack(
        &t,
        &id("j"),
        Nack::dead(&c.leases[0].token, "gave up"),
        now + 100_001,
    )
    .await
    .unwrap();
    let dead = s.list_dead(&t, 0, 10).await.unwrap();
    assert_eq!(dead[0].errors.len(), ERRORS_KEPT);
    assert_eq!(dead[0].errors.last().unwrap().error, "gave up");
    assert_eq!(dead[0].errors[0].attempt, 4, "the oldest dropped");

    // Imported as they were.
    let t2 = topic("errors-imported");
    let kept = dead[0].errors.clone();
    let imported = ImportJob {
        id: id("k"),
        state: JobState::Dead,
        due_at_ms: T0,
        priority: DEFAULT_PRIORITY,
        attempts: 13,
        max_attempts: None,
        lease_ms: None,
        retry: None,
        dedup_ms: None,
        body: Body::Json("{}".into()),
        last_error: Some("gave up".into()),
        errors: kept.clone(),
        created_at_ms: T0,
        died_at_ms: Some(T0 + 1),
        key: None,
        trace: None,
    };
    let without_last = ImportJob {
        id: id("k2"),
        last_error: None,
        ..imported.clone()
    };
    s.import_jobs(&t2, &[imported, without_last], T0 + 2)
        .await
        .unwrap();
    let info = s.get(&t2, &id("k")).await.unwrap().unwrap();
    assert_eq!(
        (info.errors, info.last_error.as_deref()),
        (kept.clone(), Some("gave up"))
    );
    let info = s.get(&t2, &id("k2")).await.unwrap().unwrap();
    assert_eq!((info.errors, info.last_error), (kept, None));
    // An error's time a store could not keep exactly is refused.
    let mut far = dead_with_one_error("k3");
    far.errors[0].at_ms = 100_000_000_000_000;
    assert!(far.check(&Limits::default(), T0).is_err());
}

/// A dead job `i` to import, with one kept error.
fn dead_with_one_error(i: &str) -> ImportJob {
    ImportJob {
        id: id(i),
        state: JobState::Dead,
        due_at_ms: T0,
        priority: DEFAULT_PRIORITY,
        attempts: 1,
        max_attempts: None,
        lease_ms: None,
        retry: None,
        dedup_ms: None,
        body: Body::Json("{}".into()),
        last_error: None,
        errors: vec![AttemptError {
            attempt: 1,
            at_ms: T0,
            error: "e".into(),
        }],
        created_at_ms: T0,
        died_at_ms: Some(T0 + 1),
        key: None,
        trace: None,
    }
}
