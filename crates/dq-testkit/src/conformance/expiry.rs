//! Job expiry (issue #51): a job not handed out by its `expires_at_ms`
//! (its own, or its topic's `expires_ms` after it was due) is never handed
//! out: it goes dead with the last error `expired`, or is dropped, and the
//! topic counts it in `expired_unhandled` (apart from `expired`, leases
//! that ran out). Every hand-out holds it: a reserve, a reserve by id, a
//! keyed lane, a rate-limited topic, a retry after a nack or a lease that
//! ran out, a job rescheduled past its expiry. A replay clears it.

use dq_core::*;

use super::T0;
use super::support::{bucket, id, job, keyed, one, put, strict_topic, topic};

fn expiring(i: &str, when: When, e: Expiry) -> NewJob {
    NewJob {
        expires: Some(e),
        ..job(i, when)
    }
}

async fn reserved_ids(s: &dyn Store, t: &Topic, now: u64) -> Vec<String> {
    let r = s.reserve(t, 10, None, now).await.unwrap();
    r.leases.iter().map(|l| l.id.to_string()).collect()
}

async fn on_expiry(s: &dyn Store, t: &Topic, expires_ms: Option<u64>, drop: bool) {
    s.configure_topic(
        t,
        &TopicConfigPatch {
            expires_ms,
            on_expiry: Some(if drop { OnExpiry::Drop } else { OnExpiry::Dead }),
            ..Default::default()
        },
    )
    .await
    .unwrap();
}

/// A job whose expiry has passed (at or after `expires_at_ms`, by the
/// store's clock) goes dead with the last error `expired` instead of being
/// handed out; one before its expiry, and one without, go as ever. The
/// topic counts it in `expired_unhandled` and `dead`, not in `expired`.
pub async fn expired_job_goes_dead_instead_of_out(s: &dyn Store) {
    let t = topic("exp-dead");
    let e = put(
        s,
        &t,
        expiring("a", When::DelayMs(0), Expiry::InMs(1000)),
        T0,
    )
    .await;
    assert!(e.created);
    put(s, &t, job("b", When::DelayMs(0)), T0).await;
    put(
        s,
        &t,
        expiring("c", When::DelayMs(100), Expiry::AtMs(T0 + 1001)),
        T0,
    )
    .await;
    let a = s.get(&t, &id("a")).await.unwrap().unwrap();
    assert_eq!(a.expires_at_ms, Some(T0 + 1000));
    let b = s.get(&t, &id("b")).await.unwrap().unwrap();
    assert_eq!(b.expires_at_ms, None);
    // At its expiry exactly: not handed out.
    assert_eq!(reserved_ids(s, &t, T0 + 1000).await, ["b", "c"]);
    let a = s.get(&t, &id("a")).await.unwrap().unwrap();
    assert_eq!(a.state, JobState::Dead);
    assert_eq!(a.last_error.as_deref(), Some(EXPIRED_ERROR));
    assert_eq!(a.died_at_ms, Some(T0 + 1000));
    assert_eq!(a.attempts, 0, "never handed out");
    let dead: Vec<String> = s
        .list_dead(&t, 0, 10)
        .await
        .unwrap()
        .iter()
        .map(|j| j.id.to_string())
        .collect();
    assert_eq!(dead, ["a"]);
    let st = s.stats(&t, T0 + 1000).await.unwrap();
    assert_eq!((st.ready, st.reserved, st.dead), (0, 2, 1));
    assert_eq!(
        (
            st.counters.expired_unhandled,
            st.counters.expired,
            st.counters.dead
        ),
        (1, 0, 1)
    );

    // One second before its expiry it goes as any other.
    let t2 = topic("exp-before");
    put(
        s,
        &t2,
        expiring("x", When::DelayMs(0), Expiry::InMs(1000)),
        T0,
    )
    .await;
    assert_eq!(reserved_ids(s, &t2, T0 + 999).await, ["x"]);
    assert_eq!(
        s.stats(&t2, T0 + 999)
            .await
            .unwrap()
            .counters
            .expired_unhandled,
        0
    );
}

/// With the topic's `on_expiry` `drop`, an expired job is deleted: nothing
/// is handed out, no dead letter is kept, and it is still counted.
pub async fn expired_job_is_dropped_when_the_topic_says_so(s: &dyn Store) {
    let t = topic("exp-drop");
    on_expiry(s, &t, None, true).await;
    let cfg = s.topic_config(&t).await.unwrap().unwrap();
    assert_eq!(cfg.on_expiry, OnExpiry::Drop);
    put(
        s,
        &t,
        expiring("a", When::DelayMs(0), Expiry::InMs(500)),
        T0,
    )
    .await;
    put(
        s,
        &t,
        expiring("b", When::DelayMs(0), Expiry::InMs(5000)),
        T0,
    )
    .await;
    assert_eq!(reserved_ids(s, &t, T0 + 600).await, ["b"]);
    assert!(s.get(&t, &id("a")).await.unwrap().is_none(), "dropped");
    let st = s.stats(&t, T0 + 600).await.unwrap();
    assert_eq!((st.ready, st.reserved, st.dead), (0, 1, 0));
    assert_eq!((st.counters.expired_unhandled, st.counters.dead), (1, 0));
}

