//! Flow-control keys: `key_concurrency` per key without blocking the
//! others, keys taking turns, `key_rate_limit` per key, limits shared by
//! callers and changed on the fly, churn and partial deletes.

use dq_core::*;

use super::T0;
use super::support::{id, ids, job, key_limits, keyed, put, ready_jobs, topic};

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
    s.release(&t, &l.id, &l.token, 0, GiveBack::Released, T0 + 5)
        .await
        .unwrap();
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
            errors: Vec::new(),
            created_at_ms: T0,
            died_at_ms: None,
            key: Some(JobKey::new("imp").unwrap()),
            trace: None,
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
    let ready = s.list_ready(&t2, 0, 10).await.unwrap();
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
