//! A topic's rate limit: exactly N per window, the burst, and one bucket
//! shared by every caller.

use dq_core::*;

use super::T0;
use super::support::{bucket, id, ids, ready_jobs, strict_topic, topic};

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
