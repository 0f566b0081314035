//! Cancel in every state, and reschedule while a job waits.

use dq_core::*;

use super::T0;
use super::support::{id, job, one, put, topic};

/// Cancel works in every state; a cancelled reserved job is not retried and
/// its holder's ack reports it gone.
pub async fn cancel_in_every_state(s: &dyn Store) {
    let t = topic("cancel");
    put(s, &t, job("sched", When::DelayMs(10_000)), T0).await;
    put(s, &t, job("ready", When::DelayMs(0)), T0).await;
    put(s, &t, job("held", When::DelayMs(0)), T0).await;
    let mut dj = job("dead", When::DelayMs(0));
    dj.max_attempts = Some(1);
    dj.priority = 0;
    put(s, &t, dj, T0).await;
    let l = one(s, &t, None, T0).await;
    s.nack(&t, &l.id, Nack::retry(&l.token, "x"), T0)
        .await
        .unwrap();
    let held = one(s, &t, Some(1000), T0).await;
    assert_eq!(held.id.as_str(), "ready");
    // "ready" is now held; enqueue order put "held" behind it.
    let got = s.get(&t, &id("held")).await.unwrap().unwrap();
    assert_eq!(got.state, JobState::Ready);

    assert_eq!(
        s.cancel(&t, &id("sched"), 0).await.unwrap(),
        Some(JobState::Scheduled)
    );
    assert_eq!(
        s.cancel(&t, &id("held"), 0).await.unwrap(),
        Some(JobState::Ready)
    );
    assert_eq!(
        s.cancel(&t, &id("ready"), 0).await.unwrap(),
        Some(JobState::Reserved)
    );
    assert_eq!(
        s.cancel(&t, &id("dead"), 0).await.unwrap(),
        Some(JobState::Dead)
    );
    assert_eq!(s.cancel(&t, &id("dead"), 0).await.unwrap(), None);
    assert!(matches!(
        s.ack(&t, &id("ready"), &held.token, 0).await,
        Err(StoreError::NotFound)
    ));
    let r = s.requeue_expired(&t, 10, T0 + 5000).await.unwrap();
    assert_eq!(
        (r.retried, r.dead),
        (0, 0),
        "a cancelled job is not retried"
    );
    assert!(
        s.reserve(&t, 10, None, T0 + 100_000)
            .await
            .unwrap()
            .leases
            .is_empty()
    );
    let st = s.stats(&t, T0).await.unwrap();
    assert_eq!((st.scheduled, st.ready, st.reserved, st.dead), (0, 0, 0, 0));
    assert_eq!(st.counters.cancelled, 4);
}

/// Reschedule moves a waiting job; a reserved or dead one is refused.
pub async fn reschedule_only_while_waiting(s: &dyn Store) {
    let t = topic("resched");
    put(s, &t, job("a", When::DelayMs(10_000)), T0).await;
    s.reschedule(&t, &id("a"), T0 + 500, false, T0)
        .await
        .unwrap();
    assert!(
        s.reserve(&t, 1, None, T0 + 499)
            .await
            .unwrap()
            .leases
            .is_empty()
    );
    assert_eq!(
        s.get(&t, &id("a")).await.unwrap().unwrap().due_at_ms,
        T0 + 500
    );
    s.reschedule(&t, &id("a"), T0 + 20_000, false, T0)
        .await
        .unwrap();
    let c = s.reserve(&t, 1, None, T0 + 10_000).await.unwrap();
    assert!(c.leases.is_empty(), "moved later");
    assert_eq!(c.next_due_ms, Some(T0 + 20_000));
    // Into the past: due now, stored as the reschedule's time.
    s.reschedule(&t, &id("a"), T0 - 86_400_000, false, T0 + 1)
        .await
        .unwrap();
    assert_eq!(
        s.get(&t, &id("a")).await.unwrap().unwrap().due_at_ms,
        T0 + 1
    );
    s.reschedule(&t, &id("a"), T0 + 20_000, false, T0 + 1)
        .await
        .unwrap();

    put(s, &t, job("b", When::DelayMs(0)), T0).await;
    assert_eq!(
        s.get(&t, &id("b")).await.unwrap().unwrap().state,
        JobState::Ready
    );
    s.reschedule(&t, &id("b"), T0 + 3000, false, T0 + 1)
        .await
        .unwrap();
    assert_eq!(
        s.get(&t, &id("b")).await.unwrap().unwrap().state,
        JobState::Scheduled
    );
    let l = one(s, &t, None, T0 + 3000).await;
    assert!(matches!(
        s.reschedule(&t, &id("b"), T0, false, T0 + 3000).await,
        Err(StoreError::NotInState(JobState::Reserved))
    ));
    s.ack(&t, &id("b"), &l.token, 0).await.unwrap();
    assert!(matches!(
        s.reschedule(&t, &id("b"), T0, false, T0).await,
        Err(StoreError::NotFound)
    ));
}
