//! Dead letters: a nack that buries at once, replay and purge, and the
//! `dead_cap` that drops the oldest.

use dq_core::*;

use super::T0;
use super::support::{id, job, one, put, topic};

/// Replay makes dead letters due now with a fresh attempt count (an id
/// named twice, once); purge deletes them.
pub async fn replay_and_purge_dead(s: &dyn Store) {
    let t = topic("replay");
    for i in ["a", "b", "c"] {
        let mut j = job(i, When::DelayMs(0));
        j.max_attempts = Some(1);
        put(s, &t, j, T0).await;
    }
    for l in s.reserve(&t, 10, None, T0).await.unwrap().leases {
        assert_eq!(
            s.nack(&t, &l.id, Nack::retry(&l.token, "no"), T0 + 1)
                .await
                .unwrap(),
            NackOutcome::Dead { attempt: 1 }
        );
    }
    assert_eq!(
        s.replay_dead(&t, Some(&[id("b"), id("zz"), id("b")]), 100, T0 + 10)
            .await
            .unwrap(),
        1
    );
    let st = s.stats(&t, T0 + 10).await.unwrap();
    assert_eq!(
        (st.dead, st.ready, st.counters.replayed),
        (2, 1, 1),
        "moved and counted once"
    );
    let info = s.get(&t, &id("b")).await.unwrap().unwrap();
    assert_eq!(
        (info.state, info.attempts, info.due_at_ms),
        (JobState::Ready, 0, T0 + 10)
    );
    assert_eq!(info.died_at_ms, None);
    let l = s.reserve(&t, 10, None, T0 + 10).await.unwrap().leases;
    assert_eq!(l.len(), 1);
    assert_eq!((l[0].id.as_str(), l[0].attempt), ("b", 1));

    assert_eq!(
        s.replay_dead(&t, None, 1, T0 + 20).await.unwrap(),
        1,
        "capped batch"
    );
    assert_eq!(s.list_dead(&t, 0, 10).await.unwrap().len(), 1);
    assert_eq!(s.purge_dead(&t, 100).await.unwrap(), 1);
    assert!(s.list_dead(&t, 0, 10).await.unwrap().is_empty());
    assert!(
        s.get(&t, &id("c")).await.unwrap().is_none(),
        "purged letters are gone"
    );
    assert_eq!(s.stats(&t, T0).await.unwrap().counters.replayed, 2);
}

/// Beyond `dead_cap` the oldest dead letters are dropped and counted.
pub async fn nack_past_dead_cap_drops_oldest(s: &dyn Store) {
    let t = topic("cap");
    s.configure_topic(
        &t,
        &TopicConfigPatch {
            dead_cap: Some(2),
            max_attempts: Some(1),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    for (i, name) in ["d1", "d2", "d3"].iter().enumerate() {
        put(s, &t, job(name, When::DelayMs(0)), T0).await;
        let l = one(s, &t, None, T0).await;
        s.nack(&t, &l.id, Nack::retry(&l.token, "x"), T0 + i as u64)
            .await
            .unwrap();
    }
    let dead: Vec<String> = s
        .list_dead(&t, 0, 10)
        .await
        .unwrap()
        .iter()
        .map(|j| j.id.to_string())
        .collect();
    assert_eq!(dead, vec!["d2", "d3"]);
    assert!(s.get(&t, &id("d1")).await.unwrap().is_none());
    let st = s.stats(&t, T0).await.unwrap();
    assert_eq!((st.dead, st.counters.dead_dropped), (2, 1));
}

/// Bury sends a held job to the dead letters at once, whatever attempts are
/// left; only the holder may do it.
pub async fn nack_dead_goes_dead_at_once(s: &dyn Store) {
    let t = topic("bury");
    put(s, &t, job("j", When::DelayMs(0)), T0).await;
    let l = one(s, &t, None, T0).await;
    assert!(matches!(
        s.nack(&t, &id("j"), Nack::dead("stale", "x"), T0).await,
        Err(StoreError::LeaseMismatch)
    ));
    s.nack(
        &t,
        &id("j"),
        Nack::dead(&l.token, "unknown event \"x\""),
        T0 + 5,
    )
    .await
    .unwrap();
    let info = s.get(&t, &id("j")).await.unwrap().unwrap();
    assert_eq!((info.state, info.attempts), (JobState::Dead, 1));
    assert_eq!(info.died_at_ms, Some(T0 + 5));
    assert_eq!(info.last_error.as_deref(), Some("unknown event \"x\""));
    let st = s.stats(&t, T0).await.unwrap();
    assert_eq!((st.dead, st.reserved, st.counters.dead), (1, 0, 1));
    assert!(matches!(
        s.nack(&t, &id("j"), Nack::dead(&l.token, "again"), T0)
            .await,
        Err(StoreError::NotInState(JobState::Dead))
    ));
}
