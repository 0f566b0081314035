//! The batch verbs (`ack_batch`, `nack_batch`, `touch_batch`): a result per
//! item, in order, what single calls one after the other would answer, and
//! batches longer than `MAX_BATCH`.

use dq_core::*;

use super::T0;
use super::support::{id, ids, job, key_limits, keyed, one, put, strict_topic, topic};

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
        AckItem::new(&a, &l1.id, &l1.token),
        AckItem::new(&a, &second.id, &first.token),
        AckItem::new(&a, &never, "tok"),
        AckItem::new(&b, &l3.id, &l3.token),
        AckItem::new(&a, &lg.id, &lg.token),
        AckItem::new(&a, &l1.id, &l1.token),
        AckItem::new(&a, &ld.id, &ld.token),
        AckItem::new(&a, &id("waiting"), &l2.token),
        AckItem::new(&a, &l2.id, &l2.token),
        AckItem::new(&a, &ldd.id, &ldd.token),
        AckItem::new(&c, &lk.id, &lk.token),
        AckItem::new(&nowhere, &never, "tok"),
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
    let item = NackItem::new;
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
    let item = TouchItem::new;
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
    let mut touches: Vec<TouchItem> = leases
        .iter()
        .map(|l| TouchItem::new(&t, &l.id, &l.token, Some(60_000)))
        .collect();
    touches.push(touches[0].clone());
    let done = s.touch_batch(&touches, now).await;
    assert_eq!(done.len(), n + 1);
    assert!(
        done.iter()
            .all(|r| matches!(r, Ok(d) if *d == now + 60_000)),
        "every touch answered, in order"
    );
    let mut nacks: Vec<NackItem> = leases
        .iter()
        .map(|l| NackItem::new(&t, &l.id, Nack::retry(&l.token, "big").retry_in(1000)))
        .collect();
    nacks.push(nacks[0].clone());
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
