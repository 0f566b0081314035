//! Dispatchers of several dq instances on one Redis share the topics: each
//! topic is handled by exactly one live dispatcher, and the topics of one
//! that stops pass to the others once it is no longer seen alive.

mod support;

use std::collections::HashSet;
use std::sync::Arc;

use dq_core::{Body, Clock, JobId, ManualClock, NewJob, Topic, When};
use dq_server::dispatcher::Dispatcher;
use dq_server::wakers::Wakers;

#[tokio::test]
async fn live_dispatchers_share_the_topics() {
    let (store, _redis) = support::sharded_redis_store();
    let clock = ManualClock::new(1_700_000_000_000);
    let topics: Vec<Topic> = (0..30)
        .map(|i| Topic::new(format!("t{i}")).unwrap())
        .collect();
    for t in &topics {
        let job = NewJob::new(
            JobId::new("j").unwrap(),
            Body::Json("1".into()),
            When::DelayMs(10),
        );
        store.enqueue(t, &[job], clock.now_ms()).await.unwrap();
    }
    let make = || {
        Dispatcher::new(
            store.clone(),
            Arc::new(clock.clone()),
            Arc::new(Wakers::default()),
            std::time::Duration::from_secs(1),
        )
    };
    let (a, b, c) = (make(), make(), make());
    // First passes register each; then each sees all three.
    for d in [&a, &b, &c] {
        d.tick_report().await.unwrap();
    }
    // Each reads the live members again after 500 ms.
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    clock.advance(600);
    let mut seen = Vec::new();
    for d in [&a, &b, &c] {
        let (_, visited) = d.tick_report().await.unwrap();
        assert!(
            !visited.is_empty() && visited.len() < 30,
            "{} handled {}",
            d.id,
            visited.len()
        );
        seen.extend(visited);
    }
    let unique: HashSet<&Topic> = seen.iter().collect();
    assert_eq!(seen.len(), 30, "each topic handled once");
    assert_eq!(unique.len(), 30, "every topic handled");
    // The promoted jobs are ready now (their due time passed).
    assert_eq!(
        store.stats(&topics[0], clock.now_ms()).await.unwrap().ready,
        1
    );

    // "c" stops; after the member TTL the other two handle everything.
    clock.advance(a.member_ttl().as_millis() as u64 + 1);
    for d in [&a, &b] {
        tokio::time::sleep(std::time::Duration::from_millis(600)).await;
        d.tick_report().await.unwrap();
    }
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    let mut seen = Vec::new();
    for d in [&a, &b] {
        seen.extend(d.tick_report().await.unwrap().1);
    }
    assert_eq!(seen.iter().collect::<HashSet<_>>().len(), 30);
    assert_eq!(seen.len(), 30);
}
