//! Reading one job: what `get` reports (state, times, limits, bodies of
//! either kind) and its counts of what happened to the job.

use dq_core::*;

use super::T0;
use super::support::{id, ids, job, one, put, strict_topic, topic};

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

/// A job's counts: hand-outs in its whole life, leases that expired,
/// attempts given back (nack to retry, release), times dead, times replayed
/// or kicked — each exactly once per event; a job given back because its
/// holder went away ([`GiveBack::Dropped`]) counts nothing.
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
    s.release(&t, &l.id, &l.token, 0, GiveBack::Released, now)
        .await
        .unwrap();
    // Given back by a holder that went away: nothing counted, the attempt
    // given back, the hand-out kept in `reserves`.
    let before = s.get(&t, &id("j")).await.unwrap().unwrap();
    let l = one(s, &t, None, now).await;
    s.release(&t, &l.id, &l.token, 0, GiveBack::Dropped, now)
        .await
        .unwrap();
    let after = s.get(&t, &id("j")).await.unwrap().unwrap();
    assert_eq!(after.attempts, before.attempts, "the attempt given back");
    assert_eq!(
        after.counts,
        JobCounts {
            reserves: before.counts.reserves + 1,
            ..before.counts
        },
        "a dropped lease counts its hand-out only"
    );
    assert!(after.errors.len() == before.errors.len());
    // Dead at once, then replayed: the attempts start again, the
    // reserves go on.
    let l = one(s, &t, None, now).await;
    s.nack(&t, &l.id, Nack::dead(&l.token, "x"), now)
        .await
        .unwrap();
    now += 1;
    assert_eq!(s.replay_dead(&t, None, 10, now).await.unwrap(), 1);
    let j = s.get(&t, &id("j")).await.unwrap().unwrap();
    assert_eq!(j.attempts, 0);
    assert_eq!(
        j.counts,
        JobCounts {
            reserves: 5,
            timeouts: 1,
            releases: 2,
            buries: 1,
            kicks: 1
        }
    );
    // Handed out again after the replay; a reschedule moves it without a
    // count, a kick out of the schedule counts one.
    let l = one(s, &t, None, now).await;
    s.nack(&t, &l.id, Nack::retry(&l.token, "x").retry_in(5000), now)
        .await
        .unwrap();
    s.reschedule(&t, &id("j"), now + 9000, false, now)
        .await
        .unwrap();
    s.reschedule(&t, &id("j"), now, true, now).await.unwrap();
    let j = s.get(&t, &id("j")).await.unwrap().unwrap();
    assert_eq!((j.attempts, j.state), (1, JobState::Ready));
    assert_eq!(
        j.counts,
        JobCounts {
            reserves: 6,
            timeouts: 1,
            releases: 3,
            buries: 1,
            kicks: 2
        }
    );
    assert_eq!(j.put_delay_ms, None, "a job in due order keeps no delay");
}

/// A job ranked in put order ([`NewJob::put_order`], beanstalkd's) keeps
/// its place among the ready jobs of its priority by when it was put, not
/// its due time, through a delay, a release, a nack, a lease expiry and a
/// replay; it keeps the delay it was last put or given back with; jobs in
/// due order beside it keep theirs; priority comes first.
pub async fn put_order_jobs_keep_their_place(s: &dyn Store) {
    let t = topic("put-order");
    // As the beanstalkd listener puts them: a lease that runs out makes
    // the job ready again at once.
    let put_ordered = |i: &str, when: When, priority: u32| NewJob {
        put_order: true,
        priority,
        retry: Some(RetryPolicy::FixedMs(0)),
        ..job(i, when)
    };
    // a is put first but due last; b and c after it, due at once.
    put(s, &t, put_ordered("a", When::DelayMs(1000), 5), T0).await;
    put(s, &t, put_ordered("b", When::DelayMs(0), 5), T0 + 1).await;
    put(s, &t, put_ordered("c", When::DelayMs(0), 5), T0 + 2).await;
    // A job in due order, due between a's put and its due time, and an
    // urgent one put last.
    let due_order = NewJob {
        priority: 5,
        ..job("due-order", When::DelayMs(0))
    };
    put(s, &t, due_order, T0 + 3).await;
    put(s, &t, put_ordered("urgent", When::DelayMs(0), 1), T0 + 4).await;
    let tr = &t;
    let get = |i: &'static str| async move { s.get(tr, &id(i)).await.unwrap().unwrap() };
    assert_eq!(get("a").await.put_delay_ms, Some(1000));
    assert_eq!(get("b").await.put_delay_ms, Some(0));
    assert_eq!(get("due-order").await.put_delay_ms, None);

    let mut now = T0 + 1000;
    assert_eq!(s.promote_due(&t, 10, now).await.unwrap().moved, 1);
    let listed: Vec<String> = s
        .list_ready(&t, 0, 10)
        .await
        .unwrap()
        .iter()
        .map(|j| j.id.to_string())
        .collect();
    let order = ["urgent", "a", "b", "c", "due-order"];
    assert_eq!(listed, order, "listed in hand-out order");
    // Each way of giving `a` back leaves it first among priority 5.
    let next = |now: u64| async move {
        let l = one(s, tr, None, now).await;
        assert_eq!(l.id.as_str(), "urgent", "priority first");
        s.release(tr, &l.id, &l.token, 60_000, GiveBack::Released, now)
            .await
            .unwrap();
    };
    next(now).await;
    let l = one(s, &t, None, now).await;
    assert_eq!(l.id.as_str(), "a", "put first, due last: first");
    s.release(&t, &l.id, &l.token, 0, GiveBack::Released, now)
        .await
        .unwrap();
    assert_eq!(
        get("a").await.put_delay_ms,
        Some(0),
        "released with no delay"
    );
    now += 10;
    let l = one(s, &t, None, now).await;
    assert_eq!(l.id.as_str(), "a", "released: still first");
    s.nack(&t, &l.id, Nack::retry(&l.token, "x").retry_in(20), now)
        .await
        .unwrap();
    assert_eq!(get("a").await.put_delay_ms, Some(20));
    now += 20;
    let l = one(s, &t, Some(1000), now).await;
    assert_eq!(l.id.as_str(), "a", "nacked: first again once due");
    now += 1001;
    assert_eq!(s.requeue_expired(&t, 10, now).await.unwrap().retried, 1);
    assert_eq!(
        get("a").await.put_delay_ms,
        Some(20),
        "a lease expiry leaves the delay"
    );
    let l = one(s, &t, None, now).await;
    assert_eq!(l.id.as_str(), "a", "after its lease expired: first");
    s.release(&t, &l.id, &l.token, 0, GiveBack::Dropped, now)
        .await
        .unwrap();
    assert_eq!(get("a").await.put_delay_ms, Some(20), "a drop keeps it too");
    let l = one(s, &t, None, now).await;
    assert_eq!(l.id.as_str(), "a", "dropped: first");
    s.nack(&t, &l.id, Nack::dead(&l.token, "x"), now)
        .await
        .unwrap();
    now += 1;
    assert_eq!(s.replay_dead(&t, None, 10, now).await.unwrap(), 1);
    let c = s.reserve(&t, 4, None, now).await.unwrap();
    assert_eq!(
        ids(&c),
        ["a", "b", "c", "due-order"],
        "replayed: first; the due-order job by its due time"
    );
    // How overdue a topic is counts from the due time, not the put time.
    let late = topic("put-order-late");
    put(s, &late, put_ordered("d", When::DelayMs(5000), 5), T0).await;
    assert_eq!(s.promote_due(&late, 10, T0 + 5000).await.unwrap().moved, 1);
    let st = s.stats(&late, T0 + 5010).await.unwrap();
    assert_eq!((st.ready, st.oldest_overdue_ms), (1, 10));
}

