//! Unit tests of the store (`EmbeddedStore`) that look inside the writer:
//! its memory, its savepoints and its connection.

use super::*;
use crate::writer::Failure;

const T0: u64 = 1_700_000_000_000;

fn job(id: &str) -> NewJob {
    NewJob::new(
        JobId::new(id).unwrap(),
        Body::Json("1".into()),
        When::DelayMs(0),
    )
}

async fn leases_held(s: &EmbeddedStore) -> usize {
    s.writer.read(|cx| Ok(cx.mem.leases.len())).await.unwrap()
}

/// The leases in memory follow the transaction: an operation undone
/// by its savepoint takes its leases with it, and a later expiry finds
/// exactly the leases the file holds.
#[tokio::test]
async fn an_undone_operation_leaves_no_lease_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let s = EmbeddedStore::open(dir.path()).unwrap();
    let topic = Topic::new("undo").unwrap();
    s.enqueue(&topic, &[job("a"), job("b"), job("c")], T0)
        .await
        .unwrap();
    let a = s.reserve(&topic, 1, Some(1000), T0).await.unwrap().leases;
    assert_eq!(a[0].id.as_str(), "a");
    assert_eq!(leases_held(&s).await, 1);
    // Leases b, extends a, ends nothing, then fails: all of it undone.
    let t = topic.clone();
    let token = a[0].token.clone();
    let undone: StoreResult<()> = s
        .writer
        .exec(move |cx| {
            let b = ops::reserve(cx, &t, 1, Some(1000), T0)?;
            assert_eq!(b.leases[0].id.as_str(), "b");
            ops::touch(cx, &t, &JobId::new("a").unwrap(), &token, Some(50_000), T0)?;
            assert_eq!(cx.mem.leases.len(), 2);
            Err(Failure(StoreError::Unavailable(
                "the test's failure".into(),
            )))
        })
        .await;
    assert!(undone.is_err());
    assert_eq!(leases_held(&s).await, 1);
    let st = s.stats(&topic, T0).await.unwrap();
    assert_eq!((st.ready, st.reserved), (2, 1));
    // Only a's lease ends, at its own deadline (the extension undone).
    let none = s.requeue_expired(&topic, 10, T0 + 1000).await.unwrap();
    assert!(none.jobs.is_empty());
    assert_eq!(none.next_deadline_ms, Some(T0 + 1000));
    let r = s.requeue_expired(&topic, 10, T0 + 1001).await.unwrap();
    let ids: Vec<_> = r.jobs.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, ["a"]);
    assert_eq!(r.next_deadline_ms, None);
    assert_eq!(leases_held(&s).await, 0);
}

/// The value of the writer's counter `name` (`writer::WORK_*`).
fn work(s: &EmbeddedStore, name: &str) -> f64 {
    s.work_counters()
        .into_iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("{name} missing"))
        .value
}

/// The writer's work counters: one operation per call, one commit per
/// call awaited alone, and its time, the commits' part of it included.
#[tokio::test]
async fn the_writer_counts_its_calls_commits_and_time() {
    let dir = tempfile::tempdir().unwrap();
    let s = EmbeddedStore::open(dir.path()).unwrap();
    assert_eq!(work(&s, writer::WORK_OPERATIONS), 0.0);
    assert_eq!(work(&s, writer::WORK_COMMITS), 0.0);
    let topic = Topic::new("work").unwrap();
    s.enqueue(&topic, &[job("a"), job("b")], T0).await.unwrap();
    let l = s.reserve(&topic, 2, Some(1000), T0).await.unwrap().leases;
    assert_eq!(l.len(), 2);
    s.stats(&topic, T0).await.unwrap();
    assert_eq!(work(&s, writer::WORK_OPERATIONS), 3.0);
    assert_eq!(work(&s, writer::WORK_COMMITS), 3.0);
    let busy = work(&s, writer::WORK_BUSY);
    let commit = work(&s, writer::WORK_COMMIT);
    assert!(
        commit > 0.0 && commit <= busy,
        "commit {commit} busy {busy}"
    );
    // A refused call (a stale token) is a call run too.
    let a = JobId::new("a").unwrap();
    assert!(s.ack(&topic, &a, "0.1", T0).await.is_err());
    assert_eq!(work(&s, writer::WORK_OPERATIONS), 4.0);
    assert!(work(&s, writer::WORK_BUSY) > busy);
}

