//! Wake-ups: `watch_wakes` announces every change that makes a topic's
//! next job due earlier than a waiter may think.

use dq_core::*;

use super::T0;
use super::support::{id, job, put, strict_topic, topic};

/// The store announces, through [`Store::watch_wakes`], every change that
/// makes a topic's next job due earlier than a waiter may think: a job
/// enqueued due now, rescheduled to now, released, retried, replayed, and a
/// pause ended. (Callers wake nobody themselves: this is the only source.)
pub async fn watch_wakes_announces_what_became_due(s: &dyn Store) {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = seen.clone();
    let on_wake: WakeFn = Arc::new(move |t: &str| log.lock().unwrap().push(t.to_string()));
    let waited = |t: &'static str| {
        let seen = seen.clone();
        async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
            loop {
                if seen.lock().unwrap().iter().any(|x| x == t) {
                    seen.lock().unwrap().clear();
                    return true;
                }
                if tokio::time::Instant::now() >= deadline {
                    return false;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    };
    let steps = async {
        let t = topic("wk");
        // Until the subscription stands (Redis subscribes on another
        // connection): enqueues due now, each announced once it does.
        let mut subscribed = false;
        for i in 0..40 {
            put(s, &t, job(&format!("probe{i}"), When::DelayMs(0)), T0).await;
            let deadline = tokio::time::Instant::now() + Duration::from_millis(100);
            while tokio::time::Instant::now() < deadline {
                if seen.lock().unwrap().iter().any(|x| x == "wk") {
                    subscribed = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            if subscribed {
                break;
            }
        }
        assert!(subscribed, "no wake-up for a job enqueued due now");
        s.purge_dead(&t, 100).await.unwrap();
        while !s
            .reserve(&t, 100, None, T0)
            .await
            .unwrap()
            .leases
            .is_empty()
        {}
        seen.lock().unwrap().clear();

        let later = topic("wk2");
        strict_topic(s, &later).await;
        put(s, &later, job("a", When::DelayMs(60_000)), T0).await;
        s.reschedule(&later, &id("a"), T0, false, T0).await.unwrap();
        assert!(waited("wk2").await, "reschedule to now");

        let c = s.reserve(&later, 1, None, T0).await.unwrap();
        s.release(
            &later,
            &id("a"),
            &c.leases[0].token,
            0,
            GiveBack::Released,
            T0,
        )
        .await
        .unwrap();
        assert!(waited("wk2").await, "release");

        let c = s.reserve(&later, 1, None, T0).await.unwrap();
        s.nack(
            &later,
            &id("a"),
            Nack::retry(&c.leases[0].token, "e").retry_in(0),
            T0,
        )
        .await
        .unwrap();
        assert!(waited("wk2").await, "retry due now");

        let c = s.reserve(&later, 1, None, T0).await.unwrap();
        s.nack(&later, &id("a"), Nack::dead(&c.leases[0].token, "e"), T0)
            .await
            .unwrap();
        seen.lock().unwrap().clear();
        assert_eq!(s.replay_dead(&later, None, 10, T0).await.unwrap(), 1);
        assert!(waited("wk2").await, "replay");

        s.pause_topic(&later, T0 + 60_000).await.unwrap();
        seen.lock().unwrap().clear();
        s.pause_topic(&later, 0).await.unwrap();
        assert!(waited("wk2").await, "pause ended");
    };
    tokio::select! {
        () = s.watch_wakes(on_wake) => panic!("watch_wakes returned"),
        () = steps => {}
    }
}