/// A job's trace context ([`NewJob::trace`]) stays with it: handed back by
/// every hand-out (a retry, a reserve by id, a replay too), by `get` and
/// the listings, and kept by an import; a job without one has none.
pub async fn trace_context_goes_with_the_job(s: &dyn Store) {
    let t = topic("traced");
    let ctx = |parent: &str, state: Option<&str>| TraceContext::parse(parent, state).unwrap().0;
    let a = ctx(
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        Some("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"),
    );
    let b = ctx(
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00",
        None,
    );
    let traced = |i: &str, c: &TraceContext| NewJob {
        trace: Some(c.clone()),
        retry: Some(RetryPolicy::FixedMs(0)),
        ..job(i, When::DelayMs(0))
    };
    s.enqueue(
        &t,
        &[
            traced("a", &a),
            traced("b", &b),
            job("plain", When::DelayMs(0)),
        ],
        T0,
    )
    .await
    .unwrap();
    let c = s.reserve(&t, 3, None, T0).await.unwrap();
    let got: Vec<(String, Option<TraceContext>)> = c
        .leases
        .iter()
        .map(|l| (l.id.to_string(), l.trace.clone()))
        .collect();
    assert_eq!(
        got,
        [
            ("a".to_string(), Some(a.clone())),
            ("b".to_string(), Some(b.clone())),
            ("plain".to_string(), None)
        ]
    );
    for l in &c.leases {
        s.nack(&t, &l.id, Nack::retry(&l.token, "again").retry_in(0), T0)
            .await
            .unwrap();
    }
    let again = s.reserve(&t, 1, None, T0 + 1).await.unwrap();
    assert_eq!(again.leases[0].trace, Some(a.clone()), "a retry keeps it");
    let l = &again.leases[0];
    s.nack(&t, &l.id, Nack::dead(&l.token, "x"), T0 + 1)
        .await
        .unwrap();
    assert_eq!(s.replay_dead(&t, None, 10, T0 + 2).await.unwrap(), 1);
    let by_id = s.reserve_job(&t, &id("a"), None, T0 + 2).await.unwrap();
    assert_eq!(
        by_id.unwrap().trace,
        Some(a.clone()),
        "by id, after a replay"
    );
    assert_eq!(
        s.get(&t, &id("b")).await.unwrap().unwrap().trace,
        Some(b.clone())
    );
    assert_eq!(s.get(&t, &id("plain")).await.unwrap().unwrap().trace, None);
    // (A page's order is the store's own: sorted here by id.)
    let mut page = s.list_jobs(&t, None, None, 10).await.unwrap();
    page.jobs
        .sort_by(|x, y| x.info.id.as_str().cmp(y.info.id.as_str()));
    let listed: Vec<Option<TraceContext>> =
        page.jobs.iter().map(|j| j.info.trace.clone()).collect();
    assert_eq!(listed, [Some(a.clone()), Some(b.clone()), None]);
    let ready = s.list_ready(&t, 0, 10).await.unwrap();
    assert!(ready.iter().any(|j| j.trace == Some(b.clone())));
    // An import keeps it.
    let into = topic("traced-import");
    let imported = ImportJob {
        trace: Some(a.clone()),
        ..super::import::import("b", JobState::Scheduled, T0 + 60_000)
    };
    s.import_jobs(&into, &[imported], T0 + 3).await.unwrap();
    assert_eq!(
        s.get(&into, &id("b")).await.unwrap().unwrap().trace,
        Some(a)
    );
}
