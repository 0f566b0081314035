//! The Store on a Redis Cluster (3 masters, 1 replica each, started by the
//! test kit): the whole conformance suite, each scenario under its own key
//! prefix so its topics hash to slots all over the cluster.

use dq_redis::{RedisConfig, RedisStore};
use dq_testkit::RedisCluster;

async fn on_cluster(cluster: &RedisCluster, scenario: &str) -> RedisStore {
    let store = RedisStore::new(&RedisConfig {
        cluster: cluster.urls(),
        prefix: format!("c-{scenario}"),
        clock: dq_redis::TimeSource::Caller,
        ..Default::default()
    })
    .unwrap();
    store.load_scripts().await.unwrap();
    store
}

dq_testkit::conformance_tests!(in_one conformance_on_a_cluster, RedisCluster::start(3, 1), on_cluster);

/// Outside the macro (it takes the forward sink too): through the sink
/// `dq serve` gives over the cluster (as one shard).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ack_and_write_elsewhere_does_nothing_on_a_cluster() {
    let cluster = RedisCluster::start(3, 1);
    let store = on_cluster(&cluster, "forward").await;
    let store = std::sync::Arc::new(dq_redis::ShardedStore::new(vec![("cluster".into(), store)]));
    let sink = dq_redis::RedisSink::over(store.clone());
    dq_testkit::conformance::ack_and_write_elsewhere_does_nothing(&*store, &sink).await;
}

