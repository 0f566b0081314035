//! The Store contract as scenarios. Each `pub async fn` takes a fresh, empty
//! store and checks one part of the guarantees (README, docs/design.md), with time given
//! explicitly so every expectation is exact. [`conformance_tests!`](crate::conformance_tests) turns all
//! of them into `#[tokio::test]`s for one store.
//!
//! Every assertion here would fail if the store broke the rule it checks.

use dq_core::*;

/// A fixed starting time for scenarios (2023-11-14).
pub const T0: u64 = 1_700_000_000_000;

fn topic(name: &str) -> Topic {
    Topic::new(name).unwrap()
}

fn id(s: &str) -> JobId {
    JobId::new(s).unwrap()
}

fn job(i: &str, when: When) -> NewJob {
    NewJob::new(id(i), Body::Json(format!("{{\"n\":\"{i}\"}}")), when)
}

async fn put(s: &dyn Store, t: &Topic, j: NewJob, now: u64) -> Enqueued {
    s.enqueue(t, &[j], now).await.unwrap().remove(0)
}

/// Reserves the next job of `t` (there must be one).
async fn one(s: &dyn Store, t: &Topic, lease_ms: Option<u64>, now: u64) -> Lease {
    s.reserve(t, 1, lease_ms, now)
        .await
        .unwrap()
        .leases
        .pop()
        .expect("a job to reserve")
}

fn ids(c: &Reservation) -> Vec<String> {
    c.leases.iter().map(|l| l.id.to_string()).collect()
}