/// A call that holds the writer (as a stuck fsync would) counts as
/// busy while it runs, not only once it ends, and the counter never
/// goes back.
#[tokio::test]
async fn a_writer_held_by_a_call_shows_busy_while_held() {
    let dir = tempfile::tempdir().unwrap();
    let s = Arc::new(EmbeddedStore::open(dir.path()).unwrap());
    let slow = {
        let s = s.clone();
        tokio::spawn(async move {
            s.writer
                .exec(|_| {
                    std::thread::sleep(std::time::Duration::from_millis(300));
                    Ok(())
                })
                .await
        })
    };
    let t0 = std::time::Instant::now();
    while work(&s, writer::WORK_OPERATIONS) < 1.0 {
        assert!(t0.elapsed().as_secs() < 2, "the call never started");
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    let before = work(&s, writer::WORK_BUSY);
    tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    let during = work(&s, writer::WORK_BUSY);
    // At least the 150 ms slept, or all that was left of the call's 300.
    assert!(during - before >= 0.14, "{before} → {during}");
    let mut last = during;
    while !slow.is_finished() {
        let now = work(&s, writer::WORK_BUSY);
        assert!(now >= last, "went back: {last} → {now}");
        last = now;
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    slow.await.unwrap().unwrap();
    let after = work(&s, writer::WORK_BUSY);
    assert!(after >= last && after >= 0.3, "{last} → {after}");
}

async fn ready_held(s: &EmbeddedStore) -> usize {
    s.writer.read(|cx| Ok(cx.mem.ready.len())).await.unwrap()
}

/// The ready jobs in memory follow the transaction as the leases do:
/// whatever an undone operation did to them (a job leased, enqueued,
/// cancelled, rescheduled) is as it was, and the jobs go out in their
/// order, after a restart too.
#[tokio::test]
async fn an_undone_operation_leaves_the_ready_jobs_as_they_were() {
    let dir = tempfile::tempdir().unwrap();
    let topic = Topic::new("undo-ready").unwrap();
    let s = EmbeddedStore::open(dir.path()).unwrap();
    let mut urgent = job("c");
    urgent.priority = 0;
    let mut jobs = vec![job("a"), job("b")];
    for j in &mut jobs {
        j.priority = 5;
    }
    jobs.push(urgent);
    s.enqueue(&topic, &jobs, T0).await.unwrap();
    assert_eq!(ready_held(&s).await, 3);
    let t = topic.clone();
    let undone: StoreResult<()> = s
        .writer
        .exec(move |cx| {
            let got = ops::reserve(cx, &t, 1, Some(1000), T0)?;
            assert_eq!(got.leases[0].id.as_str(), "c", "priority 0 first");
            ops::enqueue(cx, &t, &[job("d")], T0)?;
            ops::cancel(cx, &t, &JobId::new("a").unwrap(), T0)?;
            ops::reschedule(cx, &t, &JobId::new("b").unwrap(), T0 + 60_000, false, T0)?;
            assert_eq!(cx.mem.ready.len(), 1);
            Err(Failure(StoreError::Unavailable(
                "the test's failure".into(),
            )))
        })
        .await;
    assert!(undone.is_err());
    assert_eq!(ready_held(&s).await, 3);
    drop(s);
    // The writer lets go of the lock once its thread has closed the file.
    let mut reopened = None;
    for _ in 0..400 {
        match EmbeddedStore::open(dir.path()) {
            Ok(s) => {
                reopened = Some(s);
                break;
            }
            Err(OpenError::Locked { .. }) => {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await
            }
            Err(e) => panic!("{e}"),
        }
    }
    let s = reopened.expect("still locked after 2 s");
    assert_eq!(ready_held(&s).await, 3, "read back at open");
    let got = s.reserve(&topic, 10, Some(1000), T0).await.unwrap().leases;
    let ids: Vec<_> = got.iter().map(|l| l.id.as_str()).collect();
    assert_eq!(ids, ["c", "a", "b"]);
    assert_eq!(ready_held(&s).await, 0);
}

/// A reserve reads the rows of its jobs in one pass when their row
/// ids are close: a ready job between them that is not handed out
/// (a later priority) is read and left ready, and the jobs go out in
/// their order, not the rows'.
#[tokio::test]
async fn a_span_of_rows_hands_out_only_the_jobs_in_front() {
    let dir = tempfile::tempdir().unwrap();
    let s = EmbeddedStore::open(dir.path()).unwrap();
    let topic = Topic::new("span").unwrap();
    let jobs: Vec<NewJob> = [("w", 3), ("x", 1), ("y", 9), ("z", 0)]
        .map(|(id, p)| {
            let mut j = job(id);
            j.priority = p;
            j
        })
        .into();
    s.enqueue(&topic, &jobs, T0).await.unwrap();
    let got = s.reserve(&topic, 3, Some(1000), T0).await.unwrap().leases;
    let ids: Vec<_> = got.iter().map(|l| l.id.as_str()).collect();
    assert_eq!(ids, ["z", "x", "w"]);
    assert_eq!(ready_held(&s).await, 1);
    let rest = s.reserve(&topic, 3, Some(1000), T0).await.unwrap().leases;
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0].id.as_str(), "y");
}