/// A master is killed under load: its replica takes over and service comes
/// back by itself; every enqueue acknowledged with `wait_replicas = 1` is
/// still there afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_under_load_loses_no_acknowledged_enqueue() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};

    use dq_core::{Body, JobId, NewJob, Store, Topic, When};

    let mut cluster = RedisCluster::start(3, 1);
    let config = |wait_replicas| RedisConfig {
        cluster: cluster.urls(),
        wait_replicas,
        wait_timeout: Duration::from_millis(300),
        response_timeout: Duration::from_millis(500),
        connect_timeout: Duration::from_millis(300),
        clock: dq_redis::TimeSource::Caller,
        ..Default::default()
    };
    let durable = Arc::new(RedisStore::new(&config(1)).unwrap());
    let plain = RedisStore::new(&config(0)).unwrap();
    let t = Topic::new("orders").unwrap();
    let job = |id: String| {
        NewJob::new(
            JobId::new(id).unwrap(),
            Body::Json("{}".into()),
            When::DelayMs(60_000),
        )
    };
    let now = 1_700_000_000_000;

    let acked = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let failed = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let producer = {
        let (durable, acked, failed, stop, t) = (
            durable.clone(),
            acked.clone(),
            failed.clone(),
            stop.clone(),
            t.clone(),
        );
        tokio::spawn(async move {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let id = format!("j{i}");
                i += 1;
                match durable.enqueue(&t, &[job(id.clone())], now).await {
                    Ok(_) => acked.lock().unwrap().push(id),
                    Err(_) => {
                        failed.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            }
        })
    };
    let count = |a: &Arc<std::sync::Mutex<Vec<String>>>| a.lock().unwrap().len();
    let deadline = Instant::now() + Duration::from_secs(20);
    while count(&acked) < 300 {
        assert!(Instant::now() < deadline, "no load");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // Kill the master of the topic's slot.
    let victim = cluster.master_of("dq:{orders}:sched");
    cluster.nodes[victim].stop();
    let killed_at = Instant::now();

    // Service comes back by itself once the replica is promoted.
    let mut k = 0;
    loop {
        k += 1;
        if plain
            .enqueue(&t, &[job(format!("p{k}"))], now)
            .await
            .is_ok()
        {
            break;
        }
        assert!(killed_at.elapsed() < Duration::from_secs(20), "no failover");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let resumed = killed_at.elapsed();
    // Every node learns of the new master (gossip may lag a little).
    while cluster.master_of("dq:{orders}:sched") == victim {
        assert!(
            killed_at.elapsed() < Duration::from_secs(20),
            "no node saw a failover"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The new master has no replica yet: durable enqueues are refused, not
    // acknowledged. The old master comes back as its replica.
    let before = count(&acked);
    cluster.nodes[victim].restart();
    let deadline = Instant::now() + Duration::from_secs(30);
    while count(&acked) < before + 300 {
        assert!(Instant::now() < deadline, "durable enqueues did not resume");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::Relaxed);
    producer.await.unwrap();

    let ids = acked.lock().unwrap().clone();
    let mut missing = Vec::new();
    for id in &ids {
        if plain
            .get(&t, &JobId::new(id.clone()).unwrap())
            .await
            .unwrap()
            .is_none()
        {
            missing.push(id.clone());
        }
    }
    eprintln!(
        "acknowledged {} enqueues, {} refused during the failover; service back {:?} after the kill",
        ids.len(),
        failed.load(Ordering::Relaxed),
        resumed
    );
    assert!(
        missing.is_empty(),
        "lost acknowledged enqueues: {missing:?}"
    );
}

/// The slot of a busy topic moves to another master while producers and a
/// consumer work on it (clients meet ASK, TRYAGAIN and then MOVED): every
/// enqueue that succeeded is handed out exactly once, and afterwards the
/// topic is served from its new master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resharding_under_load_loses_nothing() {
    use std::collections::HashMap;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use dq_core::{Body, JobId, NewJob, Store, Topic, When};

    let cluster = RedisCluster::start(3, 0);
    let store = Arc::new(
        RedisStore::new(&RedisConfig {
            cluster: cluster.urls(),
            clock: dq_redis::TimeSource::Caller,
            ..Default::default()
        })
        .unwrap(),
    );
    let t = Topic::new("moving").unwrap();
    let now = 1_700_000_000_000u64;
    let stop = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let enqueued = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let got = Arc::new(std::sync::Mutex::new(HashMap::<String, u32>::new()));

    let producer = {
        let (store, t, stop, errors, enqueued) = (
            store.clone(),
            t.clone(),
            stop.clone(),
            errors.clone(),
            enqueued.clone(),
        );
        tokio::spawn(async move {
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let jobs: Vec<NewJob> = (0..20)
                    .map(|k| {
                        NewJob::new(
                            JobId::new(format!("m{i}-{k}")).unwrap(),
                            Body::Json("{}".into()),
                            When::DelayMs(0),
                        )
                    })
                    .collect();
                i += 1;
                match store.enqueue(&t, &jobs, now).await {
                    Ok(r) => enqueued
                        .lock()
                        .unwrap()
                        .extend(r.into_iter().map(|e| e.id.to_string())),
                    Err(e) => errors.lock().unwrap().push(format!("enqueue: {e}")),
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };
    let consumer = {
        let (store, t, stop, errors, got) = (
            store.clone(),
            t.clone(),
            stop.clone(),
            errors.clone(),
            got.clone(),
        );
        tokio::spawn(async move {
            loop {
                let done = stop.load(Ordering::Relaxed);
                match store.reserve(&t, 50, Some(600_000), now + 1).await {
                    Ok(c) => {
                        if c.leases.is_empty() && done {
                            return;
                        }
                        for l in c.leases {
                            *got.lock().unwrap().entry(l.id.to_string()).or_default() += 1;
                            if let Err(e) = store.ack(&t, &l.id, &l.token, 0).await {
                                errors.lock().unwrap().push(format!("ack: {e}"));
                            }
                        }
                    }
                    Err(e) => errors.lock().unwrap().push(format!("reserve: {e}")),
                }
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let slot = cluster.slot_of("dq:{moving}:sched");
    let from = cluster.master_of_slot(slot);
    let to = (from + 1) % 3;
    tokio::task::block_in_place(|| cluster.migrate_slot(slot, to, 1, Duration::from_millis(100)));
    assert_eq!(cluster.master_of_slot(slot), to);
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    producer.await.unwrap();
    consumer.await.unwrap();

    let enqueued = enqueued.lock().unwrap().clone();
    let got = got.lock().unwrap().clone();
    let errors = errors.lock().unwrap().clone();
    eprintln!(
        "{} enqueued, {} handed out, {} errors during the move: {:?}",
        enqueued.len(),
        got.len(),
        errors.len(),
        errors.iter().take(3).collect::<Vec<_>>()
    );
    assert!(enqueued.len() > 500, "load ran through the move");
    assert!(got.values().all(|n| *n == 1), "no job handed out twice");
    for id in &enqueued {
        assert!(
            got.contains_key(id),
            "{id} was enqueued but never handed out"
        );
    }
    let s = store.stats(&t, now + 2).await.unwrap();
    assert_eq!((s.ready, s.reserved), (0, 0));
    assert!(
        errors.is_empty(),
        "the client rode through the move: {errors:?}"
    );
}
