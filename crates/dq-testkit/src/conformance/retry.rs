//! Retries: nack waits follow the policy exactly, per-job and per-nack
//! overrides, an expired last attempt goes dead, a nack's new priority
//! holds.

use dq_core::*;

use super::T0;
use super::support::{id, ids, job, one, put, strict_topic, topic};

/// Nack waits follow the policy exactly; the last attempt goes dead with its
/// error, attempts and timestamps kept.
pub async fn nack_backs_off_then_goes_dead(s: &dyn Store) {
    let t = topic("backoff");
    strict_topic(s, &t).await;
    put(s, &t, job("j", When::DelayMs(0)), T0).await;
    let mut now = T0;
    for (attempt, wait) in [(1u32, 100u64), (2, 300), (3, 700)] {
        let l = one(s, &t, None, now).await;
        assert_eq!(l.attempt, attempt);
        let out = s
            .nack(
                &t,
                &id("j"),
                Nack::retry(&l.token, &format!("boom {attempt}")),
                now + 1,
            )
            .await
            .unwrap();
        assert_eq!(
            out,
            NackOutcome::Retry {
                due_at_ms: now + 1 + wait,
                attempt
            }
        );
        assert!(
            s.reserve(&t, 1, None, now + wait)
                .await
                .unwrap()
                .leases
                .is_empty()
        );
        now += 1 + wait;
    }
    let l = one(s, &t, None, now).await;
    assert_eq!(l.attempt, 4);
    let out = s
        .nack(&t, &id("j"), Nack::retry(&l.token, "final"), now + 5)
        .await
        .unwrap();
    assert_eq!(out, NackOutcome::Dead { attempt: 4 });
    let dead = s.list_dead(&t, 0, 10).await.unwrap();
    assert_eq!(dead.len(), 1);
    let d = &dead[0];
    assert_eq!((d.state, d.attempts), (JobState::Dead, 4));
    assert_eq!(d.last_error.as_deref(), Some("final"));
    assert_eq!(d.died_at_ms, Some(now + 5));
    assert_eq!(d.created_at_ms, T0);
    assert!(
        s.reserve(&t, 1, None, now + 1_000_000)
            .await
            .unwrap()
            .leases
            .is_empty()
    );
    let st = s.stats(&t, now).await.unwrap();
    assert_eq!((st.dead, st.counters.dead, st.counters.failed), (1, 1, 4));
    assert!(matches!(
        s.nack(&t, &id("j"), Nack::retry(&l.token, "again"), now + 6)
            .await,
        Err(StoreError::NotInState(JobState::Dead))
    ));
}

/// `retry_in_ms` overrides the policy; per-job retry and max_attempts
/// override the topic; exponential waits match [`RetryPolicy::delay_ms`].
pub async fn nack_retry_overrides(s: &dyn Store) {
    let t = topic("overrides");
    strict_topic(s, &t).await;
    let exp = RetryPolicy::Exponential {
        initial_ms: 250,
        factor: 3.0,
        max_ms: 5000,
        jitter: 0.0,
    };
    let mut j = job("e", When::DelayMs(0));
    j.retry = Some(exp.clone());
    j.max_attempts = Some(5);
    put(s, &t, j, T0).await;
    let mut now = T0;
    for attempt in 1..=4u32 {
        let l = one(s, &t, None, now).await;
        let out = s
            .nack(&t, &id("e"), Nack::retry(&l.token, "x"), now)
            .await
            .unwrap();
        let want = exp.delay_ms(attempt, 0.5);
        assert_eq!(
            out,
            NackOutcome::Retry {
                due_at_ms: now + want,
                attempt
            },
            "attempt {attempt}"
        );
        now += want;
    }
    let l = one(s, &t, None, now).await;
    assert_eq!(l.attempt, 5);
    let out = s
        .nack(&t, &id("e"), Nack::retry(&l.token, "x").retry_in(1), now)
        .await
        .unwrap();
    assert_eq!(
        out,
        NackOutcome::Dead { attempt: 5 },
        "job's max_attempts 5 beats topic's 4"
    );

    put(s, &t, job("r", When::DelayMs(0)), T0).await;
    let l = one(s, &t, None, T0).await;
    let out = s
        .nack(
            &t,
            &id("r"),
            Nack::retry(&l.token, "x").retry_in(42),
            T0 + 1,
        )
        .await
        .unwrap();
    assert_eq!(
        out,
        NackOutcome::Retry {
            due_at_ms: T0 + 43,
            attempt: 1
        }
    );
    let l = one(s, &t, None, T0 + 43).await;
    let out = s
        .nack(
            &t,
            &id("r"),
            Nack::retry(&l.token, "x").retry_in(0),
            T0 + 50,
        )
        .await
        .unwrap();
    assert_eq!(
        out,
        NackOutcome::Retry {
            due_at_ms: T0 + 50,
            attempt: 2
        },
        "retry now"
    );
    assert_eq!(
        s.reserve(&t, 1, None, T0 + 50).await.unwrap().leases[0].attempt,
        3
    );
}

/// An expired last attempt goes dead too.
pub async fn requeue_expired_last_attempt_goes_dead(s: &dyn Store) {
    let t = topic("expire-dead");
    let mut j = job("j", When::DelayMs(0));
    j.max_attempts = Some(1);
    put(s, &t, j, T0).await;
    s.reserve(&t, 1, Some(100), T0).await.unwrap();
    let r = s.requeue_expired(&t, 10, T0 + 101).await.unwrap();
    assert_eq!((r.retried, r.dead), (0, 1));
    assert_eq!(
        r.jobs,
        vec![(id("j"), NackOutcome::Dead { attempt: 1 })],
        "each expired job is reported, for the log"
    );
    let info = s.get(&t, &id("j")).await.unwrap().unwrap();
    assert_eq!(info.state, JobState::Dead);
    assert_eq!(info.last_error.as_deref(), Some("lease expired"));
}

/// A nack may give the job a new priority: its retry (and, dead, its
/// replay) is handed out by it.
pub async fn nack_with_a_priority_keeps_it(s: &dyn Store) {
    let t = topic("prio");
    let mut a = job("a", When::DelayMs(0));
    a.priority = 10;
    let mut b = job("b", When::DelayMs(0));
    b.priority = 20;
    s.enqueue(&t, &[a, b], T0).await.unwrap();
    let l = one(s, &t, None, T0).await;
    assert_eq!(l.id.as_str(), "a");
    let out = s
        .nack(
            &t,
            &l.id,
            Nack::retry(&l.token, "x").retry_in(0).with_priority(30),
            T0,
        )
        .await
        .unwrap();
    assert!(matches!(out, NackOutcome::Retry { .. }), "{out:?}");
    assert_eq!(s.get(&t, &id("a")).await.unwrap().unwrap().priority, 30);
    let c = s.reserve(&t, 2, None, T0).await.unwrap();
    assert_eq!(ids(&c), ["b", "a"], "b (20) before a (now 30)");
    let a = c.leases.iter().find(|l| l.id.as_str() == "a").unwrap();
    s.nack(&t, &a.id, Nack::dead(&a.token, "x").with_priority(5), T0)
        .await
        .unwrap();
    let dead = s.get(&t, &id("a")).await.unwrap().unwrap();
    assert_eq!((dead.state, dead.priority), (JobState::Dead, 5));
}