/// A topic's `expires_ms` gives its jobs that name no expiry one counted
/// from their due time (so a delayed job is never born expired); a job's
/// own expiry wins; a scheduled job due after it expired goes dead when
/// it comes due.
pub async fn topic_expiry_counts_from_the_due_time(s: &dyn Store) {
    let t = topic("exp-topic");
    on_expiry(s, &t, Some(500), false).await;
    let cfg = s.topic_config(&t).await.unwrap().unwrap();
    assert_eq!((cfg.expires_ms, cfg.on_expiry), (500, OnExpiry::Dead));
    put(s, &t, job("later", When::DelayMs(1000)), T0).await;
    put(
        s,
        &t,
        expiring("own", When::DelayMs(1000), Expiry::InMs(10_000)),
        T0,
    )
    .await;
    put(s, &t, job("now", When::DelayMs(0)), T0).await;
    let tr = &t;
    let get = |i: &'static str| async move { s.get(tr, &id(i)).await.unwrap().unwrap() };
    assert_eq!(get("later").await.expires_at_ms, Some(T0 + 1500));
    assert_eq!(get("own").await.expires_at_ms, Some(T0 + 10_000));
    assert_eq!(get("now").await.expires_at_ms, Some(T0 + 500));
    // At T0 + 1500 "later" (due T0 + 1000) and "now" have expired.
    assert_eq!(reserved_ids(s, &t, T0 + 1500).await, ["own"]);
    for i in ["later", "now"] {
        let j = get(i).await;
        assert_eq!(
            (j.state, j.last_error.as_deref()),
            (JobState::Dead, Some("expired"))
        );
    }
    let st = s.stats(&t, T0 + 1500).await.unwrap();
    assert_eq!(st.counters.expired_unhandled, 2);
}

/// The expiry holds for every hand-out of a job, not just its first: a
/// retry after a nack, and one after its lease ran out, due after it are
/// not handed out; nor is a job reserved by id, or rescheduled past it.
pub async fn expiry_holds_for_retries_reserve_by_id_and_reschedule(s: &dyn Store) {
    let t = topic("exp-retry");
    strict_topic(s, &t).await;
    put(
        s,
        &t,
        expiring("n", When::DelayMs(0), Expiry::InMs(1000)),
        T0,
    )
    .await;
    let l = one(s, &t, Some(200), T0).await;
    assert_eq!(l.id.as_str(), "n");
    s.nack(&t, &l.id, Nack::retry(&l.token, "busy"), T0 + 10)
        .await
        .unwrap();
    // The retry is due at T0 + 110: still before the expiry.
    let l = one(s, &t, Some(200), T0 + 110).await;
    assert_eq!((l.id.as_str(), l.attempt), ("n", 2));
    // Its lease runs out at T0 + 310; the retry is due after the expiry.
    s.requeue_expired(&t, 100, T0 + 900).await.unwrap();
    assert!(reserved_ids(s, &t, T0 + 2000).await.is_empty());
    let n = s.get(&t, &id("n")).await.unwrap().unwrap();
    assert_eq!(
        (n.state, n.attempts, n.last_error.as_deref()),
        (JobState::Dead, 2, Some("expired"))
    );
    let st = s.stats(&t, T0 + 2000).await.unwrap();
    assert_eq!((st.counters.expired, st.counters.expired_unhandled), (1, 1));

    // By id: a waiting job past its expiry is not leased; it ends.
    put(
        s,
        &t,
        expiring("id", When::DelayMs(0), Expiry::InMs(100)),
        T0,
    )
    .await;
    assert!(
        s.reserve_job(&t, &id("id"), None, T0 + 100)
            .await
            .unwrap()
            .is_none()
    );
    let j = s.get(&t, &id("id")).await.unwrap().unwrap();
    assert_eq!(j.state, JobState::Dead);

    // Rescheduled past its expiry: it ends when it comes due.
    put(
        s,
        &t,
        expiring("r", When::DelayMs(100), Expiry::InMs(1000)),
        T0,
    )
    .await;
    s.reschedule(&t, &id("r"), T0 + 5000, false, T0)
        .await
        .unwrap();
    assert!(
        reserved_ids(s, &t, T0 + 1500).await.is_empty(),
        "not due yet"
    );
    assert_eq!(
        s.get(&t, &id("r")).await.unwrap().unwrap().state,
        JobState::Scheduled
    );
    assert!(reserved_ids(s, &t, T0 + 5000).await.is_empty());
    let r = s.get(&t, &id("r")).await.unwrap().unwrap();
    assert_eq!(
        (r.state, r.last_error.as_deref()),
        (JobState::Dead, Some("expired"))
    );
}

