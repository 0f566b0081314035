//! Reserve and its order: never early, by priority then due time then
//! enqueue order, one holder among concurrent callers, many far jobs in
//! order, and `reserve_job` (one job by id).

use dq_core::*;

use super::T0;
use super::support::{id, ids, job, put, topic};

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
    s.release(&t, &ready.id, &ready.token, 0, GiveBack::Released, T0)
        .await
        .unwrap();
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