/// Every move of a ready job with a flow-control key changes its lane
/// in memory (debug builds compare memory and file after each commit:
/// a move that forgot fails here): enqueue, cancel, reschedule both
/// ways, replace, list, reserve, release, and the topic's delete.
#[tokio::test]
async fn keyed_ready_jobs_follow_every_move() {
    let dir = tempfile::tempdir().unwrap();
    let s = EmbeddedStore::open(dir.path()).unwrap();
    let topic = Topic::new("keyed-moves").unwrap();
    let keyed = |id: &str, key: &str, priority: u32| {
        let mut j = job(id);
        j.key = Some(JobKey::new(key).unwrap());
        j.priority = priority;
        j
    };
    let id = |x: &str| JobId::new(x).unwrap();
    s.enqueue(
        &topic,
        &[
            keyed("a", "k1", 5),
            keyed("b", "k2", 5),
            keyed("c", "k1", 7),
            job("d"),
        ],
        T0,
    )
    .await
    .unwrap();
    s.cancel(&topic, &id("a"), T0).await.unwrap();
    s.reschedule(&topic, &id("b"), T0 + 60_000, false, T0)
        .await
        .unwrap();
    s.reschedule(&topic, &id("b"), T0, false, T0).await.unwrap();
    let mut again = keyed("c", "k3", 1);
    again.replace = true;
    s.enqueue(&topic, &[again], T0).await.unwrap();
    let listed: Vec<_> = s.list_ready(&topic, 0, 10).await.unwrap();
    let ids: Vec<_> = listed.iter().map(|j| j.id.as_str()).collect();
    assert_eq!(ids, ["d", "b", "c"], "unkeyed first, then by key");
    let st = s.stats(&topic, T0 + 5).await.unwrap();
    assert_eq!((st.ready, st.oldest_overdue_ms), (3, 5));
    let got = s.reserve(&topic, 10, Some(1000), T0).await.unwrap().leases;
    assert_eq!(got.len(), 3);
    let c = got.iter().find(|l| l.id.as_str() == "c").unwrap();
    s.release(&topic, &c.id, &c.token, 0, GiveBack::Released, T0)
        .await
        .unwrap();
    let c = s.reserve(&topic, 10, Some(1000), T0).await.unwrap().leases;
    assert_eq!(c.len(), 1);
    s.release(&topic, &c[0].id, &c[0].token, 0, GiveBack::Released, T0)
        .await
        .unwrap();
    assert_eq!(s.delete_topic(&topic, 100).await.unwrap(), (3, true));
    let none = s.reserve(&topic, 10, Some(1000), T0).await.unwrap();
    assert!(none.leases.is_empty());
}

/// A lease whose token names no row (as an older dq wrote them: the
/// call's prefix and a count) is still acked, and its entry goes.
#[tokio::test]
async fn a_token_without_its_row_id_is_acked_the_long_way() {
    let dir = tempfile::tempdir().unwrap();
    let s = EmbeddedStore::open(dir.path()).unwrap();
    let topic = Topic::new("old-token").unwrap();
    s.enqueue(&topic, &[job("x"), job("y")], T0).await.unwrap();
    let leases = s.reserve(&topic, 2, Some(1000), T0).await.unwrap().leases;
    assert_eq!(leases_held(&s).await, 2);
    let old = "00000000000000aa.7";
    s.writer
        .exec(move |cx| {
            cx.conn
                .execute("UPDATE jobs SET token = ?1 WHERE id = 'x'", [old])
                .map_err(Failure::from)?;
            Ok(())
        })
        .await
        .unwrap();
    let x = JobId::new("x").unwrap();
    assert!(matches!(
        s.ack(&topic, &x, &leases[0].token, T0).await,
        Err(StoreError::LeaseMismatch)
    ));
    s.ack(&topic, &x, old, T0).await.unwrap();
    assert_eq!(leases_held(&s).await, 1);
    s.ack(&topic, &leases[1].id, &leases[1].token, T0)
        .await
        .unwrap();
    assert_eq!(leases_held(&s).await, 0);
    let st = s.stats(&topic, T0).await.unwrap();
    assert_eq!((st.reserved, st.counters.acked), (0, 2));
}