/// Replaying an expired dead letter clears its expiry: an operator who
/// replays it wants it run.
pub async fn replay_clears_the_expiry(s: &dyn Store) {
    let t = topic("exp-replay");
    put(
        s,
        &t,
        expiring("a", When::DelayMs(0), Expiry::InMs(100)),
        T0,
    )
    .await;
    assert!(reserved_ids(s, &t, T0 + 100).await.is_empty());
    assert_eq!(
        s.replay_dead(&t, Some(&[id("a")]), 10, T0 + 200)
            .await
            .unwrap(),
        1
    );
    let a = s.get(&t, &id("a")).await.unwrap().unwrap();
    assert_eq!((a.state, a.expires_at_ms), (JobState::Ready, None));
    assert_eq!(reserved_ids(s, &t, T0 + 200).await, ["a"]);
}

/// A job held back by the topic's rate limit, or behind its key's
/// concurrency, past its expiry is not handed out when its turn comes; the
/// jobs behind it go in its place.
pub async fn expiry_holds_behind_a_rate_limit_and_in_keyed_lanes(s: &dyn Store) {
    let t = topic("exp-rate");
    s.configure_topic(
        &t,
        &TopicConfigPatch {
            rate_limit: Some(Some(bucket((1, 1000, 1)))),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    put(s, &t, job("a", When::DelayMs(0)), T0).await;
    put(
        s,
        &t,
        expiring("b", When::DelayMs(0), Expiry::InMs(500)),
        T0,
    )
    .await;
    put(s, &t, job("c", When::DelayMs(0)), T0).await;
    assert_eq!(reserved_ids(s, &t, T0).await, ["a"]);
    assert!(reserved_ids(s, &t, T0 + 400).await.is_empty(), "no token");
    assert_eq!(reserved_ids(s, &t, T0 + 1000).await, ["c"]);
    let b = s.get(&t, &id("b")).await.unwrap().unwrap();
    assert_eq!(
        (b.state, b.last_error.as_deref()),
        (JobState::Dead, Some("expired"))
    );

    let t = topic("exp-keys");
    s.configure_topic(
        &t,
        &TopicConfigPatch {
            key_concurrency: Some(Some(1)),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    put(s, &t, keyed("k1", "cust", When::DelayMs(0)), T0).await;
    put(
        s,
        &t,
        NewJob {
            expires: Some(Expiry::InMs(500)),
            ..keyed("k2", "cust", When::DelayMs(0))
        },
        T0,
    )
    .await;
    put(s, &t, keyed("k3", "cust", When::DelayMs(0)), T0).await;
    let l = one(s, &t, None, T0).await;
    assert_eq!(l.id.as_str(), "k1");
    s.ack(&t, &l.id, &l.token, T0 + 600).await.unwrap();
    assert_eq!(reserved_ids(s, &t, T0 + 600).await, ["k3"]);
    let k2 = s.get(&t, &id("k2")).await.unwrap().unwrap();
    assert_eq!(k2.state, JobState::Dead);
    let st = s.stats(&t, T0 + 600).await.unwrap();
    assert_eq!((st.ready, st.reserved, st.dead), (0, 1, 1));
}

/// A reserve that ends jobs whose expiry passed names those with a trace
/// context in its answer ([`Reservation::expired`]), with their context,
/// so their trace records the end; untraced ones are not named.
pub async fn a_reserve_names_the_traced_jobs_it_ended(s: &dyn Store) {
    let t = topic("expiry-traced");
    let ctx = TraceContext::parse(
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        None,
    )
    .unwrap()
    .0;
    let traced = NewJob {
        trace: Some(ctx.clone()),
        ..expiring("traced", When::DelayMs(0), Expiry::InMs(100))
    };
    s.enqueue(
        &t,
        &[
            traced,
            expiring("plain", When::DelayMs(0), Expiry::InMs(100)),
            job("late", When::DelayMs(0)),
        ],
        T0,
    )
    .await
    .unwrap();
    let r = s.reserve(&t, 10, None, T0 + 100).await.unwrap();
    assert_eq!(
        r.leases.iter().map(|l| l.id.as_str()).collect::<Vec<_>>(),
        ["late"]
    );
    assert_eq!(
        r.expired,
        [ExpiredJob {
            id: id("traced"),
            trace: ctx
        }]
    );
    assert!(
        s.reserve(&t, 10, None, T0 + 100)
            .await
            .unwrap()
            .expired
            .is_empty()
    );
}