/// Exact retry waits, no jitter: 100, 300, 700 ms; 4 attempts.
async fn strict_topic(s: &dyn Store, t: &Topic) {
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

/// No job is handed out before its due time; a past due time means now.
pub async fn reserve_never_early(s: &dyn Store) {
    let t = topic("never-early");
    let e = put(s, &t, job("a", When::DelayMs(1000)), T0).await;
    assert!(e.created);
    assert_eq!(e.due_at_ms, T0 + 1000);
    assert_eq!(e.state, JobState::Scheduled);

    let c = s.reserve(&t, 10, None, T0 + 999).await.unwrap();
    assert!(c.leases.is_empty(), "handed out 1 ms early");
    assert_eq!(c.next_due_ms, Some(T0 + 1000), "tells when to look again");
    assert!(s.promote_due(&t, 10, T0 + 999).await.unwrap().moved == 0);

    let c = s.reserve(&t, 10, None, T0 + 1000).await.unwrap();
    assert_eq!(ids(&c), vec!["a"]);
    assert_eq!(c.leases[0].attempt, 1);
    assert_eq!(c.leases[0].due_at_ms, T0 + 1000);
    assert_eq!(c.next_due_ms, None);

    let e = put(s, &t, job("past", When::DueAtMs(T0 - 5000)), T0 + 2000).await;
    assert_eq!(e.state, JobState::Ready, "a past due time is due now");
    assert_eq!(
        e.due_at_ms,
        T0 + 2000,
        "…and stored as its enqueue time: lateness and overdue count from there"
    );
    let e = put(s, &t, job("abs", When::DueAtMs(T0 + 5000)), T0 + 2000).await;
    assert_eq!((e.due_at_ms, e.state), (T0 + 5000, JobState::Scheduled));
    let c = s.reserve(&t, 10, None, T0 + 4999).await.unwrap();
    assert_eq!(ids(&c), vec!["past"]);
    assert_eq!(c.next_due_ms, Some(T0 + 5000));
}

/// Due jobs go out by priority (lower first), then due time, then enqueue order.
pub async fn reserve_by_priority_due_then_fifo(s: &dyn Store) {
    let t = topic("order");
    let mut specs = vec![
        ("z-late", 1024, 300),
        ("y-tie1", 1024, 200),
        ("b-tie2", 1024, 200),
        ("a-tie3", 1024, 200),
        ("urgent", 1, 400),
        ("lazy", 5000, 100),
        ("x-early", 1024, 100),
    ];
    for (name, prio, delay) in specs.drain(..) {
        let mut j = job(name, When::DelayMs(delay));
        j.priority = prio;
        put(s, &t, j, T0).await;
    }
    let c = s.reserve(&t, 3, None, T0 + 1000).await.unwrap();
    assert_eq!(ids(&c), vec!["urgent", "x-early", "y-tie1"]);
    assert_eq!(c.next_due_ms, Some(T0 + 1000), "more are ready now");
    let c = s.reserve(&t, 10, None, T0 + 1000).await.unwrap();
    assert_eq!(ids(&c), vec!["b-tie2", "a-tie3", "z-late", "lazy"]);
}

/// A batch enqueue reports a result per job, in order, duplicates included.
pub async fn enqueue_batch_results_per_job(s: &dyn Store) {
    let t = topic("batch");
    put(s, &t, job("old", When::DelayMs(50)), T0).await;
    let jobs: Vec<NewJob> = ["n1", "old", "n2", "n1"]
        .iter()
        .map(|i| job(i, When::DelayMs(10)))
        .collect();
    let r = s.enqueue(&t, &jobs, T0 + 1).await.unwrap();
    let got: Vec<(String, bool, u64)> = r
        .iter()
        .map(|e| (e.id.to_string(), e.created, e.due_at_ms))
        .collect();
    assert_eq!(
        got,
        vec![
            ("n1".into(), true, T0 + 11),
            ("old".into(), false, T0 + 50),
            ("n2".into(), true, T0 + 11),
            ("n1".into(), false, T0 + 11),
        ]
    );
    let big: Vec<NewJob> = (0..limits::MAX_BATCH)
        .map(|i| job(&format!("big-{i:04}"), When::DelayMs(0)))
        .collect();
    let r = s.enqueue(&t, &big, T0).await.unwrap();
    assert_eq!(r.iter().filter(|e| e.created).count(), limits::MAX_BATCH);
    let c = s
        .reserve(&t, limits::MAX_RESERVE, None, T0 + 100)
        .await
        .unwrap();
    assert_eq!(c.leases.len(), limits::MAX_RESERVE);
    assert_eq!(c.leases[0].id.as_str(), "big-0000", "FIFO within a batch");
    assert_eq!(c.leases[999].id.as_str(), "big-0999");
    assert_eq!(s.stats(&t, T0 + 100).await.unwrap().counters.enqueued, 1003);
}

/// Same id again: nothing changes; `replace` rewrites a waiting job only.
pub async fn enqueue_is_idempotent_or_replaces(s: &dyn Store) {
    let t = topic("idem");
    put(s, &t, job("k", When::DelayMs(1000)), T0).await;
    let mut again = job("k", When::DelayMs(5));
    again.body = Body::Json("\"new\"".into());
    let e = put(s, &t, again.clone(), T0).await;
    assert!(!e.created && !e.replaced);
    assert_eq!((e.due_at_ms, e.state), (T0 + 1000, JobState::Scheduled));
    let got = s.get(&t, &id("k")).await.unwrap().unwrap();
    assert_eq!(
        got.body,
        Body::Json("{\"n\":\"k\"}".into()),
        "body unchanged"
    );

    again.replace = true;
    let e = put(s, &t, again.clone(), T0).await;
    assert!(e.replaced && !e.created);
    assert_eq!(e.due_at_ms, T0 + 5);
    let got = s.get(&t, &id("k")).await.unwrap().unwrap();
    assert_eq!(got.body, Body::Json("\"new\"".into()));
    assert_eq!(
        s.stats(&t, T0).await.unwrap().scheduled,
        1,
        "not duplicated"
    );

    let c = s.reserve(&t, 1, None, T0 + 5).await.unwrap();
    assert_eq!(ids(&c), vec!["k"]);
    let mut third = again.clone();
    third.body = Body::Json("\"third\"".into());
    let e = put(s, &t, third, T0 + 6).await;
    assert!(!e.created && !e.replaced, "a reserved job is not replaced");
    assert_eq!(e.state, JobState::Reserved);
    let got = s.get(&t, &id("k")).await.unwrap().unwrap();
    assert_eq!(got.body, Body::Json("\"new\"".into()));
    s.ack(&t, &id("k"), &c.leases[0].token, 0).await.unwrap();
}

/// One batch that names a job again with `replace` leaves it where the last
/// item says, and nowhere else: due now after due later (and after due in
/// an hour), due later after due now. (A store that writes a batch's
/// schedule and ready entries together must not let an earlier item's
/// entry outlive its replacement.)
pub async fn enqueue_batch_replacing_its_own_jobs(s: &dyn Store) {
    let t = topic("batch-replace");
    let again = |i: &str, when: When| NewJob {
        replace: true,
        ..job(i, when)
    };
    let batch = [
        job("x", When::DelayMs(5000)),
        again("x", When::DelayMs(0)),
        job("y", When::DelayMs(0)),
        again("y", When::DelayMs(5000)),
        job("z", When::DelayMs(3_600_000)),
        again("z", When::DelayMs(7000)),
    ];
    let out = s.enqueue(&t, &batch, T0).await.unwrap();
    let states: Vec<_> = out
        .iter()
        .map(|e| (e.created, e.replaced, e.state))
        .collect();
    assert_eq!(
        states,
        vec![
            (true, false, JobState::Scheduled),
            (false, true, JobState::Ready),
            (true, false, JobState::Ready),
            (false, true, JobState::Scheduled),
            (true, false, JobState::Scheduled),
            (false, true, JobState::Scheduled),
        ]
    );
    let st = s.stats(&t, T0).await.unwrap();
    assert_eq!((st.scheduled, st.ready), (2, 1), "each job counted once");
    let c = s.reserve(&t, 10, None, T0).await.unwrap();
    assert_eq!(ids(&c), vec!["x"], "y is no longer ready");
    assert_eq!(c.next_due_ms, Some(T0 + 5000), "x's first due time is gone");
    assert!(
        s.reserve(&t, 10, None, T0 + 4999)
            .await
            .unwrap()
            .leases
            .is_empty()
    );
    let c = s.reserve(&t, 10, None, T0 + 5000).await.unwrap();
    assert_eq!(ids(&c), vec!["y"]);
    assert_eq!(c.next_due_ms, Some(T0 + 7000));
    let c = s.reserve(&t, 10, None, T0 + 7000).await.unwrap();
    assert_eq!(ids(&c), vec!["z"]);
    let c = s.reserve(&t, 10, None, T0 + 3_700_000).await.unwrap();
    assert!(
        c.leases.is_empty(),
        "nothing handed out twice: {:?}",
        ids(&c)
    );
    let st = s.stats(&t, T0 + 7000).await.unwrap();
    assert_eq!((st.scheduled, st.ready, st.reserved), (0, 0, 3));
}

/// Among many concurrent reservers each job has one holder.
pub async fn reserve_one_holder_among_concurrent_callers(s: &dyn Store) {
    let t = topic("race");
    let jobs: Vec<NewJob> = (0..200)
        .map(|i| job(&format!("j{i}"), When::DelayMs(0)))
        .collect();
    s.enqueue(&t, &jobs, T0).await.unwrap();
    let reserves =
        futures::future::join_all((0..16).map(|_| s.reserve(&t, 20, None, T0 + 1))).await;
    let mut seen = std::collections::HashSet::new();
    for c in reserves {
        for l in c.unwrap().leases {
            assert!(seen.insert(l.id.clone()), "{} handed out twice", l.id);
        }
    }
    assert_eq!(seen.len(), 200);
    let st = s.stats(&t, T0 + 1).await.unwrap();
    assert_eq!((st.ready, st.reserved), (0, 200));
}

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

/// A batch of acks (`Store::ack_batch`) over three topics answers per item,
/// in order, what single acks one after the other would: valid tokens ack
/// (counters, dedup windows and a keyed job's key slot as `ack`), a stale
/// token, a waiting job, an unknown or already acked id, a topic that does
/// not exist, a second item for a job the batch already acked and a dead
/// job are refused, and nothing changes for them.
pub async fn ack_batch_results_per_job(s: &dyn Store) {
    assert!(s.ack_batch(&[], T0).await.is_empty());
    let (a, b) = (topic("acks"), topic("acks-b"));
    strict_topic(s, &a).await;
    // "stale": its first lease expired, a second attempt holds it now.
    put(s, &a, job("stale", When::DelayMs(0)), T0).await;
    let first = one(s, &a, Some(1000), T0).await;
    s.requeue_expired(&a, 10, T0 + 1001).await.unwrap();
    let now = T0 + 2000;
    let second = one(s, &a, Some(60_000), now).await;
    let mut lease_of = Vec::new();
    for name in ["v1", "v2", "gone", "dead"] {
        put(s, &a, job(name, When::DelayMs(0)), now).await;
        lease_of.push(one(s, &a, None, now).await);
    }
    let dd = || NewJob {
        dedup_ms: Some(1000),
        ..job("dd", When::DelayMs(0))
    };
    put(s, &a, dd(), now).await;
    let ldd = one(s, &a, None, now).await;
    put(s, &a, job("waiting", When::DelayMs(0)), now).await;
    put(s, &b, job("v3", When::DelayMs(0)), now).await;
    let l3 = one(s, &b, None, now).await;
    // A keyed job holding its key's only slot, and a topic that does not exist.
    let c = topic("acks-keyed");
    strict_topic(s, &c).await;
    key_limits(s, &c, Some(Some(1)), None).await;
    put(s, &c, keyed("k1", "kk", When::DelayMs(0)), now).await;
    put(s, &c, keyed("k2", "kk", When::DelayMs(0)), now).await;
    let lk = one(s, &c, None, now).await;
    assert_eq!(lk.id.as_str(), "k1");
    let nowhere = topic("acks-nowhere");
    let [l1, l2, lg, ld] = <[Lease; 4]>::try_from(lease_of).unwrap();
    s.ack(&a, &lg.id, &lg.token, now).await.unwrap();
    s.nack(&a, &ld.id, Nack::dead(&ld.token, "no"), now)
        .await
        .unwrap();

    let never = id("never");
    let items = [
        Held {
            topic: &a,
            id: &l1.id,
            token: &l1.token,
        },
        Held {
            topic: &a,
            id: &second.id,
            token: &first.token,
        },
        Held {
            topic: &a,
            id: &never,
            token: "tok",
        },
        Held {
            topic: &b,
            id: &l3.id,
            token: &l3.token,
        },
        Held {
            topic: &a,
            id: &lg.id,
            token: &lg.token,
        },
        Held {
            topic: &a,
            id: &l1.id,
            token: &l1.token,
        },
        Held {
            topic: &a,
            id: &ld.id,
            token: &ld.token,
        },
        Held {
            topic: &a,
            id: &id("waiting"),
            token: &l2.token,
        },
        Held {
            topic: &a,
            id: &l2.id,
            token: &l2.token,
        },
        Held {
            topic: &a,
            id: &ldd.id,
            token: &ldd.token,
        },
        Held {
            topic: &c,
            id: &lk.id,
            token: &lk.token,
        },
        Held {
            topic: &nowhere,
            id: &never,
            token: "tok",
        },
    ];
    let got: Vec<String> = s
        .ack_batch(&items, now + 10)
        .await
        .into_iter()
        .map(|r| match r {
            Ok(()) => "ok".to_string(),
            Err(StoreError::NotFound) => "not_found".to_string(),
            Err(StoreError::LeaseMismatch) => "stale".to_string(),
            Err(StoreError::NotInState(st)) => format!("{st:?}"),
            Err(e) => format!("unexpected {e:?}"),
        })
        .collect();
    assert_eq!(
        got,
        [
            "ok",
            "stale",
            "not_found",
            "ok",
            "not_found",
            "not_found",
            "Dead",
            "stale",
            "ok",
            "ok",
            "ok",
            "not_found"
        ]
    );
    for (t, j) in [(&a, "v1"), (&a, "v2"), (&a, "dd"), (&b, "v3")] {
        assert_eq!(s.get(t, &id(j)).await.unwrap(), None, "{j} acked");
    }
    // The refused ones are as they were.
    let st = s.get(&a, &id("stale")).await.unwrap().unwrap();
    assert_eq!((st.state, st.attempts), (JobState::Reserved, 2));
    assert_eq!(st.lease_deadline_ms, Some(now + 60_000));
    assert_eq!(
        s.get(&a, &id("dead")).await.unwrap().unwrap().state,
        JobState::Dead
    );
    assert_eq!(
        s.get(&a, &id("waiting")).await.unwrap().unwrap().state,
        JobState::Ready
    );
    let sa = s.stats(&a, now + 10).await.unwrap();
    assert_eq!((sa.scheduled, sa.ready, sa.reserved, sa.dead), (0, 1, 1, 1));
    assert_eq!(sa.counters.acked, 4, "gone before, then v1, v2, dd");
    let sb = s.stats(&b, now + 10).await.unwrap();
    assert_eq!((sb.reserved, sb.counters.acked), (0, 1));
    // The stale item's holder still acks; dd's dedup window runs from the batch.
    s.ack(&a, &second.id, &second.token, now + 20)
        .await
        .unwrap();
    let again = put(s, &a, dd(), now + 1009).await;
    assert!(again.deduplicated && !again.created, "{again:?}");
    assert!(put(s, &a, dd(), now + 1010).await.created);
    // The keyed job's ack freed its key's slot: the key's next job goes.
    let r = s.reserve(&c, 10, None, now + 20).await.unwrap();
    assert_eq!(ids(&r), vec!["k2"]);
    assert_eq!(s.stats(&c, now + 20).await.unwrap().counters.acked, 1);
}

/// Names a batch item's result for comparing a whole batch at once.
fn outcome<T: std::fmt::Debug>(r: StoreResult<T>) -> String {
    match r {
        Ok(v) => format!("{v:?}"),
        Err(StoreError::NotFound) => "not_found".to_string(),
        Err(StoreError::LeaseMismatch) => "stale".to_string(),
        Err(StoreError::NotInState(st)) => format!("{st:?}"),
        Err(e) => format!("unexpected {e:?}"),
    }
}

/// A batch of nacks (`Store::nack_batch`) over two topics answers per item,
/// in order, what single nacks one after the other would: retried by the
/// policy or after `retry_in_ms` (with a new priority), dead at once, dead
/// after the last attempt; a stale token, a waiting job, an unknown or
/// acked id, a dead job and a second item for a job the batch already
/// nacked are refused, and nothing changes for them. A nacked keyed job
/// frees its key's slot as `nack` does.
pub async fn nack_batch_results_per_job(s: &dyn Store) {
    assert!(s.nack_batch(&[], T0).await.is_empty());
    let (a, b) = (topic("nacks"), topic("nacks-keyed"));
    strict_topic(s, &a).await;
    strict_topic(s, &b).await;
    key_limits(s, &b, Some(Some(1)), None).await;
    // "stale": its first lease expired, a second attempt holds it now.
    put(s, &a, job("stale", When::DelayMs(0)), T0).await;
    let first = one(s, &a, Some(1000), T0).await;
    s.requeue_expired(&a, 10, T0 + 1001).await.unwrap();
    let now = T0 + 2000;
    let second = one(s, &a, Some(60_000), now).await;
    let mut lease_of = Vec::new();
    for name in ["r1", "r2", "bury", "gone", "dead"] {
        put(s, &a, job(name, When::DelayMs(0)), now).await;
        lease_of.push(one(s, &a, None, now).await);
    }
    let last = NewJob {
        max_attempts: Some(1),
        ..job("last", When::DelayMs(0))
    };
    put(s, &a, last, now).await;
    let ll = one(s, &a, None, now).await;
    put(s, &a, job("waiting", When::DelayMs(0)), now).await;
    put(s, &b, keyed("k1", "kk", When::DelayMs(0)), now).await;
    put(s, &b, keyed("k2", "kk", When::DelayMs(0)), now).await;
    let lk = one(s, &b, None, now).await;
    assert_eq!(lk.id.as_str(), "k1");
    assert!(
        s.reserve(&b, 10, None, now)
            .await
            .unwrap()
            .leases
            .is_empty(),
        "k2 waits for its key"
    );
    let [l1, l2, lb, lg, ld] = <[Lease; 5]>::try_from(lease_of).unwrap();
    s.ack(&a, &lg.id, &lg.token, now).await.unwrap();
    s.nack(&a, &ld.id, Nack::dead(&ld.token, "before"), now)
        .await
        .unwrap();

    let never = id("never");
    let waiting = id("waiting");
    let item = |topic, id, nack| HeldNack { topic, id, nack };
    let items = [
        item(&a, &l1.id, Nack::retry(&l1.token, "e1")),
        item(&a, &second.id, Nack::retry(&first.token, "old")),
        item(&a, &never, Nack::retry("tok", "x")),
        item(&b, &lk.id, Nack::retry(&lk.token, "ek").retry_in(0)),
        item(
            &a,
            &l2.id,
            Nack::retry(&l2.token, "e2").retry_in(5000).with_priority(7),
        ),
        item(&a, &lg.id, Nack::retry(&lg.token, "x")),
        item(&a, &l1.id, Nack::retry(&l1.token, "again")),
        item(&a, &ld.id, Nack::retry(&ld.token, "x")),
        item(&a, &waiting, Nack::retry(&l2.token, "x")),
        item(&a, &lb.id, Nack::dead(&lb.token, "eb")),
        item(&a, &lb.id, Nack::dead(&lb.token, "again")),
        item(&a, &ll.id, Nack::retry(&ll.token, "el")),
    ];
    let at = now + 10;
    let got: Vec<String> = s
        .nack_batch(&items, at)
        .await
        .into_iter()
        .map(outcome)
        .collect();
    let retry = |due_at_ms, attempt| format!("{:?}", NackOutcome::Retry { due_at_ms, attempt });
    let dead = |attempt| format!("{:?}", NackOutcome::Dead { attempt });
    assert_eq!(
        got,
        [
            retry(at + 100, 1),
            "stale".into(),
            "not_found".into(),
            retry(at, 1),
            retry(at + 5000, 1),
            "not_found".into(),
            "stale".into(),
            "Dead".into(),
            "stale".into(),
            dead(1),
            "Dead".into(),
            dead(1),
        ]
    );
    let r1 = s.get(&a, &id("r1")).await.unwrap().unwrap();
    assert_eq!(
        (r1.state, r1.due_at_ms, r1.last_error.as_deref()),
        (JobState::Scheduled, at + 100, Some("e1"))
    );
    assert_eq!(r1.counts.releases, 1, "the duplicate counted nothing");
    let r2 = s.get(&a, &id("r2")).await.unwrap().unwrap();
    assert_eq!(
        (r2.state, r2.due_at_ms, r2.priority),
        (JobState::Scheduled, at + 5000, 7)
    );
    for (j, error) in [("bury", "eb"), ("last", "el"), ("dead", "before")] {
        let d = s.get(&a, &id(j)).await.unwrap().unwrap();
        assert_eq!(
            (d.state, d.last_error.as_deref()),
            (JobState::Dead, Some(error)),
            "{j}"
        );
    }
    // The refused ones are as they were.
    let st = s.get(&a, &id("stale")).await.unwrap().unwrap();
    assert_eq!((st.state, st.attempts), (JobState::Reserved, 2));
    assert_eq!(st.lease_deadline_ms, Some(now + 60_000));
    assert_eq!(st.counts.releases, 0);
    let w = s.get(&a, &waiting).await.unwrap().unwrap();
    assert_eq!((w.state, w.attempts), (JobState::Ready, 0));
    let sa = s.stats(&a, at).await.unwrap();
    assert_eq!((sa.scheduled, sa.ready, sa.reserved, sa.dead), (2, 1, 1, 3));
    assert_eq!(
        sa.counters.failed,
        1 + 1 + 4,
        "expired, before, then r1 r2 bury last"
    );
    // The keyed job freed its key's slot: the key's next job goes; k1 waits
    // behind it in the key's lane.
    let r = s.reserve(&b, 10, None, at).await.unwrap();
    assert_eq!(ids(&r), vec!["k2"]);
    // The stale item's holder still nacks.
    s.nack(&a, &second.id, Nack::retry(&second.token, "mine"), at)
        .await
        .unwrap();
}

/// A batch of touches (`Store::touch_batch`) over two topics answers per
/// item, in order, what single touches one after the other would: the new
/// deadline (the item's lease, else the job's, else the topic's), again for
/// a second item of the same job; a stale token, a waiting job, an unknown
/// id and a dead job are refused, and nothing changes for them.
pub async fn touch_batch_results_per_job(s: &dyn Store) {
    assert!(s.touch_batch(&[], T0).await.is_empty());
    let (a, b) = (topic("touches"), topic("touches-b"));
    strict_topic(s, &a).await;
    put(s, &a, job("stale", When::DelayMs(0)), T0).await;
    let first = one(s, &a, Some(1000), T0).await;
    s.requeue_expired(&a, 10, T0 + 1001).await.unwrap();
    let now = T0 + 2000;
    let second = one(s, &a, Some(60_000), now).await;
    put(s, &a, job("v1", When::DelayMs(0)), now).await;
    let l1 = one(s, &a, Some(1000), now).await;
    let own = NewJob {
        lease_ms: Some(7000),
        ..job("own", When::DelayMs(0))
    };
    put(s, &a, own, now).await;
    let lo = one(s, &a, None, now).await;
    put(s, &a, job("dflt", When::DelayMs(0)), now).await;
    let lf = one(s, &a, Some(1000), now).await;
    put(s, &a, job("dead", When::DelayMs(0)), now).await;
    let ld = one(s, &a, None, now).await;
    s.nack(&a, &ld.id, Nack::dead(&ld.token, "no"), now)
        .await
        .unwrap();
    put(s, &a, job("waiting", When::DelayMs(0)), now).await;
    put(s, &b, job("v3", When::DelayMs(0)), now).await;
    let l3 = one(s, &b, Some(1000), now).await;

    let (never, waiting) = (id("never"), id("waiting"));
    let item = |topic, id, token, lease_ms| HeldTouch {
        topic,
        id,
        token,
        lease_ms,
    };
    let items = [
        item(&a, &l1.id, &l1.token, Some(5000)),
        item(&a, &second.id, &first.token, Some(5000)),
        item(&a, &never, "tok", None),
        item(&b, &l3.id, &l3.token, Some(9000)),
        item(&a, &lo.id, &lo.token, None),
        item(&a, &lf.id, &lf.token, None),
        item(&a, &ld.id, &ld.token, None),
        item(&a, &waiting, &l1.token, None),
        item(&a, &l1.id, &l1.token, Some(2000)),
    ];
    let at = now + 10;
    let got: Vec<String> = s
        .touch_batch(&items, at)
        .await
        .into_iter()
        .map(outcome)
        .collect();
    let topic_lease = TopicConfig::default().lease_ms;
    let d = |ms: u64| (at + ms).to_string();
    assert_eq!(
        got,
        [
            d(5000),
            "stale".into(),
            "not_found".into(),
            d(9000),
            d(7000),
            d(topic_lease),
            "Dead".into(),
            "stale".into(),
            d(2000),
        ]
    );
    for (t, j, deadline) in [
        (&a, "v1", at + 2000),
        (&b, "v3", at + 9000),
        (&a, "own", at + 7000),
        (&a, "dflt", at + topic_lease),
        (&a, "stale", now + 60_000),
    ] {
        let info = s.get(t, &id(j)).await.unwrap().unwrap();
        assert_eq!(
            (info.state, info.lease_deadline_ms),
            (JobState::Reserved, Some(deadline)),
            "{j}"
        );
    }
    let w = s.get(&a, &waiting).await.unwrap().unwrap();
    assert_eq!((w.state, w.lease_deadline_ms), (JobState::Ready, None));
    assert_eq!(
        s.get(&a, &ld.id).await.unwrap().unwrap().state,
        JobState::Dead
    );
    // The leases end where the batch put them: v1 (2 s) first.
    let r = s.requeue_expired(&a, 10, at + 2001).await.unwrap();
    assert_eq!((r.retried, r.dead), (1, 0));
    assert_eq!(
        s.get(&a, &l1.id).await.unwrap().unwrap().state,
        JobState::Scheduled
    );
    assert_eq!(r.next_deadline_ms, Some(at + 7000));
}

/// Batches of more than `MAX_BATCH` items (a store may split them) answer
/// every item, in order: a touch and a nack of each of `MAX_BATCH + 5`
/// reserved jobs, with a last item repeating the first (refused after it,
/// across any split).
pub async fn batch_verbs_over_max_batch(s: &dyn Store) {
    let t = topic("big-batches");
    let n = limits::MAX_BATCH + 5;
    let jobs: Vec<NewJob> = (0..n)
        .map(|i| job(&format!("j{i:04}"), When::DelayMs(0)))
        .collect();
    for chunk in jobs.chunks(limits::MAX_BATCH) {
        s.enqueue(&t, chunk, T0).await.unwrap();
    }
    let mut leases: Vec<Lease> = Vec::new();
    while leases.len() < n {
        let r = s.reserve(&t, limits::MAX_RESERVE, None, T0).await.unwrap();
        assert!(!r.leases.is_empty(), "all {n} are due");
        leases.extend(r.leases);
    }
    let now = T0 + 10;
    let mut touches: Vec<HeldTouch<'_>> = leases
        .iter()
        .map(|l| HeldTouch {
            topic: &t,
            id: &l.id,
            token: &l.token,
            lease_ms: Some(60_000),
        })
        .collect();
    touches.push(touches[0]);
    let done = s.touch_batch(&touches, now).await;
    assert_eq!(done.len(), n + 1);
    assert!(
        done.iter()
            .all(|r| matches!(r, Ok(d) if *d == now + 60_000)),
        "every touch answered, in order"
    );
    let mut nacks: Vec<HeldNack<'_>> = leases
        .iter()
        .map(|l| HeldNack {
            topic: &t,
            id: &l.id,
            nack: Nack::retry(&l.token, "big").retry_in(1000),
        })
        .collect();
    nacks.push(nacks[0]);
    let done = s.nack_batch(&nacks, now).await;
    assert_eq!(done.len(), n + 1);
    for r in &done[..n] {
        assert_eq!(
            r.as_ref().ok(),
            Some(&NackOutcome::Retry {
                due_at_ms: now + 1000,
                attempt: 1
            })
        );
    }
    assert!(
        matches!(done[n], Err(StoreError::LeaseMismatch)),
        "{:?}",
        done[n]
    );
    let st = s.stats(&t, now).await.unwrap();
    assert_eq!((st.scheduled, st.reserved), (n as u64, 0));
    assert_eq!(st.counters.failed, n as u64);
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

/// Replay makes dead letters due now with a fresh attempt count (an id
/// named twice, once); purge deletes them.
pub async fn replay_and_purge_dead(s: &dyn Store) {
    let t = topic("replay");
    for i in ["a", "b", "c"] {
        let mut j = job(i, When::DelayMs(0));
        j.max_attempts = Some(1);
        put(s, &t, j, T0).await;
    }
    for l in s.reserve(&t, 10, None, T0).await.unwrap().leases {
        assert_eq!(
            s.nack(&t, &l.id, Nack::retry(&l.token, "no"), T0 + 1)
                .await
                .unwrap(),
            NackOutcome::Dead { attempt: 1 }
        );
    }
    assert_eq!(
        s.replay_dead(&t, Some(&[id("b"), id("zz"), id("b")]), 100, T0 + 10)
            .await
            .unwrap(),
        1
    );
    let st = s.stats(&t, T0 + 10).await.unwrap();
    assert_eq!(
        (st.dead, st.ready, st.counters.replayed),
        (2, 1, 1),
        "moved and counted once"
    );
    let info = s.get(&t, &id("b")).await.unwrap().unwrap();
    assert_eq!(
        (info.state, info.attempts, info.due_at_ms),
        (JobState::Ready, 0, T0 + 10)
    );
    assert_eq!(info.died_at_ms, None);
    let l = s.reserve(&t, 10, None, T0 + 10).await.unwrap().leases;
    assert_eq!(l.len(), 1);
    assert_eq!((l[0].id.as_str(), l[0].attempt), ("b", 1));

    assert_eq!(
        s.replay_dead(&t, None, 1, T0 + 20).await.unwrap(),
        1,
        "capped batch"
    );
    assert_eq!(s.list_dead(&t, 0, 10).await.unwrap().len(), 1);
    assert_eq!(s.purge_dead(&t, 100).await.unwrap(), 1);
    assert!(s.list_dead(&t, 0, 10).await.unwrap().is_empty());
    assert!(
        s.get(&t, &id("c")).await.unwrap().is_none(),
        "purged letters are gone"
    );
    assert_eq!(s.stats(&t, T0).await.unwrap().counters.replayed, 2);
}

/// Beyond `dead_cap` the oldest dead letters are dropped and counted.
pub async fn nack_past_dead_cap_drops_oldest(s: &dyn Store) {
    let t = topic("cap");
    s.configure_topic(
        &t,
        &TopicConfigPatch {
            dead_cap: Some(2),
            max_attempts: Some(1),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    for (i, name) in ["d1", "d2", "d3"].iter().enumerate() {
        put(s, &t, job(name, When::DelayMs(0)), T0).await;
        let l = one(s, &t, None, T0).await;
        s.nack(&t, &l.id, Nack::retry(&l.token, "x"), T0 + i as u64)
            .await
            .unwrap();
    }
    let dead: Vec<String> = s
        .list_dead(&t, 0, 10)
        .await
        .unwrap()
        .iter()
        .map(|j| j.id.to_string())
        .collect();
    assert_eq!(dead, vec!["d2", "d3"]);
    assert!(s.get(&t, &id("d1")).await.unwrap().is_none());
    let st = s.stats(&t, T0).await.unwrap();
    assert_eq!((st.dead, st.counters.dead_dropped), (2, 1));
}

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
    s.reschedule(&t, &id("a"), T0 + 500, T0).await.unwrap();
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
    s.reschedule(&t, &id("a"), T0 + 20_000, T0).await.unwrap();
    let c = s.reserve(&t, 1, None, T0 + 10_000).await.unwrap();
    assert!(c.leases.is_empty(), "moved later");
    assert_eq!(c.next_due_ms, Some(T0 + 20_000));
    // Into the past: due now, stored as the reschedule's time.
    s.reschedule(&t, &id("a"), T0 - 86_400_000, T0 + 1)
        .await
        .unwrap();
    assert_eq!(
        s.get(&t, &id("a")).await.unwrap().unwrap().due_at_ms,
        T0 + 1
    );
    s.reschedule(&t, &id("a"), T0 + 20_000, T0 + 1)
        .await
        .unwrap();

    put(s, &t, job("b", When::DelayMs(0)), T0).await;
    assert_eq!(
        s.get(&t, &id("b")).await.unwrap().unwrap().state,
        JobState::Ready
    );
    s.reschedule(&t, &id("b"), T0 + 3000, T0 + 1).await.unwrap();
    assert_eq!(
        s.get(&t, &id("b")).await.unwrap().unwrap().state,
        JobState::Scheduled
    );
    let l = one(s, &t, None, T0 + 3000).await;
    assert!(matches!(
        s.reschedule(&t, &id("b"), T0, T0 + 3000).await,
        Err(StoreError::NotInState(JobState::Reserved))
    ));
    s.ack(&t, &id("b"), &l.token, 0).await.unwrap();
    assert!(matches!(
        s.reschedule(&t, &id("b"), T0, T0).await,
        Err(StoreError::NotFound)
    ));
}

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

/// Topic settings: defaults, partial updates, the default delay, listing, deletion.
pub async fn configure_topic_and_list_topics(s: &dyn Store) {
    let t = topic("cfg");
    assert!(s.topic_config(&t).await.unwrap().is_none(), "unknown topic");
    let c = s
        .configure_topic(
            &t,
            &TopicConfigPatch {
                default_delay_ms: Some(777),
                lease_ms: Some(1234),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        (c.default_delay_ms, c.lease_ms, c.max_attempts),
        (777, 1234, 5)
    );
    let c = s
        .configure_topic(
            &t,
            &TopicConfigPatch {
                max_attempts: Some(9),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        (c.default_delay_ms, c.max_attempts),
        (777, 9),
        "others kept"
    );
    assert_eq!(s.topic_config(&t).await.unwrap(), Some(c));

    let e = put(s, &t, job("d", When::TopicDefault), T0).await;
    assert_eq!(e.due_at_ms, T0 + 777);
    // Reads show the limits in effect: the topic's, for a job without its
    // own, whatever the topic says now.
    let info = s.get(&t, &id("d")).await.unwrap().unwrap();
    assert_eq!(
        (info.max_attempts, info.lease_ms),
        (9, 1234),
        "topic's limits"
    );
    let mut own = job("own", When::DelayMs(60_000));
    own.max_attempts = Some(2);
    put(s, &t, own, T0).await;
    let listed = s.list_scheduled(&t, 10).await.unwrap();
    let limits: Vec<(String, u32, u64)> = listed
        .iter()
        .map(|j| (j.id.to_string(), j.max_attempts, j.lease_ms))
        .collect();
    assert_eq!(
        limits,
        vec![("d".into(), 9, 1234), ("own".into(), 2, 1234)],
        "listed with the limits in effect"
    );
    s.cancel(&t, &id("own"), 0).await.unwrap();
    let l = one(s, &t, None, T0 + 777).await;
    assert_eq!(l.lease_deadline_ms, T0 + 777 + 1234, "topic lease");

    put(s, &t, job("x", When::DelayMs(5)), T0).await;
    let other = topic("implicit");
    put(s, &other, job("y", When::DelayMs(5)), T0).await;
    let names: Vec<String> = s
        .topics()
        .await
        .unwrap()
        .iter()
        .map(|t| t.to_string())
        .collect();
    assert_eq!(names, vec!["cfg", "implicit"]);
    assert_eq!(
        s.topic_config(&other).await.unwrap(),
        Some(TopicConfig::default())
    );

    let (n, gone) = s.delete_topic(&t, 1).await.unwrap();
    assert_eq!((n, gone), (1, false), "bounded batch");
    let (n, gone) = s.delete_topic(&t, 100).await.unwrap();
    assert_eq!((n, gone), (1, true));
    assert!(s.topic_config(&t).await.unwrap().is_none());
    assert!(s.get(&t, &id("x")).await.unwrap().is_none());
    assert_eq!(s.topics().await.unwrap(), vec![other]);
}

/// Every page of [`Store::list_topics`] from `after` on, with `limit` each:
/// the names in order, and how many pages it took.
async fn all_pages(s: &dyn Store, prefix: &str, limit: usize) -> (Vec<String>, usize) {
    let (mut names, mut pages, mut after) = (Vec::new(), 0, None::<Topic>);
    loop {
        let page = s
            .list_topics(&TopicListing::after(after.as_ref(), prefix, limit))
            .await
            .unwrap();
        pages += 1;
        assert!(page.topics.len() <= limit, "at most limit: {page:?}");
        assert!(
            !page.more || page.topics.len() == limit,
            "a page that says more is full: {page:?}"
        );
        names.extend(page.topics.iter().map(Topic::to_string));
        if !page.more {
            return (names, pages);
        }
        after = page.topics.last().cloned();
        assert!(pages < 1000, "the listing ends");
    }
}

/// Every page of [`Store::list_topics`] backward from the end, each page's
/// first topic the cursor of the next: the names in order.
async fn all_pages_backward(s: &dyn Store, prefix: &str, limit: usize) -> Vec<String> {
    let (mut pages, mut before) = (Vec::new(), None::<Topic>);
    loop {
        let page = s
            .list_topics(&TopicListing::before(before.as_ref(), prefix, limit))
            .await
            .unwrap();
        assert!(page.topics.len() <= limit, "at most limit: {page:?}");
        assert!(
            page.topics.windows(2).all(|w| w[0] < w[1]),
            "in name order: {page:?}"
        );
        pages.push(page.topics.iter().map(Topic::to_string).collect::<Vec<_>>());
        if !page.more {
            pages.reverse();
            return pages.concat();
        }
        before = page.topics.first().cloned();
        assert!(pages.len() < 1000, "the listing ends");
    }
}

/// `list_topics` pages through every topic once, in name (byte) order,
/// whatever the limit; a topic made by settings alone (no job) is listed,
/// as `topics` lists it; a cursor past the end, or one that names a topic
/// deleted meanwhile, goes on from where it stands.
pub async fn list_topics_pages_in_name_order(s: &dyn Store) {
    assert_eq!(
        s.list_topics(&TopicListing::after(None, "", 10))
            .await
            .unwrap(),
        TopicPage::default(),
        "no topics: an empty last page"
    );
    let mut names: Vec<String> = (0..23).map(|i| format!("t{i:02}")).collect();
    names.extend(["A", "Z-upper", "t", "t.x", "t$", "t_", "u(1)"].map(String::from));
    for n in &names {
        put(s, &topic(n), job("j", When::DelayMs(0)), T0).await;
    }
    // Settings only, no job: a topic as well.
    s.configure_topic(
        &topic("configured"),
        &TopicConfigPatch {
            max_attempts: Some(3),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    names.push("configured".into());
    names.sort();
    let listed: Vec<String> = s
        .topics()
        .await
        .unwrap()
        .iter()
        .map(Topic::to_string)
        .collect();
    assert_eq!(listed, names, "topics lists the same");

    for limit in [1, 2, 7, 30, 31, 1000] {
        let (got, pages) = all_pages(s, "", limit).await;
        assert_eq!(got, names, "limit {limit}");
        assert_eq!(
            pages,
            names.len().div_ceil(limit),
            "limit {limit}: no extra page"
        );
        assert_eq!(
            all_pages_backward(s, "", limit).await,
            names,
            "backward, limit {limit}"
        );
    }
    // Backward: the page before a name, and before the first one.
    let page = s
        .list_topics(&TopicListing::before(Some(&topic("t")), "", 2))
        .await
        .unwrap();
    assert_eq!(page.topics, vec![topic("Z-upper"), topic("configured")]);
    assert!(page.more);
    let page = s
        .list_topics(&TopicListing::before(Some(&topic("A")), "", 5))
        .await
        .unwrap();
    assert_eq!(page, TopicPage::default());
    let page = s
        .list_topics(&TopicListing::after(None, "", 31))
        .await
        .unwrap();
    assert_eq!(page.topics.len(), 31);
    assert!(!page.more, "exactly all: nothing follows");
    let page = s
        .list_topics(&TopicListing::after(None, "", 30))
        .await
        .unwrap();
    assert!(page.more);

    // A cursor after the last name, and one before the first.
    let last = topic(names.last().unwrap());
    assert_eq!(
        s.list_topics(&TopicListing::after(Some(&last), "", 10))
            .await
            .unwrap(),
        TopicPage::default()
    );
    let page = s
        .list_topics(&TopicListing::after(Some(&topic("zzz")), "", 10))
        .await
        .unwrap();
    assert!(page.topics.is_empty() && !page.more);
    let page = s
        .list_topics(&TopicListing::after(Some(&topic("0")), "", 2))
        .await
        .unwrap();
    assert_eq!(page.topics, vec![topic("A"), topic("Z-upper")]);
    assert!(page.more);

    // Deleted between two pages: the cursor topic itself, and one further on.
    let first = s
        .list_topics(&TopicListing::after(None, "t", 3))
        .await
        .unwrap();
    assert_eq!(first.topics, vec![topic("t"), topic("t$"), topic("t.x")]);
    for gone in ["t.x", "t01"] {
        let (_, deleted) = s.delete_topic(&topic(gone), 100).await.unwrap();
        assert!(deleted, "{gone}");
    }
    let next = s
        .list_topics(&TopicListing::after(first.topics.last(), "t", 3))
        .await
        .unwrap();
    assert_eq!(next.topics, vec![topic("t00"), topic("t02"), topic("t03")]);
    assert!(next.more);
}

/// `list_topics`' prefix is a plain prefix, exact: `_` and `%` are
/// characters, not wildcards; a whole name is a prefix of itself; the empty
/// prefix is every topic; a prefix no topic can start with matches none.
pub async fn list_topics_prefix_is_exact(s: &dyn Store) {
    for n in ["a_b", "axb", "a_", "a", "ab", "abc", "b", "a_b.c", "A_b"] {
        put(s, &topic(n), job("j", When::DelayMs(0)), T0).await;
    }
    let names = |p: TopicPage| -> Vec<String> { p.topics.iter().map(Topic::to_string).collect() };
    for (prefix, want) in [
        ("a_", vec!["a_", "a_b", "a_b.c"]),
        ("a_b", vec!["a_b", "a_b.c"]),
        ("abc", vec!["abc"]),
        ("ab", vec!["ab", "abc"]),
        ("a", vec!["a", "a_", "a_b", "a_b.c", "ab", "abc", "axb"]),
        ("b", vec!["b"]),
        ("bb", vec![]),
        ("A", vec!["A_b"]),
        ("a%", vec![]),
        ("%", vec![]),
        ("a b", vec![]),
        (
            "",
            vec!["A_b", "a", "a_", "a_b", "a_b.c", "ab", "abc", "axb", "b"],
        ),
    ] {
        let page = s
            .list_topics(&TopicListing::after(None, prefix, 100))
            .await
            .unwrap();
        assert!(!page.more, "{prefix:?}");
        assert_eq!(names(page), want, "prefix {prefix:?}");
        let (paged, _) = all_pages(s, prefix, 1).await;
        assert_eq!(paged, want, "prefix {prefix:?} one at a time");
        assert_eq!(
            all_pages_backward(s, prefix, 2).await,
            want,
            "prefix {prefix:?} backward"
        );
    }
    // A cursor before the prefix's names starts at the first of them; one
    // past them ends the listing.
    let page = s
        .list_topics(&TopicListing::after(Some(&topic("A")), "ab", 1))
        .await
        .unwrap();
    assert_eq!(
        (names(page.clone()), page.more),
        (vec!["ab".to_string()], true)
    );
    let page = s
        .list_topics(&TopicListing::after(Some(&topic("abc")), "ab", 10))
        .await
        .unwrap();
    assert_eq!(page, TopicPage::default());
    // Backward from past the prefix's names, and from before them.
    let page = s
        .list_topics(&TopicListing::before(Some(&topic("zz")), "a_", 2))
        .await
        .unwrap();
    assert_eq!(
        (names(page.clone()), page.more),
        (vec!["a_b".into(), "a_b.c".into()], true)
    );
    let page = s
        .list_topics(&TopicListing::before(Some(&topic("a")), "a_", 2))
        .await
        .unwrap();
    assert_eq!(page, TopicPage::default());
}

/// Stats count each state and report how overdue the oldest waiting job is.
pub async fn stats_count_states(s: &dyn Store) {
    let t = topic("stats");
    for (i, d) in [0u64, 0, 0, 100, 5000].iter().enumerate() {
        put(s, &t, job(&format!("j{i}"), When::DelayMs(*d)), T0).await;
    }
    let l = one(s, &t, None, T0).await;
    s.ack(&t, &l.id, &l.token, 0).await.unwrap();
    s.reserve(&t, 1, None, T0).await.unwrap();
    let st = s.stats(&t, T0 + 300).await.unwrap();
    assert_eq!((st.scheduled, st.ready, st.reserved, st.dead), (2, 1, 1, 0));
    assert_eq!(st.oldest_overdue_ms, 300, "the ready job has waited 300 ms");
    assert_eq!((st.counters.enqueued, st.counters.acked), (5, 1));
    let p = s.promote_due(&t, 10, T0 + 300).await.unwrap();
    assert_eq!(
        p,
        Promoted {
            moved: 1,
            next_due_ms: Some(T0 + 5000)
        }
    );
    let st = s.stats(&t, T0 + 300).await.unwrap();
    assert_eq!((st.scheduled, st.ready), (1, 2));
    let empty = s.stats(&topic("empty"), T0).await.unwrap();
    assert_eq!(empty, TopicStats::default());
}

/// Bury sends a held job to the dead letters at once, whatever attempts are
/// left; only the holder may do it.
pub async fn nack_dead_goes_dead_at_once(s: &dyn Store) {
    let t = topic("bury");
    put(s, &t, job("j", When::DelayMs(0)), T0).await;
    let l = one(s, &t, None, T0).await;
    assert!(matches!(
        s.nack(&t, &id("j"), Nack::dead("stale", "x"), T0).await,
        Err(StoreError::LeaseMismatch)
    ));
    s.nack(
        &t,
        &id("j"),
        Nack::dead(&l.token, "unknown event \"x\""),
        T0 + 5,
    )
    .await
    .unwrap();
    let info = s.get(&t, &id("j")).await.unwrap().unwrap();
    assert_eq!((info.state, info.attempts), (JobState::Dead, 1));
    assert_eq!(info.died_at_ms, Some(T0 + 5));
    assert_eq!(info.last_error.as_deref(), Some("unknown event \"x\""));
    let st = s.stats(&t, T0).await.unwrap();
    assert_eq!((st.dead, st.reserved, st.counters.dead), (1, 0, 1));
    assert!(matches!(
        s.nack(&t, &id("j"), Nack::dead(&l.token, "again"), T0)
            .await,
        Err(StoreError::NotInState(JobState::Dead))
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
            .release(&t, &id("j"), &l.token, 500, now + 10)
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
        .release(&t, &id("j"), &l.token, 0, T0 + 5000)
        .await
        .unwrap();
    assert_eq!(now_due, T0 + 5000);
    assert_eq!(
        s.get(&t, &id("j")).await.unwrap().unwrap().state,
        JobState::Ready
    );
}

/// Jobs days ahead: never early, reported when to look again (no later than
/// their due time), cancellable and movable while waiting, counted.
pub async fn enqueue_far_future(s: &dyn Store) {
    let t = topic("far");
    const DAY: u64 = 86_400_000;
    let e = put(s, &t, job("f", When::DelayMs(3 * DAY)), T0).await;
    assert_eq!((e.due_at_ms, e.state), (T0 + 3 * DAY, JobState::Scheduled));
    put(s, &t, job("g", When::DelayMs(3 * DAY + 5)), T0).await;
    put(s, &t, job("gone", When::DelayMs(2 * DAY)), T0).await;
    put(s, &t, job("moved", When::DelayMs(5 * DAY)), T0).await;
    assert_eq!(s.stats(&t, T0).await.unwrap().scheduled, 4);
    assert_eq!(
        s.cancel(&t, &id("gone"), 0).await.unwrap(),
        Some(JobState::Scheduled)
    );
    s.reschedule(&t, &id("moved"), T0 + 3 * DAY + 2, T0)
        .await
        .unwrap();
    assert_eq!(s.stats(&t, T0).await.unwrap().scheduled, 3);

    // Walk time forward the way a waiting consumer does: look again when told.
    let mut now = T0;
    let due = T0 + 3 * DAY;
    loop {
        let c = s.reserve(&t, 10, None, now).await.unwrap();
        if !c.leases.is_empty() {
            assert_eq!(now, due, "handed out exactly at the due time, not before");
            assert_eq!(ids(&c), vec!["f"]);
            break;
        }
        let next = c.next_due_ms.expect("a job is waiting");
        assert!(
            next > now && next <= due,
            "look again at {next}: after now, not after the due time"
        );
        now = if next < due { next } else { due };
        if now == due - 1 {
            now = due;
        }
    }
    let c = s.reserve(&t, 10, None, due + 5).await.unwrap();
    assert_eq!(ids(&c), vec!["moved", "g"], "by due time");
    let st = s.stats(&t, due + 5).await.unwrap();
    assert_eq!((st.scheduled, st.reserved), (0, 3));
    assert!(s.get(&t, &id("gone")).await.unwrap().is_none());
}

/// Many jobs due in the same far minute all come out, in due-then-enqueue
/// order, when promoted ahead of time as the dispatcher does.
pub async fn reserve_many_far_jobs_in_order(s: &dyn Store) {
    let t = topic("far-many");
    let due = T0 + 7_200_000;
    let jobs: Vec<NewJob> = (0..2500)
        .map(|i| job(&format!("m{i:05}"), When::DueAtMs(due + (i % 3) as u64)))
        .collect();
    for chunk in jobs.chunks(limits::MAX_BATCH) {
        s.enqueue(&t, chunk, T0).await.unwrap();
    }
    // The dispatcher's loop, a minute before the due time.
    while s.promote_due(&t, 1000, due - 60_000).await.unwrap().moved > 0 {}
    assert!(
        s.reserve(&t, 1000, None, due - 1)
            .await
            .unwrap()
            .leases
            .is_empty()
    );
    let mut got = Vec::new();
    for _ in 0..3 {
        got.extend(ids(&s.reserve(&t, 1000, None, due + 2).await.unwrap()));
    }
    let mut want: Vec<(u64, usize)> = (0..2500).map(|i| ((i % 3) as u64, i)).collect();
    want.sort();
    let want: Vec<String> = want.into_iter().map(|(_, i)| format!("m{i:05}")).collect();
    assert_eq!(got.len(), 2500);
    assert_eq!(got, want);
}

/// The scheduled jobs are listed earliest due first, near and far (days
/// ahead) alike; ready, reserved, cancelled and dead jobs are not listed.
pub async fn list_scheduled_earliest_first(s: &dyn Store) {
    let t = topic("upcoming");
    assert!(s.list_scheduled(&t, 10).await.unwrap().is_empty());
    const DAY: u64 = 86_400_000;
    for (i, delay) in [
        ("d3", 3 * DAY),
        ("s5", 5_000),
        ("d1", DAY),
        ("s1", 1_000),
        ("gone", 2_000),
        ("d2", 2 * DAY),
        ("d1b", DAY + 1),
    ] {
        put(s, &t, job(i, When::DelayMs(delay)), T0).await;
    }
    put(s, &t, job("now", When::DelayMs(0)), T0).await;
    put(s, &t, job("held", When::DelayMs(0)), T0).await;
    assert_eq!(ids(&s.reserve(&t, 1, None, T0).await.unwrap()), vec!["now"]);
    s.cancel(&t, &id("gone"), 0).await.unwrap();
    let names = |v: Vec<JobInfo>| v.into_iter().map(|j| j.id.to_string()).collect::<Vec<_>>();
    let all = s.list_scheduled(&t, 100).await.unwrap();
    assert!(all.iter().all(|j| j.state == JobState::Scheduled));
    assert_eq!(all[0].due_at_ms, T0 + 1_000);
    assert_eq!(all[0].body, Body::Json("{\"n\":\"s1\"}".into()));
    assert_eq!(names(all), vec!["s1", "s5", "d1", "d1b", "d2", "d3"]);
    assert_eq!(
        names(s.list_scheduled(&t, 3).await.unwrap()),
        vec!["s1", "s5", "d1"]
    );
    // A far job moved near (and a near one far) is listed once, in its new place.
    s.reschedule(&t, &id("d3"), T0 + 500, T0).await.unwrap();
    s.reschedule(&t, &id("s5"), T0 + 4 * DAY, T0).await.unwrap();
    s.reschedule(&t, &id("d1b"), T0 + 4 * DAY + 1, T0)
        .await
        .unwrap();
    assert_eq!(
        names(s.list_scheduled(&t, 100).await.unwrap()),
        vec!["d3", "s1", "d1", "d2", "s5", "d1b"]
    );
}

/// Dedup windows: for `dedup_ms` after a job ended — acked, cancelled or
/// dead (its dead letter purged too) — its id is refused as a duplicate and
/// nothing is stored, `replace` included; the window ends exactly at
/// end + `dedup_ms`; the topic's `dedup_ms` applies to jobs naming none, a
/// job's own 0 turns it off; without a window an ended id is new again.
pub async fn dedup_window_refuses_ended_ids(s: &dyn Store) {
    let t = topic("dedup");
    let dd = |i: &str, ms: Option<u64>| NewJob {
        dedup_ms: ms,
        ..job(i, When::DelayMs(0))
    };
    // No window: an acked id is new again.
    put(s, &t, dd("plain", None), T0).await;
    let l = one(s, &t, None, T0).await;
    s.ack(&t, &l.id, &l.token, T0).await.unwrap();
    assert!(put(s, &t, dd("plain", None), T0 + 1).await.created);
    s.cancel(&t, &id("plain"), T0 + 1).await.unwrap();

    // Acked at T0 + 10 with a 1 s window: refused until T0 + 1010.
    put(s, &t, dd("a", Some(1000)), T0).await;
    let l = one(s, &t, None, T0).await;
    s.ack(&t, &l.id, &l.token, T0 + 10).await.unwrap();
    for (at, replace) in [(T0 + 10, false), (T0 + 500, true), (T0 + 1009, false)] {
        let e = put(
            s,
            &t,
            NewJob {
                replace,
                ..dd("a", Some(1000))
            },
            at,
        )
        .await;
        assert!(
            e.deduplicated && !e.created && !e.replaced,
            "at +{}: {e:?}",
            at - T0
        );
        assert_eq!(s.get(&t, &id("a")).await.unwrap(), None, "nothing stored");
    }
    assert_eq!(s.stats(&t, T0 + 1009).await.unwrap().ready, 0);
    let e = put(s, &t, dd("a", Some(1000)), T0 + 1010).await;
    assert!(e.created && !e.deduplicated, "the window ended: {e:?}");

    // A batch: the refused id and a new one, each answered on its own.
    s.cancel(&t, &id("a"), T0 + 2000).await.unwrap();
    let r = s
        .enqueue(&t, &[dd("a", Some(1000)), dd("b", Some(1000))], T0 + 2001)
        .await
        .unwrap();
    assert!(r[0].deduplicated && !r[0].created, "cancelled: {:?}", r[0]);
    assert!(r[1].created && !r[1].deduplicated, "{:?}", r[1]);

    // Dead, then purged: still in its window (from its death).
    let l = one(s, &t, None, T0 + 2001).await;
    assert_eq!(l.id, id("b"));
    s.nack(&t, &l.id, Nack::dead(&l.token, "no"), T0 + 2002)
        .await
        .unwrap();
    // While its dead letter exists, the id is answered as existing.
    let e = put(s, &t, dd("b", Some(1000)), T0 + 2003).await;
    assert!(
        !e.deduplicated && !e.created && e.state == JobState::Dead,
        "{e:?}"
    );
    assert_eq!(s.purge_dead(&t, 10).await.unwrap(), 1);
    assert!(
        put(s, &t, dd("b", Some(1000)), T0 + 3001)
            .await
            .deduplicated
    );
    assert!(put(s, &t, dd("b", Some(1000)), T0 + 3002).await.created);

    // The topic's window for jobs naming none; a job's own 0 is none.
    let t2 = topic("dedup-default");
    s.configure_topic(
        &t2,
        &TopicConfigPatch {
            dedup_ms: Some(60_000),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(s.topic_config(&t2).await.unwrap().unwrap().dedup_ms, 60_000);
    put(s, &t2, dd("x", None), T0).await;
    put(s, &t2, dd("y", Some(0)), T0).await;
    for _ in 0..2 {
        let l = one(s, &t2, None, T0).await;
        s.ack(&t2, &l.id, &l.token, T0).await.unwrap();
    }
    assert!(put(s, &t2, dd("x", None), T0 + 59_999).await.deduplicated);
    assert!(
        put(s, &t2, dd("y", None), T0 + 1).await.created,
        "its own 0: no window"
    );
    // Another topic's ids are not affected.
    assert!(put(s, &t, dd("x", None), T0 + 1).await.created);
}

/// Named records: put creates then replaces (value and mark), get and list
/// (sorted, per kind) read them, the mark only rises, delete forgets.
pub async fn records_keep_values_and_raise_marks(s: &dyn Store) {
    assert!(
        s.put_record("schedule", "b", "{\"x\":1}", 10)
            .await
            .unwrap()
    );
    assert!(s.put_record("schedule", "a", "one", 5).await.unwrap());
    assert!(s.put_record("other", "a", "elsewhere", 0).await.unwrap());
    assert!(
        !s.put_record("schedule", "a", "two", 7).await.unwrap(),
        "replaced"
    );
    let rec = |v: &str, mark| Record {
        value: v.into(),
        mark,
    };
    assert_eq!(
        s.get_record("schedule", "a").await.unwrap(),
        Some(rec("two", 7))
    );
    assert_eq!(s.get_record("schedule", "zz").await.unwrap(), None);
    assert_eq!(
        s.list_records("schedule").await.unwrap(),
        vec![
            ("a".into(), rec("two", 7)),
            ("b".into(), rec("{\"x\":1}", 10))
        ]
    );
    // Raised, never lowered; concurrent raises keep the highest.
    assert_eq!(s.raise_mark("schedule", "a", 3).await.unwrap(), Some(7));
    let raises = (0..20u64).map(|i| s.raise_mark("schedule", "a", T0 + i));
    let after = futures::future::join_all(raises).await;
    assert!(after.iter().all(|r| r.is_ok()));
    assert_eq!(
        s.get_record("schedule", "a").await.unwrap().unwrap().mark,
        T0 + 19
    );
    assert_eq!(
        s.raise_mark("schedule", "zz", 1).await.unwrap(),
        None,
        "not created"
    );
    assert_eq!(s.get_record("schedule", "zz").await.unwrap(), None);
    assert!(s.delete_record("schedule", "a").await.unwrap());
    assert!(!s.delete_record("schedule", "a").await.unwrap());
    assert_eq!(s.list_records("schedule").await.unwrap().len(), 1);
    assert_eq!(
        s.list_records("other").await.unwrap(),
        vec![("a".into(), rec("elsewhere", 0))]
    );
}

/// Instantiates every scenario as a `#[tokio::test]`. `$make` is an async
/// block returning `(store, guard)`: a fresh empty store and whatever must
/// live as long as it (a Redis server, a temp dir).
///
/// `conformance_tests!(in_one NAME, SETUP, MAKE)` instead makes one test
/// `NAME` that evaluates `SETUP` once (e.g. starts a Redis Cluster) and runs
/// every scenario in turn, each on `MAKE(&setup, scenario_name).await` — for
/// stores too costly to start per scenario (each scenario under its own key
/// prefix).
/// `reserve_job`: a scheduled (soon or far), ready or dead job is leased by
/// id; a reserved or missing one is not; counts follow.
pub async fn reserve_job_in_any_waiting_or_dead_state(s: &dyn Store) {
    let t = topic("by-id");
    put(s, &t, job("ready", When::DelayMs(0)), T0).await;
    put(s, &t, job("soon", When::DelayMs(5000)), T0).await;
    put(s, &t, job("far", When::DelayMs(7 * 86_400_000)), T0).await;
    put(s, &t, job("dead", When::DelayMs(0)), T0).await;
    let c = s.reserve(&t, 10, None, T0).await.unwrap();
    let dead = c.leases.iter().find(|l| l.id.as_str() == "dead").unwrap();
    s.nack(&t, &dead.id, Nack::dead(&dead.token, "x"), T0)
        .await
        .unwrap();
    // Released: ready again, the attempt not counted.
    let ready = c.leases.iter().find(|l| l.id.as_str() == "ready").unwrap();
    s.release(&t, &ready.id, &ready.token, 0, T0).await.unwrap();
    let st = s.stats(&t, T0).await.unwrap();
    assert_eq!((st.scheduled, st.ready, st.reserved, st.dead), (2, 1, 0, 1));

    for (name, attempt, due) in [
        ("ready", 1, T0),
        ("soon", 1, T0 + 5000),
        ("far", 1, T0 + 7 * 86_400_000),
        ("dead", 2, T0),
    ] {
        let l = s
            .reserve_job(&t, &id(name), Some(10_000), T0 + 1)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{name} not leased"));
        assert_eq!((l.id.as_str(), l.attempt), (name, attempt));
        assert_eq!(
            (l.due_at_ms, l.priority, &l.body),
            (due, DEFAULT_PRIORITY, &job(name, When::DelayMs(0)).body),
            "{name}: the lease shows the job as enqueued"
        );
        assert_eq!(l.lease_deadline_ms, T0 + 10_001);
        assert_eq!(l.topic, t);
        let got = s.get(&t, &id(name)).await.unwrap().unwrap();
        assert_eq!(got.state, JobState::Reserved, "{name}");
        assert!(
            s.reserve_job(&t, &id(name), None, T0 + 2)
                .await
                .unwrap()
                .is_none(),
            "{name}: a reserved job is its holder's"
        );
        s.ack(&t, &id(name), &l.token, 0).await.unwrap();
    }
    assert!(
        s.reserve_job(&t, &id("none"), None, T0)
            .await
            .unwrap()
            .is_none()
    );
    let st = s.stats(&t, T0 + 3).await.unwrap();
    assert_eq!((st.scheduled, st.ready, st.reserved, st.dead), (0, 0, 0, 0));
    assert!(
        s.reserve(&t, 10, None, T0 + 8 * 86_400_000)
            .await
            .unwrap()
            .leases
            .is_empty()
    );
}

/// A rate limit of `(limit, per_ms, burst)`.
fn bucket((limit, per_ms, burst): (u64, u64, u64)) -> RateLimit {
    RateLimit {
        limit,
        per_ms,
        burst,
    }
}

/// Sets `t`'s rate limit (`None`: removes it).
async fn rate(s: &dyn Store, t: &Topic, limit: Option<(u64, u64, u64)>) {
    s.configure_topic(
        t,
        &TopicConfigPatch {
            rate_limit: Some(limit.map(bucket)),
            ..Default::default()
        },
    )
    .await
    .unwrap();
}

/// Enqueues `n` jobs of `t` due at `now`, named `<prefix><i>`.
async fn ready_jobs(s: &dyn Store, t: &Topic, prefix: &str, n: usize, now: u64) {
    let jobs: Vec<NewJob> = (0..n)
        .map(|i| job(&format!("{prefix}{i:03}"), When::DelayMs(0)))
        .collect();
    s.enqueue(t, &jobs, now).await.unwrap();
}

/// `paused: true` holds every hand-out (no time to look again: the resume
/// wakes waiters) while enqueues go on; resuming hands the backlog out, in
/// order; the settings say so; a timed pause is a separate thing.
pub async fn paused_topic_holds_hand_outs_until_resumed(s: &dyn Store) {
    let t = topic("held");
    ready_jobs(s, &t, "a", 3, T0).await;
    let paused = |on| TopicConfigPatch {
        paused: Some(on),
        ..Default::default()
    };
    let c = s.configure_topic(&t, &paused(true)).await.unwrap();
    assert!(c.paused);
    assert!(s.topic_config(&t).await.unwrap().unwrap().paused);
    let e = put(s, &t, job("b", When::DelayMs(0)), T0 + 1).await;
    assert!(e.created, "enqueues go on while paused");
    let r = s.reserve(&t, 10, None, T0 + 10_000).await.unwrap();
    assert!(r.leases.is_empty(), "handed out of a paused topic");
    assert_eq!(r.next_due_ms, None, "no time: only the resume ends it");
    let st = s.stats(&t, T0 + 10_000).await.unwrap();
    assert_eq!((st.ready, st.reserved), (4, 0));
    assert_eq!(
        st.oldest_overdue_ms, 10_000,
        "the held jobs' lateness shows"
    );
    // A timed pause that ends does not end `paused`.
    s.pause_topic(&t, T0 + 20_000).await.unwrap();
    s.pause_topic(&t, 0).await.unwrap();
    assert!(
        s.reserve(&t, 10, None, T0 + 20_001)
            .await
            .unwrap()
            .leases
            .is_empty()
    );
    // Any other setting changed keeps it paused.
    let c = s
        .configure_topic(
            &t,
            &TopicConfigPatch {
                lease_ms: Some(5000),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(c.paused);
    let c = s.configure_topic(&t, &paused(false)).await.unwrap();
    assert!(!c.paused);
    let r = s.reserve(&t, 10, None, T0 + 20_002).await.unwrap();
    assert_eq!(ids(&r), vec!["a000", "a001", "a002", "b"]);
    assert!(r.leases.iter().all(|l| l.attempt == 1));
}

/// A rate limit of N per M ms (burst N): exactly N at once, then one per
/// M / N ms; a reserve that finds only held-back jobs says when the next
/// token comes; held-back jobs stay ready with their attempts untouched,
/// and are counted (`rate_limited`).
pub async fn rate_limit_hands_out_exactly_per_window(s: &dyn Store) {
    let t = topic("limited");
    rate(s, &t, Some((10, 1000, 10))).await;
    let c = s.topic_config(&t).await.unwrap().unwrap();
    assert_eq!(
        c.rate_limit,
        Some(RateLimit {
            limit: 10,
            per_ms: 1000,
            burst: 10
        })
    );
    ready_jobs(s, &t, "j", 40, T0).await;
    let r = s.reserve(&t, 25, None, T0).await.unwrap();
    assert_eq!(r.leases.len(), 10, "the whole burst, no more");
    assert_eq!(r.leases[0].id.as_str(), "j000", "in order");
    assert_eq!(r.next_due_ms, Some(T0 + 100), "the next token");
    let r = s.reserve(&t, 25, None, T0 + 99).await.unwrap();
    assert!(r.leases.is_empty(), "1 ms before the next token");
    assert_eq!(r.next_due_ms, Some(T0 + 100));
    let r = s.reserve(&t, 25, None, T0 + 100).await.unwrap();
    assert_eq!(ids(&r), vec!["j010"]);
    assert_eq!(r.next_due_ms, Some(T0 + 200));
    // Over the next second: 10 more, not 11 (the bucket's 10 at T0 + 1100).
    let r = s.reserve(&t, 25, None, T0 + 1100).await.unwrap();
    assert_eq!(r.leases.len(), 10);
    assert_eq!(r.leases[0].id.as_str(), "j011");
    let held = s.get(&t, &id("j039")).await.unwrap().unwrap();
    assert_eq!(
        (held.state, held.attempts),
        (JobState::Ready, 0),
        "held back, not attempted"
    );
    let st = s.stats(&t, T0 + 1100).await.unwrap();
    assert_eq!((st.ready, st.reserved), (19, 21));
    // Asked for 25 each time: 15 + 25 + 24 + 15 held back.
    assert_eq!(st.counters.rate_limited, 79);
    // Removing the limit hands out the rest at once.
    rate(s, &t, None).await;
    assert_eq!(s.topic_config(&t).await.unwrap().unwrap().rate_limit, None);
    let r = s.reserve(&t, 25, None, T0 + 1100).await.unwrap();
    assert_eq!(r.leases.len(), 19);
    assert_eq!(r.next_due_ms, None);
}

/// The burst is the bucket's size: a quiet topic fills up to it and no
/// further; a reserve asking for fewer takes only those; a resumed topic
/// hands its backlog out under the limit.
pub async fn rate_limit_burst_and_resume(s: &dyn Store) {
    let t = topic("bursty");
    rate(s, &t, Some((5, 1000, 15))).await;
    ready_jobs(s, &t, "j", 60, T0).await;
    assert_eq!(s.reserve(&t, 4, None, T0).await.unwrap().leases.len(), 4);
    assert_eq!(s.reserve(&t, 100, None, T0).await.unwrap().leases.len(), 11);
    let r = s.reserve(&t, 100, None, T0 + 199).await.unwrap();
    assert!(r.leases.is_empty());
    assert_eq!(r.next_due_ms, Some(T0 + 200));
    assert_eq!(
        s.reserve(&t, 100, None, T0 + 1000)
            .await
            .unwrap()
            .leases
            .len(),
        5
    );
    // An hour of quiet fills the bucket to the burst, not to 18000.
    s.configure_topic(
        &t,
        &TopicConfigPatch {
            paused: Some(true),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(
        s.reserve(&t, 100, None, T0 + 3_600_000)
            .await
            .unwrap()
            .leases
            .is_empty()
    );
    s.configure_topic(
        &t,
        &TopicConfigPatch {
            paused: Some(false),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let r = s.reserve(&t, 100, None, T0 + 3_600_000).await.unwrap();
    assert_eq!(r.leases.len(), 15, "the backlog goes out under the limit");
    assert_eq!(r.next_due_ms, Some(T0 + 3_600_200));
    // Setting a limit anew starts with a full bucket.
    rate(s, &t, Some((2, 1000, 3))).await;
    assert_eq!(
        s.reserve(&t, 100, None, T0 + 3_600_000)
            .await
            .unwrap()
            .leases
            .len(),
        3
    );
}

/// One bucket for every caller: concurrent reserves together get the
/// limit, each job once; acks and nacks give no token back, and a retried
/// job waits for a token like any other.
pub async fn rate_limit_is_shared_by_concurrent_callers(s: &dyn Store) {
    let t = topic("shared-limit");
    strict_topic(s, &t).await;
    rate(s, &t, Some((10, 1000, 10))).await;
    ready_jobs(s, &t, "j", 100, T0).await;
    let reserves = futures::future::join_all((0..8).map(|_| s.reserve(&t, 5, None, T0 + 1))).await;
    let mut leases = Vec::new();
    for r in reserves {
        leases.extend(r.unwrap().leases);
    }
    assert_eq!(leases.len(), 10);
    let mut seen: Vec<_> = leases.iter().map(|l| l.id.to_string()).collect();
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 10);
    for l in &leases[..5] {
        s.ack(&t, &l.id, &l.token, T0 + 2).await.unwrap();
    }
    let l = &leases[5];
    let nack = Nack {
        token: &l.token,
        error: "boom",
        retry_in_ms: Some(0),
        dead: false,
        priority: None,
    };
    s.nack(&t, &l.id, nack, T0 + 2).await.unwrap();
    assert!(
        s.reserve(&t, 10, None, T0 + 2)
            .await
            .unwrap()
            .leases
            .is_empty(),
        "no token back"
    );
    let r = s.reserve(&t, 10, None, T0 + 101).await.unwrap();
    assert_eq!(r.leases.len(), 1);
}

/// A job of `t` named `i` with flow-control key `key`.
fn keyed(i: &str, key: &str, when: When) -> NewJob {
    NewJob {
        key: Some(JobKey::new(key).unwrap()),
        ..job(i, when)
    }
}

/// Sets `t`'s key limits.
async fn key_limits(
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

/// How many of `leases` have each id prefix (the part before `-`).
fn per_prefix(leases: &[Lease]) -> std::collections::BTreeMap<String, usize> {
    let mut m = std::collections::BTreeMap::new();
    for l in leases {
        let p = l.id.as_str().split('-').next().unwrap().to_string();
        *m.entry(p).or_insert(0) += 1;
    }
    m
}

/// `key_concurrency`: at most K unexpired leases per key; a key at its
/// limit waits while the others go (one key with a backlog blocks no one);
/// held jobs stay ready with their attempts untouched; an ack, a nack, a
/// release, a cancel and an expired lease each free a slot; the key shows
/// on the job.
pub async fn key_concurrency_holds_per_key_without_blocking_others(s: &dyn Store) {
    let t = topic("per-key");
    key_limits(s, &t, Some(Some(2)), None).await;
    assert_eq!(
        s.topic_config(&t).await.unwrap().unwrap().key_concurrency,
        Some(2)
    );
    let big: Vec<NewJob> = (0..50)
        .map(|i| keyed(&format!("big-{i:02}"), "big", When::DelayMs(0)))
        .collect();
    s.enqueue(&t, &big, T0).await.unwrap();
    let small: Vec<NewJob> = (0..10)
        .map(|i| keyed(&format!("k{i}-0"), &format!("k{i}"), When::DelayMs(0)))
        .collect();
    s.enqueue(&t, &small, T0).await.unwrap();
    put(s, &t, job("plain-0", When::DelayMs(0)), T0).await;
    let r = s.reserve(&t, 100, None, T0 + 1).await.unwrap();
    let n = per_prefix(&r.leases);
    assert_eq!(n.get("big"), Some(&2), "{n:?}");
    assert_eq!(
        r.leases.len(),
        13,
        "the 10 small keys and the job without a key at once"
    );
    let bigs: Vec<&Lease> = r
        .leases
        .iter()
        .filter(|l| l.id.as_str().starts_with("big"))
        .collect();
    assert_eq!(
        (bigs[0].id.as_str(), bigs[1].id.as_str()),
        ("big-00", "big-01"),
        "in order within the key"
    );
    let again = s.reserve(&t, 100, None, T0 + 2).await.unwrap();
    assert!(again.leases.is_empty(), "the key is at its limit");
    assert_eq!(again.next_due_ms, None, "a lease's end announces itself");
    let held = s.get(&t, &id("big-02")).await.unwrap().unwrap();
    assert_eq!((held.state, held.attempts), (JobState::Ready, 0));
    assert_eq!(held.key.as_ref().map(JobKey::as_str), Some("big"));
    let st = s.stats(&t, T0 + 10).await.unwrap();
    assert_eq!((st.ready, st.reserved), (48, 13));
    assert_eq!(st.oldest_overdue_ms, 10, "the held jobs' lateness shows");
    // An ack frees one slot: one more of the key, no more.
    s.ack(&t, &bigs[0].id, &bigs[0].token, T0 + 3)
        .await
        .unwrap();
    let r = s.reserve(&t, 100, None, T0 + 3).await.unwrap();
    assert_eq!(ids(&r), vec!["big-02"]);
    // A nack to retry at once frees one; the job goes back to its key's
    // lane (behind the others: its due time is now).
    let nack = Nack {
        token: &bigs[1].token,
        error: "boom",
        retry_in_ms: Some(0),
        dead: false,
        priority: None,
    };
    s.nack(&t, &bigs[1].id, nack, T0 + 4).await.unwrap();
    let r = s.reserve(&t, 100, None, T0 + 4).await.unwrap();
    assert_eq!(ids(&r), vec!["big-03"]);
    // A release frees one.
    let l = &r.leases[0];
    s.release(&t, &l.id, &l.token, 0, T0 + 5).await.unwrap();
    let r = s.reserve(&t, 100, None, T0 + 5).await.unwrap();
    assert_eq!(r.leases.len(), 1);
    // A cancel of a reserved job frees one.
    let st = s.stats(&t, T0 + 5).await.unwrap();
    assert_eq!(st.reserved, 13);
    s.cancel(&t, &r.leases[0].id, T0 + 6).await.unwrap();
    assert_eq!(
        s.reserve(&t, 100, None, T0 + 6).await.unwrap().leases.len(),
        1
    );
    // Expired leases free theirs (default lease 30 s).
    let back = s.requeue_expired(&t, 100, T0 + 60_000).await.unwrap();
    assert!(back.retried >= 2, "{back:?}");
    let r = s.reserve(&t, 100, None, T0 + 61_000).await.unwrap();
    assert_eq!(per_prefix(&r.leases).get("big"), Some(&2));
}

/// The keys of a topic take turns: with no limits, a reserve hands out one
/// job of each key (and of the jobs without a key, as one more key) per
/// round, so a key with a backlog gets its share and no more; the turns
/// carry over from one reserve to the next.
pub async fn keys_take_turns(s: &dyn Store) {
    let t = topic("fair");
    for (key, n) in [("a", 30), ("b", 30), ("c", 3)] {
        let jobs: Vec<NewJob> = (0..n)
            .map(|i| keyed(&format!("{key}-{i:02}"), key, When::DelayMs(0)))
            .collect();
        s.enqueue(&t, &jobs, T0).await.unwrap();
    }
    ready_jobs(s, &t, "u-", 3, T0).await;
    let r = s.reserve(&t, 12, None, T0).await.unwrap();
    let n = per_prefix(&r.leases);
    assert_eq!(
        n.values().copied().collect::<Vec<_>>(),
        vec![3, 3, 3, 3],
        "{n:?}"
    );
    // Only a and b have jobs left: they alternate, within one call and
    // from one call to the next.
    let r = s.reserve(&t, 10, None, T0).await.unwrap();
    assert_eq!(
        per_prefix(&r.leases),
        [("a".into(), 5), ("b".into(), 5)].into()
    );
    let mut got = Vec::new();
    for _ in 0..6 {
        got.extend(s.reserve(&t, 1, None, T0).await.unwrap().leases);
    }
    assert_eq!(per_prefix(&got), [("a".into(), 3), ("b".into(), 3)].into());
    // A key that gets jobs again takes its turn at once.
    put(s, &t, keyed("c-99", "c", When::DelayMs(0)), T0 + 1).await;
    let r = s.reserve(&t, 3, None, T0 + 1).await.unwrap();
    assert!(ids(&r).contains(&"c-99".to_string()), "{:?}", ids(&r));
    // Scheduled keyed jobs join their key's lane when due.
    put(s, &t, keyed("d-00", "d", When::DelayMs(1000)), T0 + 1).await;
    let r = s.reserve(&t, 100, None, T0 + 2).await.unwrap();
    assert!(!ids(&r).contains(&"d-00".to_string()), "not early");
    put(s, &t, keyed("d-01", "d", When::DelayMs(0)), T0 + 2).await;
    let r = s.reserve(&t, 100, None, T0 + 1001).await.unwrap();
    assert_eq!(ids(&r), vec!["d-01", "d-00"]);
    let st = s.stats(&t, T0 + 1001).await.unwrap();
    assert_eq!(st.ready, 0);
}

/// `key_rate_limit`: each key has its own bucket; a key out of tokens
/// waits (its jobs ready, attempts untouched) while the others go; the
/// reserve says when the next token comes; removing the limit releases
/// the rest at once.
pub async fn key_rate_limit_per_key(s: &dyn Store) {
    let t = topic("key-rate");
    key_limits(s, &t, None, Some(Some((2, 1000, 2)))).await;
    for key in ["a", "b"] {
        let jobs: Vec<NewJob> = (0..10)
            .map(|i| keyed(&format!("{key}-{i:02}"), key, When::DelayMs(0)))
            .collect();
        s.enqueue(&t, &jobs, T0).await.unwrap();
    }
    let r = s.reserve(&t, 100, None, T0).await.unwrap();
    assert_eq!(
        per_prefix(&r.leases),
        [("a".into(), 2), ("b".into(), 2)].into()
    );
    assert_eq!(r.next_due_ms, Some(T0 + 500), "the next token");
    let r = s.reserve(&t, 100, None, T0 + 499).await.unwrap();
    assert!(r.leases.is_empty(), "1 ms before the next token");
    assert_eq!(r.next_due_ms, Some(T0 + 500));
    let r = s.reserve(&t, 100, None, T0 + 500).await.unwrap();
    assert_eq!(
        per_prefix(&r.leases),
        [("a".into(), 1), ("b".into(), 1)].into()
    );
    // Another key is not held by these.
    put(s, &t, keyed("c-00", "c", When::DelayMs(0)), T0 + 501).await;
    assert_eq!(
        ids(&s.reserve(&t, 100, None, T0 + 501).await.unwrap()),
        vec!["c-00"]
    );
    let held = s.get(&t, &id("a-09")).await.unwrap().unwrap();
    assert_eq!((held.state, held.attempts), (JobState::Ready, 0));
    assert!(s.stats(&t, T0 + 501).await.unwrap().counters.rate_limited > 0);
    key_limits(s, &t, None, Some(None)).await;
    assert_eq!(
        s.topic_config(&t).await.unwrap().unwrap().key_rate_limit,
        None
    );
    let r = s.reserve(&t, 100, None, T0 + 502).await.unwrap();
    assert_eq!(r.leases.len(), 14);
}

/// One count per key for every caller: concurrent reserves together get
/// `key_concurrency` leases of a key, each job once; raising the limit lets
/// a held key go at once, removing it releases the rest; an import keeps
/// the key and a deleted topic leaves nothing of its keys.
pub async fn key_concurrency_is_shared_and_changes_take_effect(s: &dyn Store) {
    let t = topic("key-shared");
    key_limits(s, &t, Some(Some(3)), None).await;
    let jobs: Vec<NewJob> = (0..40)
        .map(|i| keyed(&format!("x-{i:02}"), "x", When::DelayMs(0)))
        .collect();
    s.enqueue(&t, &jobs, T0).await.unwrap();
    let reserves = futures::future::join_all((0..8).map(|_| s.reserve(&t, 5, None, T0 + 1))).await;
    let mut leases = Vec::new();
    for r in reserves {
        leases.extend(r.unwrap().leases);
    }
    assert_eq!(leases.len(), 3);
    key_limits(s, &t, Some(Some(5)), None).await;
    assert_eq!(
        s.reserve(&t, 100, None, T0 + 2).await.unwrap().leases.len(),
        2
    );
    key_limits(s, &t, Some(None), None).await;
    assert_eq!(
        s.reserve(&t, 100, None, T0 + 3).await.unwrap().leases.len(),
        35
    );
    // Import: the key is kept and counts.
    let t2 = topic("key-import");
    key_limits(s, &t2, Some(Some(1)), None).await;
    let imported: Vec<ImportJob> = (0..3)
        .map(|i| ImportJob {
            id: id(&format!("i-{i}")),
            state: JobState::Ready,
            due_at_ms: T0,
            priority: DEFAULT_PRIORITY,
            attempts: 0,
            max_attempts: None,
            lease_ms: None,
            retry: None,
            dedup_ms: None,
            body: Body::Json("{}".into()),
            last_error: None,
            created_at_ms: T0,
            died_at_ms: None,
            key: Some(JobKey::new("imp").unwrap()),
        })
        .collect();
    s.import_jobs(&t2, &imported, T0).await.unwrap();
    assert_eq!(s.reserve(&t2, 100, None, T0).await.unwrap().leases.len(), 1);
    let page = s.list_jobs(&t2, None, None, 100).await.unwrap();
    assert!(
        page.jobs
            .iter()
            .all(|j| j.info.key.as_ref().map(JobKey::as_str) == Some("imp"))
    );
    let ready = s.list_ready(&t2, 10).await.unwrap();
    assert_eq!(ready.len(), 2, "list_ready shows the keys' lanes");
    // Delete: keyed jobs in every state go, and a new topic of that name
    // starts with no leases counted against its keys.
    loop {
        let (_, gone) = s.delete_topic(&t2, 1).await.unwrap();
        if gone {
            break;
        }
    }
    let st = s.stats(&t2, T0).await.unwrap();
    assert_eq!((st.ready, st.reserved), (0, 0));
    key_limits(s, &t2, Some(Some(1)), None).await;
    put(s, &t2, keyed("n-0", "imp", When::DelayMs(0)), T0 + 1).await;
    assert_eq!(
        ids(&s.reserve(&t2, 10, None, T0 + 1).await.unwrap()),
        vec!["n-0"]
    );
}

/// The round holds under churn: keys that come and go (a new key each
/// call) take their turn at the end of the round and never starve a key
/// with a backlog; a changed `key_rate_limit` applies at once to keys that
/// waited for a token of the old one; a delete cut short frees the slots of
/// the leases it deleted.
pub async fn keys_churn_limit_changes_and_partial_deletes(s: &dyn Store) {
    let t = topic("key-churn");
    let backlog: Vec<NewJob> = (0..20)
        .map(|i| keyed(&format!("big-{i:02}"), "big", When::DelayMs(0)))
        .collect();
    s.enqueue(&t, &backlog, T0).await.unwrap();
    let mut got = Vec::new();
    for i in 0..10 {
        put(
            s,
            &t,
            keyed(&format!("new{i}-0"), &format!("new{i}"), When::DelayMs(0)),
            T0 + i,
        )
        .await;
        got.extend(s.reserve(&t, 1, None, T0 + i).await.unwrap().leases);
    }
    let n = per_prefix(&got);
    assert!(
        n.get("big").copied().unwrap_or(0) >= 4,
        "the backlog gets its turns: {n:?}"
    );

    let t = topic("key-rate-change");
    key_limits(s, &t, None, Some(Some((1, 86_400_000, 1)))).await;
    let jobs: Vec<NewJob> = (0..5)
        .map(|i| keyed(&format!("a-{i}"), "a", When::DelayMs(0)))
        .collect();
    s.enqueue(&t, &jobs, T0).await.unwrap();
    let r = s.reserve(&t, 10, None, T0).await.unwrap();
    assert_eq!(r.leases.len(), 1);
    assert_eq!(
        r.next_due_ms,
        Some(T0 + 86_400_000),
        "a day to the next token"
    );
    key_limits(s, &t, None, Some(Some((100, 1000, 2)))).await;
    let r = s.reserve(&t, 10, None, T0 + 1).await.unwrap();
    assert_eq!(r.leases.len(), 2, "the new limit's burst, at once");

    let t = topic("key-delete");
    key_limits(s, &t, Some(Some(1)), None).await;
    let jobs: Vec<NewJob> = (0..2)
        .map(|i| keyed(&format!("k-{i}"), "k", When::DelayMs(0)))
        .collect();
    s.enqueue(&t, &jobs, T0).await.unwrap();
    assert_eq!(
        ids(&s.reserve(&t, 10, None, T0).await.unwrap()),
        vec!["k-0"]
    );
    let (deleted, gone) = s.delete_topic(&t, 1).await.unwrap();
    assert_eq!((deleted, gone), (1, false));
    assert_eq!(
        ids(&s.reserve(&t, 10, None, T0 + 1).await.unwrap()),
        vec!["k-1"],
        "the deleted lease's slot is free"
    );
}

/// `pause_topic`: nothing is handed out before the pause ends (the reserve
/// says when to look again), stats report it, and 0 resumes at once.
pub async fn pause_topic_hands_nothing_out(s: &dyn Store) {
    let t = topic("paused");
    put(s, &t, job("a", When::DelayMs(0)), T0).await;
    s.pause_topic(&t, T0 + 5000).await.unwrap();
    let c = s.reserve(&t, 10, None, T0 + 4999).await.unwrap();
    assert!(c.leases.is_empty(), "handed out of a paused topic");
    assert_eq!(c.next_due_ms, Some(T0 + 5000));
    assert_eq!(s.stats(&t, T0).await.unwrap().paused_until_ms, T0 + 5000);
    assert_eq!(
        s.reserve(&t, 10, None, T0 + 5000)
            .await
            .unwrap()
            .leases
            .len(),
        1
    );
    put(s, &t, job("b", When::DelayMs(0)), T0 + 5000).await;
    s.pause_topic(&t, T0 + 60_000).await.unwrap();
    assert!(
        s.reserve(&t, 10, None, T0 + 5001)
            .await
            .unwrap()
            .leases
            .is_empty()
    );
    s.pause_topic(&t, 0).await.unwrap();
    assert_eq!(s.stats(&t, T0).await.unwrap().paused_until_ms, 0);
    assert_eq!(
        s.reserve(&t, 10, None, T0 + 5002)
            .await
            .unwrap()
            .leases
            .len(),
        1
    );
}

/// `list_ready`: ready jobs only, by priority, then due time, then enqueue
/// order — the order reserves hand them out.
pub async fn list_ready_in_hand_out_order(s: &dyn Store) {
    let t = Topic::new("peek").unwrap();
    let mut jobs = Vec::new();
    for (id, pri, delay) in [("a", 5, 0), ("b", 1, 0), ("c", 5, 0), ("later", 0, 60_000)] {
        let mut j = NewJob::new(
            JobId::new(id).unwrap(),
            Body::Json("1".into()),
            When::DelayMs(delay),
        );
        j.priority = pri;
        jobs.push(j);
    }
    s.enqueue(&t, &jobs, T0).await.unwrap();
    let ids = |v: Vec<JobInfo>| v.into_iter().map(|j| j.id.to_string()).collect::<Vec<_>>();
    assert_eq!(ids(s.list_ready(&t, 10).await.unwrap()), ["b", "a", "c"]);
    assert_eq!(ids(s.list_ready(&t, 1).await.unwrap()), ["b"]);
    let c = s.reserve(&t, 1, None, T0).await.unwrap();
    assert_eq!(
        c.leases[0].id.as_str(),
        "b",
        "the head of the list is what a reserve takes"
    );
    assert_eq!(ids(s.list_ready(&t, 10).await.unwrap()), ["a", "c"]);
    assert!(
        s.list_ready(&Topic::new("none").unwrap(), 10)
            .await
            .unwrap()
            .is_empty()
    );
}

/// `next_seq`: 1 first, then increasing; concurrent callers never get the
/// same value; counters of different names are apart.
pub async fn next_seq_is_unique_and_increasing(s: &dyn Store) {
    assert_eq!(s.next_seq("a").await.unwrap(), 1);
    assert_eq!(s.next_seq("a").await.unwrap(), 2);
    assert_eq!(s.next_seq("b").await.unwrap(), 1);
    let got: Vec<u64> = futures::future::join_all((0..50).map(|_| s.next_seq("a")))
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let mut sorted = got.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted, (3..53).collect::<Vec<u64>>(), "unique: {got:?}");
}

/// A job without an id gets one from the store: new, different for each
/// job of a batch and for the same body twice, the one `get` and a reserve
/// know it by.
pub async fn enqueue_assigns_ids_when_none_given(s: &dyn Store) {
    let t = topic("gen");
    let body = || Body::Json("{}".into());
    let out = s
        .enqueue(
            &t,
            &[
                NewJob::with_generated_id(body(), When::DelayMs(0)),
                NewJob::with_generated_id(body(), When::DelayMs(0)),
            ],
            T0,
        )
        .await
        .unwrap();
    let again = put(
        s,
        &t,
        NewJob::with_generated_id(body(), When::DelayMs(0)),
        T0,
    )
    .await;
    let mut given: Vec<String> = out
        .iter()
        .chain([&again])
        .map(|e| e.id.to_string())
        .collect();
    assert!(out.iter().chain([&again]).all(|e| e.created), "{out:?}");
    for id in &given {
        let j = s.get(&t, &JobId::new(id.as_str()).unwrap()).await.unwrap();
        assert_eq!(j.map(|j| j.state), Some(JobState::Ready), "{id}");
    }
    let c = s.reserve(&t, 10, None, T0).await.unwrap();
    let mut reserved = ids(&c);
    given.sort();
    reserved.sort();
    given.dedup();
    assert_eq!(given.len(), 3, "three different ids");
    assert_eq!(reserved, given);
}

/// The store announces, through [`Store::watch_wakes`], every change that
/// makes a topic's next job due earlier than a waiter may think: a job
/// enqueued due now, rescheduled to now, released, retried, replayed, and a
/// pause ended. (Callers wake nobody themselves: this is the only source.)
pub async fn watch_wakes_announces_what_became_due(s: &dyn Store) {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = seen.clone();
    let on_wake: WakeFn = Arc::new(move |t: &str| log.lock().unwrap().push(t.to_string()));
    let waited = |t: &'static str| {
        let seen = seen.clone();
        async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
            loop {
                if seen.lock().unwrap().iter().any(|x| x == t) {
                    seen.lock().unwrap().clear();
                    return true;
                }
                if tokio::time::Instant::now() >= deadline {
                    return false;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    };
    let steps = async {
        let t = topic("wk");
        // Until the subscription stands (Redis subscribes on another
        // connection): enqueues due now, each announced once it does.
        let mut subscribed = false;
        for i in 0..40 {
            put(s, &t, job(&format!("probe{i}"), When::DelayMs(0)), T0).await;
            let deadline = tokio::time::Instant::now() + Duration::from_millis(100);
            while tokio::time::Instant::now() < deadline {
                if seen.lock().unwrap().iter().any(|x| x == "wk") {
                    subscribed = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            if subscribed {
                break;
            }
        }
        assert!(subscribed, "no wake-up for a job enqueued due now");
        s.purge_dead(&t, 100).await.unwrap();
        while !s
            .reserve(&t, 100, None, T0)
            .await
            .unwrap()
            .leases
            .is_empty()
        {}
        seen.lock().unwrap().clear();

        let later = topic("wk2");
        strict_topic(s, &later).await;
        put(s, &later, job("a", When::DelayMs(60_000)), T0).await;
        s.reschedule(&later, &id("a"), T0, T0).await.unwrap();
        assert!(waited("wk2").await, "reschedule to now");

        let c = s.reserve(&later, 1, None, T0).await.unwrap();
        s.release(&later, &id("a"), &c.leases[0].token, 0, T0)
            .await
            .unwrap();
        assert!(waited("wk2").await, "release");

        let c = s.reserve(&later, 1, None, T0).await.unwrap();
        s.nack(
            &later,
            &id("a"),
            Nack::retry(&c.leases[0].token, "e").retry_in(0),
            T0,
        )
        .await
        .unwrap();
        assert!(waited("wk2").await, "retry due now");

        let c = s.reserve(&later, 1, None, T0).await.unwrap();
        s.nack(&later, &id("a"), Nack::dead(&c.leases[0].token, "e"), T0)
            .await
            .unwrap();
        seen.lock().unwrap().clear();
        assert_eq!(s.replay_dead(&later, None, 10, T0).await.unwrap(), 1);
        assert!(waited("wk2").await, "replay");

        s.pause_topic(&later, T0 + 60_000).await.unwrap();
        seen.lock().unwrap().clear();
        s.pause_topic(&later, 0).await.unwrap();
        assert!(waited("wk2").await, "pause ended");
    };
    tokio::select! {
        () = s.watch_wakes(on_wake) => panic!("watch_wakes returned"),
        () = steps => {}
    }
}

/// `ack_and_write` for a target that is not the store's own server answers
/// `None` for every job and changes nothing: the job stays reserved.
pub async fn ack_and_write_elsewhere_does_nothing(s: &dyn Store) {
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
    let r = s
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

/// Every page of `list_jobs` from the start, `limit` at a time; calls
/// `between(page number)` after each page (to write meanwhile).
async fn list_all<F, Fut>(
    s: &dyn Store,
    t: &Topic,
    state: Option<JobState>,
    limit: usize,
    mut between: F,
) -> Vec<ListedJob>
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    for page in 0.. {
        assert!(page < 10_000, "the listing never ends");
        let p = s
            .list_jobs(t, state, cursor.as_deref(), limit)
            .await
            .unwrap();
        // About `limit`: Redis answers a small topic's whole table (up to
        // its hash-max-listpack-entries, 512 by default) at once.
        assert!(
            p.jobs.len() <= (limit * 2).max(512),
            "a page holds about `limit`, got {}",
            p.jobs.len()
        );
        out.extend(p.jobs);
        match p.cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
        between(page).await;
    }
    out
}

/// A topic with a job in every state: scheduled soon and far (the timing
/// wheel on Redis), ready, reserved, dead with its error, one with
/// attempts and its own overrides, a bytes body. Returns the topic.
async fn every_state(s: &dyn Store, name: &str) -> Topic {
    let t = topic(name);
    strict_topic(s, &t).await;
    const DAY: u64 = 86_400_000;
    put(s, &t, job("soon", When::DelayMs(5_000)), T0).await;
    put(s, &t, job("far", When::DelayMs(3 * DAY)), T0).await;
    let mut own = job("own", When::DelayMs(0));
    own.max_attempts = Some(7);
    own.lease_ms = Some(9_000);
    own.retry = Some(RetryPolicy::FixedMs(250));
    own.dedup_ms = Some(60_000);
    own.priority = 5;
    put(s, &t, own, T0).await;
    put(s, &t, job("held", When::DelayMs(0)), T0).await;
    put(s, &t, job("dies", When::DelayMs(0)), T0).await;
    put(
        s,
        &t,
        NewJob::new(
            id("bytes"),
            Body::Bytes(vec![0, 159, 255]),
            When::DelayMs(0),
        ),
        T0,
    )
    .await;
    // "own" first (priority 5): one failed attempt, due again at +250 ms.
    let l = one(s, &t, None, T0).await;
    assert_eq!(l.id.as_str(), "own");
    s.nack(&t, &l.id, Nack::retry(&l.token, "boom"), T0)
        .await
        .unwrap();
    let l = one(s, &t, None, T0).await;
    assert_eq!(l.id.as_str(), "held");
    let l2 = one(s, &t, None, T0).await;
    assert_eq!(l2.id.as_str(), "dies");
    s.nack(&t, &l2.id, Nack::dead(&l2.token, "no such order"), T0 + 1)
        .await
        .unwrap();
    t
}

/// `list_jobs`: every job once, in the state it is in, its own overrides
/// kept apart from its topic's; a state filter keeps only that state;
/// pages of any size; a cursor of another kind is refused.
pub async fn list_jobs_pages_every_state_once(s: &dyn Store) {
    let t = every_state(s, "list-all").await;
    for limit in [1, 2, 3, 1000] {
        let all = list_all(s, &t, None, limit, |_| async {}).await;
        let mut got: Vec<(String, JobState)> = all
            .iter()
            .map(|j| (j.info.id.to_string(), j.info.state))
            .collect();
        got.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            got,
            vec![
                ("bytes".into(), JobState::Ready),
                ("dies".into(), JobState::Dead),
                ("far".into(), JobState::Scheduled),
                ("held".into(), JobState::Reserved),
                ("own".into(), JobState::Scheduled),
                ("soon".into(), JobState::Scheduled),
            ],
            "limit {limit}: every job once"
        );
        let by = |i: &str| all.iter().find(|j| j.info.id.as_str() == i).unwrap();
        let own = by("own");
        assert_eq!(own.max_attempts, Some(7));
        assert_eq!(own.lease_ms, Some(9_000));
        assert_eq!(own.retry, Some(RetryPolicy::FixedMs(250)));
        assert_eq!(own.dedup_ms, Some(60_000));
        assert_eq!(
            (own.info.attempts, own.info.priority, own.info.due_at_ms),
            (1, 5, T0 + 250)
        );
        assert_eq!(own.info.last_error.as_deref(), Some("boom"));
        let soon = by("soon");
        assert_eq!(
            (
                soon.max_attempts,
                soon.lease_ms,
                soon.retry.clone(),
                soon.dedup_ms
            ),
            (None, None, None, None),
            "no overrides: the topic's settings apply"
        );
        assert_eq!(soon.info.max_attempts, 4, "the topic's, in effect");
        let dies = by("dies");
        assert_eq!(dies.info.last_error.as_deref(), Some("no such order"));
        assert_eq!(dies.info.died_at_ms, Some(T0 + 1));
        assert!(by("held").info.lease_deadline_ms.is_some());
        assert_eq!(by("bytes").info.body, Body::Bytes(vec![0, 159, 255]));
        assert_eq!(by("far").info.due_at_ms, T0 + 3 * 86_400_000);
    }
    for (state, want) in [
        (JobState::Scheduled, vec!["far", "own", "soon"]),
        (JobState::Ready, vec!["bytes"]),
        (JobState::Reserved, vec!["held"]),
        (JobState::Dead, vec!["dies"]),
    ] {
        let mut got: Vec<String> = list_all(s, &t, Some(state), 2, |_| async {})
            .await
            .into_iter()
            .map(|j| {
                assert_eq!(j.info.state, state);
                j.info.id.to_string()
            })
            .collect();
        got.sort();
        assert_eq!(got, want, "{state}");
    }
    // An unknown topic lists nothing.
    let p = s
        .list_jobs(&topic("list-none"), None, None, 10)
        .await
        .unwrap();
    assert!(p.jobs.is_empty() && p.cursor.is_none());
    // A cursor this store did not hand out.
    let e = s
        .list_jobs(&t, None, Some("not a cursor"), 10)
        .await
        .unwrap_err();
    assert!(
        matches!(&e, StoreError::Invalid(i) if i.code == "invalid_cursor"),
        "{e:?}"
    );
}

/// `list_jobs` under concurrent writes: a job that is there from the first
/// page to the last is listed exactly once, whatever it goes through
/// meanwhile (promoted, reserved, rescheduled, dead, moved out of the
/// timing wheel); jobs added meanwhile do not disturb the others.
pub async fn list_jobs_cursor_is_stable_under_writes(s: &dyn Store) {
    let t = topic("list-moving");
    const MIN: u64 = 60_000;
    let mut batch = Vec::new();
    // More than Redis keeps in one listpack (512), so pages are real pages.
    for i in 0..1500u64 {
        // A third due now, a third soon, a third in far minutes.
        let when = match i % 3 {
            0 => When::DelayMs(0),
            1 => When::DelayMs(1_000 + i),
            _ => When::DelayMs(10 * MIN + i * 1000),
        };
        batch.push(job(&format!("j{i:04}"), when));
    }
    for chunk in batch.chunks(1000) {
        s.enqueue(&t, chunk, T0).await.unwrap();
    }
    let mut now = T0;
    let tr = &t;
    let mut pages = 0;
    let all = list_all(s, &t, None, 100, |page| {
        pages += 1;
        now += 2 * MIN;
        let now = now;
        let t = tr;
        async move {
            // Time passes: soon jobs become due, wheel buckets roll.
            s.promote_due(t, 1000, now).await.unwrap();
            let c = s.reserve(t, 3, Some(3_600_000), now).await.unwrap();
            if let Some(l) = c.leases.first() {
                s.nack(t, &l.id, Nack::dead(&l.token, "x"), now)
                    .await
                    .unwrap();
            }
            let new: Vec<NewJob> = (0..5)
                .map(|k| job(&format!("new{page:03}-{k}"), When::DelayMs(k * MIN)))
                .collect();
            s.enqueue(t, &new, now).await.unwrap();
        }
    })
    .await;
    assert!(pages >= 10, "the listing took {pages} pages");
    let mut seen = std::collections::HashMap::new();
    for j in &all {
        *seen.entry(j.info.id.to_string()).or_insert(0) += 1;
    }
    for i in 0..1500u64 {
        let name = format!("j{i:04}");
        assert_eq!(seen.get(&name), Some(&1), "{name} listed once");
    }
    assert!(
        seen.values().all(|n| *n == 1),
        "no job twice: {:?}",
        seen.iter().filter(|(_, n)| **n > 1).collect::<Vec<_>>()
    );
}

fn import(i: &str, state: JobState, due: u64) -> ImportJob {
    ImportJob {
        id: id(i),
        state,
        due_at_ms: due,
        priority: DEFAULT_PRIORITY,
        attempts: 0,
        max_attempts: None,
        lease_ms: None,
        retry: None,
        dedup_ms: None,
        body: Body::Json(format!("{{\"n\":\"{i}\"}}")),
        last_error: None,
        created_at_ms: T0 - 1000,
        died_at_ms: None,
        key: None,
    }
}

/// `import_jobs`: due times, attempts, overrides, errors and dead letters
/// kept; a waiting job is ready or scheduled by its due time (far ones
/// included); hand-outs go on counting attempts; a second import of the
/// same jobs changes nothing; an id in its dedup window is not written.
pub async fn import_jobs_keeps_due_attempts_and_dead_letters(s: &dyn Store) {
    let t = topic("import");
    strict_topic(s, &t).await;
    const DAY: u64 = 86_400_000;
    let now = T0;
    let mut tried = import("tried", JobState::Ready, now - 500);
    tried.attempts = 2;
    tried.priority = 3;
    tried.last_error = Some("timeout".into());
    tried.max_attempts = Some(3);
    tried.lease_ms = Some(5_000);
    tried.retry = Some(RetryPolicy::FixedMs(40));
    tried.dedup_ms = Some(1_000);
    let mut dead = import("dead", JobState::Dead, now - 9_000);
    dead.attempts = 4;
    dead.last_error = Some("card declined".into());
    dead.died_at_ms = Some(now - 8_000);
    let mut bytes = import("bytes", JobState::Scheduled, now + 2_000);
    bytes.body = Body::Bytes(vec![1, 0, 254]);
    let jobs = vec![
        tried,
        import("soon", JobState::Scheduled, now + 1_000),
        import("far", JobState::Scheduled, now + 2 * DAY),
        // Exported as ready at a lease deadline still ahead: scheduled till then.
        import("lease", JobState::Ready, now + 30_000),
        dead,
        bytes,
    ];
    let out = s.import_jobs(&t, &jobs, now).await.unwrap();
    let got: Vec<(String, bool, JobState)> = out
        .iter()
        .map(|i| (i.id.to_string(), i.created, i.state))
        .collect();
    assert_eq!(
        got,
        vec![
            ("tried".into(), true, JobState::Ready),
            ("soon".into(), true, JobState::Scheduled),
            ("far".into(), true, JobState::Scheduled),
            ("lease".into(), true, JobState::Scheduled),
            ("dead".into(), true, JobState::Dead),
            ("bytes".into(), true, JobState::Scheduled),
        ]
    );
    let st = s.stats(&t, now).await.unwrap();
    assert_eq!((st.scheduled, st.ready, st.reserved, st.dead), (4, 1, 0, 1));
    assert_eq!(st.counters.enqueued, 6);

    let g = s.get(&t, &id("tried")).await.unwrap().unwrap();
    assert_eq!(
        (
            g.state,
            g.due_at_ms,
            g.priority,
            g.attempts,
            g.max_attempts,
            g.lease_ms
        ),
        (JobState::Ready, now - 500, 3, 2, 3, 5_000)
    );
    assert_eq!(g.last_error.as_deref(), Some("timeout"));
    assert_eq!(g.created_at_ms, T0 - 1000);
    let d = s.get(&t, &id("dead")).await.unwrap().unwrap();
    assert_eq!(
        (d.state, d.attempts, d.died_at_ms, d.last_error.as_deref()),
        (JobState::Dead, 4, Some(now - 8_000), Some("card declined"))
    );
    let dl = s.list_dead(&t, 0, 10).await.unwrap();
    assert_eq!(dl.len(), 1);
    assert_eq!(
        s.get(&t, &id("bytes")).await.unwrap().unwrap().body,
        Body::Bytes(vec![1, 0, 254])
    );
    let page = s.list_jobs(&t, None, None, 1000).await.unwrap();
    let own = page
        .jobs
        .iter()
        .find(|j| j.info.id.as_str() == "tried")
        .unwrap();
    assert_eq!(
        (
            own.max_attempts,
            own.lease_ms,
            own.retry.clone(),
            own.dedup_ms
        ),
        (
            Some(3),
            Some(5_000),
            Some(RetryPolicy::FixedMs(40)),
            Some(1_000)
        )
    );

    // Idempotent by id: nothing changes the second time.
    let before: Vec<JobInfo> = {
        let mut v = Vec::new();
        for j in &jobs {
            v.push(s.get(&t, &j.id).await.unwrap().unwrap());
        }
        v
    };
    let again = s.import_jobs(&t, &jobs, now + 10).await.unwrap();
    assert!(again.iter().all(|i| !i.created && !i.deduplicated));
    assert_eq!(again[0].state, JobState::Ready);
    assert_eq!(again[4].state, JobState::Dead);
    for (j, b) in jobs.iter().zip(&before) {
        assert_eq!(&s.get(&t, &j.id).await.unwrap().unwrap(), b, "{}", j.id);
    }
    let st2 = s.stats(&t, now).await.unwrap();
    assert_eq!(st2, st, "a second import changes nothing");

    // The third attempt is the last (its own max_attempts 3): it goes dead.
    let l = one(s, &t, None, now).await;
    assert_eq!((l.id.as_str(), l.attempt), ("tried", 3));
    assert_eq!(
        s.nack(&t, &l.id, Nack::retry(&l.token, "again"), now)
            .await
            .unwrap(),
        NackOutcome::Dead { attempt: 3 }
    );
    // A dead letter is still a job: importing it again finds it.
    let r = s.import_jobs(&t, &jobs[..1], now + 10).await.unwrap();
    assert!(!r[0].created && !r[0].deduplicated, "{r:?}");
    assert_eq!(r[0].state, JobState::Dead);
    // The imported far and near jobs come out at their due times, not before.
    assert!(
        s.reserve(&t, 10, None, now + 999)
            .await
            .unwrap()
            .leases
            .is_empty()
    );
    let c = s.reserve(&t, 10, None, now + 1_000).await.unwrap();
    assert_eq!(ids(&c), vec!["soon"]);
    // Replayed dead letters get a fresh start, as any dead letter.
    assert_eq!(
        s.replay_dead(&t, Some(&[id("dead")]), 10, now + 1_000)
            .await
            .unwrap(),
        1
    );
    // Replayed, still in its dedup window (1 s from its death): it is a
    // live job, and an import finds it.
    assert_eq!(
        s.replay_dead(&t, Some(&[id("tried")]), 10, now + 1_000)
            .await
            .unwrap(),
        1
    );
    let r = s.import_jobs(&t, &jobs[..1], now + 1_000).await.unwrap();
    assert!(!r[0].created && !r[0].deduplicated, "{r:?}");
    assert_eq!(r[0].state, JobState::Ready);

    // A job that ended (acked) within its dedup window is not written again.
    let t2 = topic("import-dedup");
    let mut once = import("once", JobState::Ready, now - 1);
    once.dedup_ms = Some(3_600_000);
    s.import_jobs(&t2, std::slice::from_ref(&once), now)
        .await
        .unwrap();
    let l = one(s, &t2, None, now).await;
    s.ack(&t2, &l.id, &l.token, now + 5).await.unwrap();
    let r = s.import_jobs(&t2, &[once], now + 10).await.unwrap();
    assert!(r[0].deduplicated && !r[0].created, "{r:?}");
    assert!(s.get(&t2, &id("once")).await.unwrap().is_none());
}

/// Imported dead letters over the topic's `dead_cap` drop the oldest.
pub async fn import_jobs_dead_past_cap_drops_oldest(s: &dyn Store) {
    let t = topic("import-cap");
    s.configure_topic(
        &t,
        &TopicConfigPatch {
            dead_cap: Some(2),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let jobs: Vec<ImportJob> = (0..4u64)
        .map(|i| {
            let mut j = import(&format!("d{i}"), JobState::Dead, T0);
            j.died_at_ms = Some(T0 + i);
            j
        })
        .collect();
    s.import_jobs(&t, &jobs, T0 + 10).await.unwrap();
    let dead: Vec<String> = s
        .list_dead(&t, 0, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|j| j.id.to_string())
        .collect();
    assert_eq!(dead, vec!["d2", "d3"]);
    assert_eq!(s.stats(&t, T0).await.unwrap().dead, 2);
}

/// `settings_version`: a number the store can always give, which moves
/// with every settings change and topic deletion (readers keep settings
/// while it stands still) and stands still for job traffic (or readers
/// would read every topic's settings again under load).
pub async fn settings_version_moves_with_settings_only(s: &dyn Store) {
    let v0 = s.settings_version().await.unwrap().expect("a version");
    let t = topic("sv");
    s.configure_topic(
        &t,
        &TopicConfigPatch {
            max_attempts: Some(3),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let v1 = s.settings_version().await.unwrap().unwrap();
    assert_ne!(v1, v0, "configure moved it");
    put(s, &t, job("a", When::DelayMs(0)), T0).await;
    put(s, &topic("sv-other"), job("a", When::DelayMs(5)), T0).await;
    let r = s.reserve(&t, 1, None, T0).await.unwrap();
    s.ack(&t, &r.leases[0].id, &r.leases[0].token, T0)
        .await
        .unwrap();
    assert_eq!(
        s.settings_version().await.unwrap().unwrap(),
        v1,
        "jobs moving change no settings"
    );
    s.configure_topic(
        &t,
        &TopicConfigPatch {
            paused: Some(true),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let v2 = s.settings_version().await.unwrap().unwrap();
    assert_ne!(v2, v1, "a pause moved it");
    let (_, gone) = s.delete_topic(&t, 100).await.unwrap();
    assert!(gone);
    assert_ne!(
        s.settings_version().await.unwrap().unwrap(),
        v2,
        "a deletion moved it"
    );
}

#[macro_export]
macro_rules! conformance_tests {
    (in_one $test:ident, $setup:expr, $make:expr) => {
        $crate::conformance_tests!(@list (@one $test, $setup, $make));
    };
    ($make:expr) => {
        $crate::conformance_tests!(@list (@each $make));
    };
    (@list ($($mode:tt)*)) => {
        $crate::conformance_tests!($($mode)*;
            reserve_never_early,
            enqueue_assigns_ids_when_none_given,
            reserve_by_priority_due_then_fifo,
            enqueue_batch_results_per_job,
            enqueue_is_idempotent_or_replaces,
            enqueue_batch_replacing_its_own_jobs,
            reserve_one_holder_among_concurrent_callers,
            requeue_expired_redelivers,
            ack_nack_touch_refuse_a_stale_token,
            ack_refusals_and_acks_of_every_kind_of_job,
            ack_batch_results_per_job,
            nack_batch_results_per_job,
            touch_batch_results_per_job,
            batch_verbs_over_max_batch,
            touch_extends_lease,
            nack_backs_off_then_goes_dead,
            nack_retry_overrides,
            requeue_expired_last_attempt_goes_dead,
            replay_and_purge_dead,
            nack_past_dead_cap_drops_oldest,
            cancel_in_every_state,
            reschedule_only_while_waiting,
            get_reports_job_and_bodies_round_trip,
            configure_topic_and_list_topics,
            list_topics_pages_in_name_order,
            list_topics_prefix_is_exact,
            stats_count_states,
            nack_dead_goes_dead_at_once,
            release_does_not_count_the_attempt,
            enqueue_far_future,
            reserve_many_far_jobs_in_order,
            list_scheduled_earliest_first,
            next_seq_is_unique_and_increasing,
            list_ready_in_hand_out_order,
            pause_topic_hands_nothing_out,
            paused_topic_holds_hand_outs_until_resumed,
            rate_limit_hands_out_exactly_per_window,
            rate_limit_burst_and_resume,
            rate_limit_is_shared_by_concurrent_callers,
            key_concurrency_holds_per_key_without_blocking_others,
            keys_take_turns,
            key_rate_limit_per_key,
            key_concurrency_is_shared_and_changes_take_effect,
            keys_churn_limit_changes_and_partial_deletes,
            reserve_job_in_any_waiting_or_dead_state,
            watch_wakes_announces_what_became_due,
            ack_and_write_elsewhere_does_nothing,
            nack_with_a_priority_keeps_it,
            get_counts_what_happened_to_a_job,
            dedup_window_refuses_ended_ids,
            records_keep_values_and_raise_marks,
            list_jobs_pages_every_state_once,
            list_jobs_cursor_is_stable_under_writes,
            import_jobs_keeps_due_attempts_and_dead_letters,
            import_jobs_dead_past_cap_drops_oldest,
            settings_version_moves_with_settings_only
        );
    };
    (@each $make:expr; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $name() {
                let (store, _guard) = $make.await;
                $crate::conformance::$name(&store).await;
            }
        )*
    };
    (@one $test:ident, $setup:expr, $make:expr; $($name:ident),* $(,)?) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $test() {
            let setup = $setup;
            $(
                {
                    eprintln!("scenario {}", stringify!($name));
                    let store = ($make)(&setup, stringify!($name)).await;
                    $crate::conformance::$name(&store).await;
                }
            )*
        }
    };
}
