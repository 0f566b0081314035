//! Listings of jobs: `list_scheduled` (earliest first), `list_ready` (in
//! hand-out order) and `list_jobs` (every state once, a cursor stable
//! under writes).

use dq_core::*;

use super::T0;
use super::support::{id, ids, job, one, put, strict_topic, topic};

/// The scheduled jobs are listed earliest due first, near and far (days
/// ahead) alike; ready, reserved, cancelled and dead jobs are not listed.
pub async fn list_scheduled_earliest_first(s: &dyn Store) {
    let t = topic("upcoming");
    assert!(s.list_scheduled(&t, 0, 10).await.unwrap().is_empty());
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
    let all = s.list_scheduled(&t, 0, 100).await.unwrap();
    assert!(all.iter().all(|j| j.state == JobState::Scheduled));
    assert_eq!(all[0].due_at_ms, T0 + 1_000);
    assert_eq!(all[0].body, Body::Json("{\"n\":\"s1\"}".into()));
    assert_eq!(names(all), vec!["s1", "s5", "d1", "d1b", "d2", "d3"]);
    assert_eq!(
        names(s.list_scheduled(&t, 0, 3).await.unwrap()),
        vec!["s1", "s5", "d1"]
    );
    // Page after page, near and far alike.
    let mut pages = Vec::new();
    for offset in [0, 2, 4, 6] {
        pages.push(names(s.list_scheduled(&t, offset, 2).await.unwrap()));
    }
    assert_eq!(
        pages,
        [
            vec!["s1", "s5"],
            vec!["d1", "d1b"],
            vec!["d2", "d3"],
            vec![]
        ]
    );
    assert_eq!(
        names(s.list_scheduled(&t, 3, 10).await.unwrap()),
        vec!["d1b", "d2", "d3"]
    );
    // A far job moved near (and a near one far) is listed once, in its new place.
    s.reschedule(&t, &id("d3"), T0 + 500, false, T0)
        .await
        .unwrap();
    s.reschedule(&t, &id("s5"), T0 + 4 * DAY, false, T0)
        .await
        .unwrap();
    s.reschedule(&t, &id("d1b"), T0 + 4 * DAY + 1, false, T0)
        .await
        .unwrap();
    assert_eq!(
        names(s.list_scheduled(&t, 0, 100).await.unwrap()),
        vec!["d3", "s1", "d1", "d2", "s5", "d1b"]
    );
}

/// `list_ready`: ready jobs only, by priority, then due time, then enqueue
/// order — the order reserves hand them out — those with a flow-control
/// key after those without; page after page.
pub async fn list_ready_in_hand_out_order(s: &dyn Store) {
    let t = Topic::new("peek").unwrap();
    let mut jobs = Vec::new();
    for (id, pri, delay, key) in [
        ("a", 5, 0, None),
        ("b", 1, 0, None),
        ("c", 5, 0, None),
        ("later", 0, 60_000, None),
        ("k", 9, 0, Some("tenant")),
    ] {
        let mut j = NewJob::new(
            JobId::new(id).unwrap(),
            Body::Json("1".into()),
            When::DelayMs(delay),
        );
        j.priority = pri;
        j.key = key.map(|k| JobKey::new(k).unwrap());
        jobs.push(j);
    }
    s.enqueue(&t, &jobs, T0).await.unwrap();
    let ids = |v: Vec<JobInfo>| v.into_iter().map(|j| j.id.to_string()).collect::<Vec<_>>();
    assert_eq!(
        ids(s.list_ready(&t, 0, 10).await.unwrap()),
        ["b", "a", "c", "k"]
    );
    assert_eq!(ids(s.list_ready(&t, 0, 1).await.unwrap()), ["b"]);
    let mut pages = Vec::new();
    for offset in [0, 2, 3, 4] {
        pages.push(ids(s.list_ready(&t, offset, 2).await.unwrap()));
    }
    assert_eq!(
        pages,
        [vec!["b", "a"], vec!["c", "k"], vec!["k"], vec![]],
        "pages of 2 from offsets 0, 2, 3, 4"
    );
    let c = s.reserve(&t, 1, None, T0).await.unwrap();
    assert_eq!(
        c.leases[0].id.as_str(),
        "b",
        "the head of the list is what a reserve takes"
    );
    assert_eq!(ids(s.list_ready(&t, 0, 10).await.unwrap()), ["a", "c", "k"]);
    assert!(
        s.list_ready(&Topic::new("none").unwrap(), 0, 10)
            .await
            .unwrap()
            .is_empty()
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
