//! The layout version key: written on a fresh Redis, accepted when it is
//! this dq's, a newer one refused naming both versions — on every shard.

use dq_redis::layout::{LAYOUT_VERSION, Layout, LayoutError};
use dq_redis::{RedisConfig, RedisStore, ShardedStore};
use dq_testkit::RedisServer;
use redis::Commands;

fn store(s: &RedisServer) -> RedisStore {
    RedisStore::new(&RedisConfig {
        url: s.url(),
        response_timeout: std::time::Duration::from_millis(500),
        connect_timeout: std::time::Duration::from_millis(200),
        ..Default::default()
    })
    .unwrap()
}

/// One store over `servers`, named `shard 0`, `shard 1`, ….
fn sharded(servers: &[RedisServer]) -> ShardedStore {
    ShardedStore::new(
        servers
            .iter()
            .enumerate()
            .map(|(i, s)| (format!("shard {i}"), store(s)))
            .collect(),
    )
}

#[tokio::test]
async fn the_version_is_written_once_and_a_newer_one_refused() {
    let server = RedisServer::start();
    let s = store(&server);
    assert_eq!(
        s.check_layout("r", false).await.unwrap(),
        Ok(Layout::Written)
    );
    let mut c = server.connection();
    let v: String = c.get("dq:layout").unwrap();
    assert_eq!(v, LAYOUT_VERSION.to_string());
    assert_eq!(
        s.check_layout("r", false).await.unwrap(),
        Ok(Layout::Current)
    );

    let newer = LAYOUT_VERSION + 1;
    let _: () = c.set("dq:layout", newer).unwrap();
    let err = s
        .check_layout("redis://x", false)
        .await
        .unwrap()
        .unwrap_err();
    assert!(matches!(err, LayoutError::Newer { found, .. } if found == newer));
    let msg = err.to_string();
    assert!(
        msg.starts_with(&format!("redis://x: key dq:layout says dq layout version {newer}, written by a newer dq; this dq uses layout version {LAYOUT_VERSION}")),
        "{msg}"
    );
    let v: String = c.get("dq:layout").unwrap();
    assert_eq!(v, newer.to_string(), "left as it was");

    let _: () = c.set("dq:layout", "not-a-number").unwrap();
    let err = s.check_layout("r", false).await.unwrap().unwrap_err();
    assert!(matches!(err, LayoutError::Foreign { .. }), "{err}");

    // Another prefix is another layout.
    let other = RedisStore::new(&RedisConfig {
        url: server.url(),
        prefix: "other".into(),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(
        other.check_layout("r", false).await.unwrap(),
        Ok(Layout::Written)
    );
}

#[tokio::test]
async fn every_shard_is_checked() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let all = sharded(&servers);
    let check = all.check_layout(false).await.unwrap();
    assert_eq!(check.checked.len(), 3);
    assert!(check.unreachable.is_empty());
    assert!(check.checked.iter().all(|(_, l)| *l == Layout::Written));
    for s in &servers {
        let v: String = s.connection().get("dq:layout").unwrap();
        assert_eq!(v, LAYOUT_VERSION.to_string());
    }

    // A newer layout on one shard refuses the whole store, naming it.
    let _: () = servers[2]
        .connection()
        .set("dq:layout", LAYOUT_VERSION + 1)
        .unwrap();
    let err = all.check_layout(false).await.unwrap_err();
    assert!(err.to_string().starts_with("shard 2: "), "{err}");

    // A shard that does not answer is reported, the others checked.
    let _: () = servers[2]
        .connection()
        .set("dq:layout", LAYOUT_VERSION)
        .unwrap();
    let mut servers = servers;
    servers[1].stop();
    let check = all.check_layout(false).await.unwrap();
    assert_eq!(check.checked.len(), 2);
    assert_eq!(check.unreachable.len(), 1);
    assert_eq!(check.unreachable[0].0, "shard 1");
}

#[tokio::test]
async fn layout_1_is_moved_on_only_when_told() {
    let server = RedisServer::start();
    let s = store(&server);
    let mut c = server.connection();
    let _: () = c.set("dq:layout", 1).unwrap();
    let err = s.check_layout("r", false).await.unwrap().unwrap_err();
    assert!(matches!(err, LayoutError::Older { found: 1, .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.starts_with("r: key dq:layout says dq layout version 1; this dq uses layout version 2")
            && msg.contains("start this one once with --upgrade-layout"),
        "{msg}"
    );
    let v: String = c.get("dq:layout").unwrap();
    assert_eq!(v, "1", "left as it was");

    assert_eq!(
        s.check_layout("r", true).await.unwrap(),
        Ok(Layout::Upgraded { from: 1 })
    );
    let v: String = c.get("dq:layout").unwrap();
    assert_eq!(v, LAYOUT_VERSION.to_string());
    // Done once: the next start (with the flag or without) finds it current.
    assert_eq!(
        s.check_layout("r", true).await.unwrap(),
        Ok(Layout::Current)
    );
    assert_eq!(
        s.check_layout("r", false).await.unwrap(),
        Ok(Layout::Current)
    );
}

#[tokio::test]
async fn a_redis_with_topics_and_no_version_is_layout_1() {
    // A dq from before the version key wrote topics and no key.
    let server = RedisServer::start();
    let mut c = server.connection();
    let _: () = c.sadd("dq:topics", "orders").unwrap();
    let s = store(&server);
    let err = s.check_layout("r", false).await.unwrap().unwrap_err();
    assert!(matches!(err, LayoutError::Older { found: 1, .. }), "{err}");
    let v: String = c.get("dq:layout").unwrap();
    assert_eq!(v, "1", "recorded as what it is");
    assert_eq!(
        s.check_layout("r", true).await.unwrap(),
        Ok(Layout::Upgraded { from: 1 })
    );
}

#[tokio::test]
async fn no_script_runs_before_the_layout_is_accepted() {
    use dq_core::{Body, NewJob, Store, Topic, When};
    let server = RedisServer::start();
    let s = store(&server);
    let t = Topic::new("gate").unwrap();
    let job = NewJob::with_generated_id(Body::Json("1".into()), When::DelayMs(0));
    s.hold_until_layout_checked();
    let patch = dq_core::TopicConfigPatch {
        max_attempts: Some(3),
        ..Default::default()
    };
    assert!(s.configure_topic(&t, &patch).await.is_err());
    let err = s
        .enqueue(&t, std::slice::from_ref(&job), 0)
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("its key layout is not checked yet"),
        "{err}"
    );
    let mut c = server.connection();
    let n: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(n, 0, "nothing written");
    // Refused layout: still held.
    let _: () = c.set("dq:layout", 1).unwrap();
    assert!(s.check_layout("r", false).await.unwrap().is_err());
    assert!(s.enqueue(&t, std::slice::from_ref(&job), 0).await.is_err());
    // Accepted: served.
    let _: () = c.set("dq:layout", LAYOUT_VERSION).unwrap();
    assert_eq!(
        s.check_layout("r", false).await.unwrap(),
        Ok(Layout::Current)
    );
    assert_eq!(s.enqueue(&t, &[job], 0).await.unwrap().len(), 1);
}

#[tokio::test]
async fn upgrade_is_refused_while_a_dq_was_seen_on_any_shard() {
    let servers: Vec<RedisServer> = (0..2).map(|_| RedisServer::start()).collect();
    let all = sharded(&servers);
    // Shard 1 is of layout 1; a dq's heartbeat is on shard 0, by its clock.
    let _: () = servers[1].connection().set("dq:layout", 1).unwrap();
    let (secs, _): (u64, u64) = redis::cmd("TIME")
        .query(&mut servers[0].connection())
        .unwrap();
    let _: () = servers[0]
        .connection()
        .zadd("dq:dispatchers", "old-dq", secs * 1000 - 10_000)
        .unwrap();
    let err = all.check_layout(true).await.unwrap_err();
    assert!(
        matches!(&err, LayoutError::InstancesAlive { store, instances, .. }
            if store == "shard 1" && instances == &["old-dq".to_string()]),
        "{err}"
    );
    let v: String = servers[1].connection().get("dq:layout").unwrap();
    assert_eq!(v, "1", "left as it was");
    // Last seen more than 30 s ago: gone.
    let _: () = servers[0]
        .connection()
        .zadd("dq:dispatchers", "old-dq", secs * 1000 - 31_000)
        .unwrap();
    let check = all.check_layout(true).await.unwrap();
    assert!(
        check
            .checked
            .contains(&("shard 1".to_string(), Layout::Upgraded { from: 1 })),
        "{:?}",
        check.checked
    );
    // A shard that does not answer: nothing is moved on, whatever the others.
    let _: () = servers[1].connection().set("dq:layout", 1).unwrap();
    let _: () = servers[0].connection().del("dq:dispatchers").unwrap();
    let mut servers = servers;
    servers[0].stop();
    let err = all.check_layout(true).await.unwrap_err();
    assert!(
        matches!(&err, LayoutError::Unverified { store } if store == "shard 0"),
        "{err}"
    );
    let v: String = servers[1].connection().get("dq:layout").unwrap();
    assert_eq!(v, "1", "left as it was");
    // Without the flag, an older layout is refused as before.
    let _: () = servers[1].connection().set("dq:layout", 1).unwrap();
    let err = all.check_layout(false).await.unwrap_err();
    assert!(matches!(err, LayoutError::Older { .. }), "{err}");
}

#[tokio::test]
async fn a_refused_start_writes_no_shard() {
    let servers: Vec<RedisServer> = (0..2).map(|_| RedisServer::start()).collect();
    let all = sharded(&servers);
    // Shard 0 is empty (it would get this dq's version), shard 1 refused.
    for (found, upgrade) in [(LAYOUT_VERSION + 1, false), (1, false)] {
        let _: () = servers[1].connection().set("dq:layout", found).unwrap();
        let err = all.check_layout(upgrade).await.unwrap_err();
        assert!(err.to_string().starts_with("shard 1: "), "{err}");
        let v: Option<String> = servers[0].connection().get("dq:layout").unwrap();
        assert_eq!(v, None, "shard 0 left as it was after: {err}");
    }
    // Accepted: both written.
    let _: () = servers[1]
        .connection()
        .set("dq:layout", LAYOUT_VERSION)
        .unwrap();
    let check = all.check_layout(false).await.unwrap();
    assert_eq!(check.checked.len(), 2);
    let v: String = servers[0].connection().get("dq:layout").unwrap();
    assert_eq!(v, LAYOUT_VERSION.to_string());
}
