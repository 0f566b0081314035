//! Enqueue: a result per job of a batch, in order; the same id again
//! changes nothing (or replaces a waiting job); a batch that names a job
//! again; ids given by the store; jobs days ahead; dedup windows after a
//! job ended.

use dq_core::*;

use super::T0;
use super::support::{id, ids, job, one, put, topic};

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
    s.reschedule(&t, &id("moved"), T0 + 3 * DAY + 2, false, T0)
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
