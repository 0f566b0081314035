//! `import_jobs`: due times, attempts, overrides and dead letters kept,
//! idempotent by id, dedup windows and `dead_cap` respected.

use dq_core::*;

use super::T0;
use super::support::{id, ids, one, strict_topic, topic};

pub(super) fn import(i: &str, state: JobState, due: u64) -> ImportJob {
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
        errors: Vec::new(),
        created_at_ms: T0 - 1000,
        died_at_ms: None,
        key: None,
        trace: None,
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
    // An import carries no counts; its attempts were hand-outs.
    assert_eq!(
        own.info.counts,
        JobCounts {
            reserves: own.info.attempts,
            ..JobCounts::default()
        }
    );
    assert!(own.info.attempts > 0);
    assert_eq!(own.info.put_delay_ms, None, "an import is in due order");

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
