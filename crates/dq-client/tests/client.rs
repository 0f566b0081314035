//! The client against a real server: every call, and typed errors.

mod support;

use std::time::Duration;

use dq_client::*;
use serde_json::json;
use support::TestServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_and_typed_errors() {
    let srv = TestServer::start().await;
    let c = srv.client();
    let e = c
        .enqueue(
            "orders",
            &NewJob::json(json!({"order": 1}))
                .id("o1")
                .delay(Duration::from_secs(60)),
        )
        .await
        .unwrap();
    assert!(e.created);
    assert_eq!(e.state, Some(JobState::Scheduled));
    let again = c
        .enqueue("orders", &NewJob::json(json!({})).id("o1"))
        .await
        .unwrap();
    assert!(!again.created, "idempotent");
    let job = c.get("orders", "o1").await.unwrap();
    assert_eq!(
        (job.state, job.json::<serde_json::Value>().ok()),
        (JobState::Scheduled, Some(json!({"order": 1})))
    );
    // A due time in the past is now: the reply says the time stored.
    let before = dq_core::Clock::now_ms(&dq_core::SystemClock);
    let due = c.reschedule("orders", "o1", 1).await.unwrap();
    assert!(due >= before && due < before + 60_000, "{due} vs {before}");

    let batch = c
        .enqueue_batch(
            "orders",
            &[
                NewJob::bytes([0u8, 255]).id("b1"),
                NewJob::json(1).id("bad id"),
            ],
        )
        .await
        .unwrap();
    assert!(batch[0].as_ref().unwrap().created);
    assert!(matches!(&batch[1], Err(Error::Invalid { code, .. }) if code == "invalid_id"));

    let leased = c
        .reserve(
            &Reserve::new(["orders"])
                .max(10)
                .lease(Duration::from_secs(30)),
        )
        .await
        .unwrap();
    assert_eq!(leased.len(), 2);
    let o1 = leased.iter().find(|l| l.id == "o1").unwrap();
    let b1 = leased.iter().find(|l| l.id == "b1").unwrap();
    assert_eq!(b1.bytes().unwrap(), vec![0, 255]);
    assert_eq!(o1.json::<serde_json::Value>().unwrap(), json!({"order": 1}));
    assert!(
        c.touch("orders", "o1", &o1.token, Some(Duration::from_secs(60)))
            .await
            .unwrap()
            > 0
    );
    assert!(matches!(
        c.ack("orders", "o1", "stale").await,
        Err(Error::LeaseMismatch(_))
    ));
    c.ack("orders", "o1", &o1.token).await.unwrap();
    assert!(matches!(
        c.get("orders", "o1").await,
        Err(Error::NotFound { code, .. }) if code == "job_not_found"
    ));
    let r = c
        .ack_batch(&[Ack {
            topic: "orders".into(),
            id: "o1".into(),
            token: o1.token.clone(),
        }])
        .await
        .unwrap();
    assert!(matches!(&r[0], Err(Error::NotFound { .. })));

    let due = c
        .release("orders", "b1", &b1.token, Duration::from_secs(3600))
        .await
        .unwrap();
    assert!(due > 0);
    assert_eq!(
        c.get("orders", "b1").await.unwrap().attempts,
        0,
        "release does not count"
    );
    c.reschedule("orders", "b1", 0).await.unwrap();
    let l = c
        .reserve(&Reserve::new(["orders"]))
        .await
        .unwrap()
        .remove(0);
    let n = c
        .nack("orders", "b1", &l.token, "boom", Some(Duration::ZERO))
        .await
        .unwrap();
    assert_eq!(n.state, JobState::Scheduled);
    let l = c
        .reserve(&Reserve::new(["orders"]))
        .await
        .unwrap()
        .remove(0);
    c.nack_dead("orders", "b1", &l.token, "permanent")
        .await
        .unwrap();
    let dead = c.list_dead("orders", 0, 10).await.unwrap();
    assert_eq!(
        (dead[0].id.as_str(), dead[0].last_error.as_deref()),
        ("b1", Some("permanent"))
    );
    assert_eq!(c.replay_dead("orders", Some(&["b1"])).await.unwrap(), 1);
    let l = c
        .reserve(&Reserve::new(["orders"]))
        .await
        .unwrap()
        .remove(0);
    let touch = |token: &str| TouchItem {
        topic: "orders".into(),
        id: "b1".into(),
        token: token.into(),
        lease_ms: Some(60_000),
    };
    let r = c
        .touch_batch(&[touch(&l.token), touch("stale")])
        .await
        .unwrap();
    assert!(matches!(r[0], Ok(d) if d > l.lease_deadline_ms), "{r:?}");
    assert!(matches!(&r[1], Err(Error::LeaseMismatch(_))), "{r:?}");
    let nack = |token: &str| NackItem {
        topic: "orders".into(),
        id: "b1".into(),
        token: token.into(),
        error: Some("later".into()),
        retry_in_ms: Some(0),
        dead: false,
        priority: None,
    };
    let r = c
        .nack_batch(&[nack(&l.token), nack(&l.token)])
        .await
        .unwrap();
    let n = r[0].as_ref().unwrap();
    assert_eq!((n.id.as_str(), n.state), ("b1", JobState::Scheduled));
    assert!(matches!(&r[1], Err(Error::LeaseMismatch(_))), "{r:?}");
    assert_eq!(c.cancel("orders", "b1").await.unwrap(), JobState::Ready);

    let cfg = c
        .configure_topic(
            "orders",
            &TopicConfigPatch {
                max_attempts: Some(3),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(cfg.max_attempts, 3);
    assert!(matches!(
        c.configure_topic("orders", &TopicConfigPatch { lease_ms: Some(1), ..Default::default() }).await,
        Err(Error::Invalid { code, .. }) if code == "invalid_lease"
    ));
    let t = c.topic("orders").await.unwrap();
    assert_eq!(t.stats.counters.acked, 1);
    assert_eq!(c.topics().await.unwrap().len(), 1);
    assert_eq!(c.purge_dead("orders").await.unwrap(), 0);
    c.delete_topic("orders").await.unwrap();
    assert!(matches!(
        c.topic("orders").await,
        Err(Error::NotFound { .. })
    ));
    srv.stop().await;

    // A server that is gone: a transport error, transient.
    let err = c.get("orders", "x").await.unwrap_err();
    assert!(matches!(err, Error::Transport(_)), "{err:?}");
    assert!(err.is_transient());
}
