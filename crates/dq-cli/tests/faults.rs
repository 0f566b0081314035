//! The fault suite: faults injected into the real `dq serve` binary, each
//! checked against the guarantee docs/reliability.md states for it.
//!
//! - fsync errors (strace injects EIO into every fsync and fdatasync of a
//!   running embedded store): never a 2xx for a write that was not synced;
//!   after recovery the API and the file agree.
//! - a full disk (a small tmpfs): only enqueues are refused; acks, cancels,
//!   reserves, dead-letter purges and topic deletes drain it; enqueues resume
//!   when space is freed, and when the drained jobs' room allows (no file
//!   deleted); a store started on a nearly full disk drains too.
//! - kill -9 of `dq serve` in a loop under load, on the embedded store and on
//!   Redis (AOF always); Redis itself killed and restarted under load. A
//!   checker counts every job: lost, unexpected, duplicated, early.
//! - the PostgreSQL store: kill -9 of `dq serve` under load; PostgreSQL
//!   stopped at once (`pg_ctl stop -m immediate`) and restarted under load
//!   (503 with `Retry-After` while down, the same process serves again); a
//!   statement stuck on a lock (`statement_timeout`: 503, its connection
//!   freed); the pool exhausted by slow clients (acks and the dispatcher
//!   still go through).
//!
//! By default each runs for seconds (CI). `DQ_FAULTS_LONG=1` runs the load
//! scenarios for minutes and prints the counts reliability.md reports:
//! `DQ_FAULTS_LONG=1 cargo test -p dq-cli --test faults -- --nocapture --test-threads 1`.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dq_testkit::redis::RedisServer;
use serde_json::{Value, json};
use support::load::{check, crash_loop};
use support::{Dq, KillOnDrop};

fn long() -> bool {
    std::env::var("DQ_FAULTS_LONG").is_ok_and(|v| v == "1")
}

// ---------------------------------------------------------------- fsync errors

/// Whether every thread of `pid` is traced (`traced`) or none is.
fn all_traced(pid: u32, traced: bool) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().all(|t| {
        let status = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
        let tracer = status
            .lines()
            .find_map(|l| l.strip_prefix("TracerPid:"))
            .map(|v| v.trim() != "0")
            .unwrap_or(false);
        tracer == traced
    })
}

async fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// GET of each id: present or not.
async fn presence(dq: &Dq, topic: &str, ids: &[String]) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    for id in ids {
        let (s, v) = dq.get(&format!("/v1/topics/{topic}/jobs/{id}")).await;
        assert!(s == 200 || s == 404, "GET {id}: {s} {v}");
        out.push((id.clone(), s == 200));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fsync_errors_never_get_a_2xx_and_after_recovery_the_api_and_the_file_agree() {
    support::ensure_package("/usr/bin/strace", &["strace"]);
    let dir = tempfile::tempdir().unwrap();
    let mut dq = Dq::start_embedded(dir.path()).await;
    let (s, v) = dq
        .post("/v1/topics/fs/jobs", json!({"id": "before", "body": 1}))
        .await;
    assert_eq!(s, 201, "{v}");
    // A job to lease while fsync fails (topic `fsl`).
    let (s, v) = dq
        .post("/v1/topics/fsl/jobs", json!({"id": "x", "body": 1}))
        .await;
    assert_eq!(s, 201, "{v}");

    let pid = dq.pid();
    let mut strace = Command::new("strace")
        .args(["-f", "-qq", "-p", &pid.to_string()])
        .args(["-e", "trace=fsync,fdatasync"])
        .args(["-e", "inject=fsync:error=EIO"])
        .args(["-e", "inject=fdatasync:error=EIO"])
        .args(["-o", "/dev/null"])
        .stdin(Stdio::null())
        .spawn()
        .expect("spawn strace");
    let strace_pid = strace.id();
    let _reap = KillOnDrop(strace_pid);
    wait_for("strace to attach", Duration::from_secs(10), || {
        all_traced(pid, true)
    })
    .await;

    // Every write while fsync fails: 503 store_outcome_unknown, never 2xx.
    let mut ids = vec!["before".to_string()];
    for round in 0..4 {
        let calls = (0..5).map(|i| {
            let id = format!("f{round}-{i}");
            ids.push(id.clone());
            let dq = &dq;
            async move {
                dq.post("/v1/topics/fs/jobs", json!({"id": id, "body": {"n": i}}))
                    .await
            }
        });
        for (s, v) in futures::future::join_all(calls).await {
            assert_eq!(s, 503, "a write that was not synced must not succeed: {v}");
            assert_eq!(v["error"]["code"], "store_outcome_unknown", "{v}");
        }
    }
    let (s, v) = dq.delete("/v1/topics/fs/jobs/before").await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (503, Some("store_outcome_unknown")),
        "{v}"
    );
    // A lease made while fsync fails: unknown whether the file kept it.
    let (s, v) = dq
        .post(
            "/v1/reserve",
            json!({"topics": ["fsl"], "max": 1, "lease_ms": 1000}),
        )
        .await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (503, Some("store_outcome_unknown")),
        "{v}"
    );
    let (s, v) = dq.get("/readyz").await;
    assert_eq!(s, 503, "not ready while writes cannot be synced: {v}");
    assert_eq!(v["error"]["code"], "store_outcome_unknown", "{v}");

    // The disk heals: strace detaches (SIGTERM) and the store is ready again.
    assert!(
        Command::new("kill")
            .args(["-TERM", &strace_pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
    let _ = strace.wait();
    wait_for("strace to detach", Duration::from_secs(10), || {
        all_traced(pid, false)
    })
    .await;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (s, _) = dq.get("/readyz").await;
        if s == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "ready again once fsync works");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let seen = presence(&dq, "fs", &ids).await;
    let (s, v) = dq
        .post("/v1/topics/fs/jobs", json!({"id": "after", "body": 2}))
        .await;
    assert_eq!(s, 201, "{v}");
    // The job leased while fsync failed is handed out again: at once if the
    // file did not keep the lease, at the lease's end if it did (the store
    // read its leases afresh from the file when it reopened it).
    let (s, v) = dq
        .post(
            "/v1/reserve",
            json!({"topics": ["fsl"], "max": 1, "wait_ms": 10_000, "lease_ms": 60_000}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["jobs"][0]["id"], "x", "{v}");

    // What the API showed is what the file holds.
    dq.restart().await;
    assert_eq!(presence(&dq, "fs", &ids).await, seen);
    assert!(presence(&dq, "fs", &["after".into()]).await[0].1);
}

// ------------------------------------------------------------------ full disk

/// A tmpfs of `mib` MiB mounted on a temp directory, unmounted when dropped.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(mib: u32) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "this test mounts a small tmpfs: run it as root");
        Self { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

fn write_file(path: &Path, bytes: usize) {
    std::fs::write(path, vec![7u8; bytes]).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_only_enqueues_and_can_be_drained() {
    const RESERVE: u64 = 4 << 20;
    let fs = Tmpfs::mount(32);
    let filler = fs.path().join("filler");
    write_file(&filler, 10 << 20);
    let data: PathBuf = fs.path().join("data");
    let reserve = data.join(dq_embedded::space::RESERVE_FILE);
    let mut dq = Dq::start_with(&[
        "--data-dir",
        data.to_str().unwrap(),
        "--disk-reserve-bytes",
        &RESERVE.to_string(),
    ])
    .await;
    assert_eq!(std::fs::metadata(&reserve).unwrap().len(), RESERVE);

    // Before the disk fills: jobs to take and ack, dead letters, a topic to delete.
    for i in 0..10 {
        let (s, v) = dq
            .post(
                "/v1/topics/work/jobs",
                json!({"id": format!("w{i}"), "body": i}),
            )
            .await;
        assert_eq!(s, 201, "{v}");
    }
    let (s, v, _) = dq
        .call(
            reqwest::Method::PUT,
            "/v1/topics/fragile",
            Some(json!({"max_attempts": 1})),
        )
        .await;
    assert!(s == 200 || s == 201, "{v}");
    for i in 0..5 {
        let (s, _) = dq
            .post(
                "/v1/topics/fragile/jobs",
                json!({"id": format!("d{i}"), "body": i}),
            )
            .await;
        assert_eq!(s, 201);
    }
    let (_, got) = dq
        .post("/v1/reserve", json!({"topics": ["fragile"], "max": 5}))
        .await;
    for j in got["jobs"].as_array().unwrap() {
        let (s, v) = dq
            .post(
                &format!("/v1/topics/fragile/jobs/{}/nack", j["id"].as_str().unwrap()),
                json!({"token": j["token"], "error": "boom"}),
            )
            .await;
        assert_eq!((s, v["state"].as_str()), (200, Some("dead")), "{v}");
    }
    let big = "x".repeat(60_000);
    let batch = |topic: &str, from: usize| {
        let jobs: Vec<Value> = (from..from + 10)
            .map(|i| json!({"id": format!("{topic}{i}"), "body": big, "delay_ms": 3_600_000}))
            .collect();
        json!({ "jobs": jobs })
    };
    for from in (0..30).step_by(10) {
        let (s, v) = dq
            .post("/v1/topics/other/jobs:batch", batch("o", from))
            .await;
        assert_eq!(s, 200, "{v}");
    }

    // Fill the disk with enqueues until they are refused twice in a row
    // (after a refusal the write-ahead log is truncated, which may give
    // room back).
    let mut stored = 0;
    let mut refused = 0;
    while refused < 2 {
        let (s, v) = dq
            .post("/v1/topics/fill/jobs:batch", batch("j", stored))
            .await;
        if s == 503 {
            assert_eq!(v["error"]["code"], "store_full", "{v}");
            refused += 1;
            continue;
        }
        assert_eq!(s, 200, "{v}");
        refused = 0;
        stored += 10;
        assert!(stored < 1000, "the disk never filled");
    }
    assert!(stored > 0);
    assert!(!reserve.exists(), "the reserve is released for draining");
    let (s, v) = dq
        .post("/v1/topics/fill/jobs", json!({"id": "small", "body": 1}))
        .await;
    assert_eq!((s, v["error"]["code"].as_str()), (503, Some("store_full")));

    // Everything that frees space works on the full disk.
    for i in 0..30 {
        let (s, v) = dq.delete(&format!("/v1/topics/fill/jobs/j{i}")).await;
        assert_eq!(s, 200, "cancel on a full disk: {v}");
    }
    let (s, got) = dq
        .post("/v1/reserve", json!({"topics": ["work"], "max": 10}))
        .await;
    assert_eq!(s, 200, "reserve on a full disk: {got}");
    let leased = got["jobs"].as_array().unwrap();
    assert_eq!(leased.len(), 10);
    for j in leased {
        let (s, v) = dq.ack("work", j).await;
        assert_eq!(s, 200, "ack on a full disk: {v}");
    }
    let (s, v) = dq.delete("/v1/topics/fragile/dead").await;
    assert_eq!(s, 200, "dead-letter purge on a full disk: {v}");
    assert_eq!(v["purged"], 5, "{v}");
    let (s, v) = dq.delete("/v1/topics/other").await;
    assert_eq!(s, 200, "topic delete on a full disk: {v}");

    // Space freed on the disk: the reserve comes back, enqueues are admitted.
    std::fs::remove_file(&filler).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (s, v) = dq
            .post("/v1/topics/fill/jobs", json!({"id": "small", "body": 1}))
            .await;
        if s == 201 {
            break;
        }
        assert_eq!(v["error"]["code"], "store_full", "{v}");
        assert!(
            Instant::now() < deadline,
            "enqueues resume once space is freed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    wait_for(
        "the reserve to be re-created",
        Duration::from_secs(5),
        || std::fs::metadata(&reserve).is_ok_and(|m| m.len() == RESERVE),
    )
    .await;

    // Nothing acknowledged was lost on the way.
    dq.restart().await;
    let (_, v) = dq.get("/v1/topics/fill").await;
    assert_eq!(
        v["stats"]["scheduled"].as_u64(),
        Some(stored as u64 - 30),
        "{v}"
    );
    assert_eq!(v["stats"]["ready"].as_u64(), Some(1), "{v}");
}

/// Bytes the file system at `path` lets an unprivileged writer use.
fn disk_free(path: &Path) -> u64 {
    let out = Command::new("stat")
        .args(["-f", "-c", "%a %S"])
        .arg(path)
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let mut n = text.split_whitespace().map(|w| w.parse::<u64>().unwrap());
    n.next().unwrap() * n.next().unwrap()
}

/// Enqueues 20 KB jobs `<prefix><n>` to `topic`, one a call, due in an
/// hour, until one is refused with 503 `store_full`: how many were taken.
async fn fill_with_20kb_jobs(dq: &Dq, topic: &str, prefix: &str) -> usize {
    let body = "x".repeat(20_000);
    for n in 0..2000 {
        let (s, v) = dq
            .post(
                &format!("/v1/topics/{topic}/jobs"),
                json!({"id": format!("{prefix}{n}"), "body": body, "delay_ms": 3_600_000}),
            )
            .await;
        if s == 503 {
            assert_eq!(v["error"]["code"], "store_full", "{v}");
            return n;
        }
        assert_eq!(s, 201, "{v}");
    }
    panic!("the disk never filled");
}

/// Issue #53 item 4: a full disk drained through the API takes enqueues
/// again, without a restart and without the operator deleting other files;
/// and when it is full again it says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_drained_through_the_api_admits_enqueues_again() {
    let fs = Tmpfs::mount(8);
    let other = fs.path().join("other");
    write_file(&other, 2 << 20);
    let data: PathBuf = fs.path().join("data");
    let mut dq = Dq::start_with(&[
        "--data-dir",
        data.to_str().unwrap(),
        "--disk-reserve-bytes",
        "1048576",
    ])
    .await;

    let stored = fill_with_20kb_jobs(&dq, "t", "j").await;
    assert!(stored >= 20, "only {stored} jobs of 20 KB on the disk");
    for i in 0..stored {
        let (s, v) = dq.delete(&format!("/v1/topics/t/jobs/j{i}")).await;
        assert_eq!(s, 200, "cancel on a full disk: {v}");
    }

    // The room the cancelled jobs held takes enqueues again; the other
    // file is still there.
    let body = "x".repeat(20_000);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (s, v) = dq
            .post(
                "/v1/topics/t/jobs",
                json!({"id": "after", "body": body, "delay_ms": 3_600_000}),
            )
            .await;
        if s == 201 {
            break;
        }
        assert_eq!((s, v["error"]["code"].as_str()), (503, Some("store_full")));
        assert!(
            Instant::now() < deadline,
            "a drained store still refuses enqueues: {v}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(other.exists());

    // Full again: refused again, and the drains still work.
    let more = fill_with_20kb_jobs(&dq, "t", "k").await;
    let (s, v) = dq.delete("/v1/topics/t/jobs/k0").await;
    assert_eq!(s, 200, "cancel on the disk full again: {v}");

    // Every job acknowledged since the drain is kept.
    dq.restart().await;
    let (_, v) = dq.get("/v1/topics/t").await;
    assert_eq!(v["stats"]["scheduled"].as_u64(), Some(more as u64), "{v}");
}

/// A store that starts on a disk with less free than half its reserve
/// (another program filled it while dq was stopped) releases the reserve
/// and can be drained: its write-ahead log is checkpointed after each write
/// while the reserve is released, so the drains do not grow it (SQLite's
/// own checkpoint waits for 4 MiB of log, four times this reserve).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_started_on_a_nearly_full_disk_can_be_drained() {
    let fs = Tmpfs::mount(8);
    write_file(&fs.path().join("other"), 2 << 20);
    let data: PathBuf = fs.path().join("data");
    let mut dq = Dq::start_with(&[
        "--data-dir",
        data.to_str().unwrap(),
        "--disk-reserve-bytes",
        "1048576",
    ])
    .await;
    let body = "x".repeat(20_000);
    for i in 0..60 {
        let (s, v) = dq
            .post(
                "/v1/topics/t/jobs",
                json!({"id": format!("j{i}"), "body": body, "delay_ms": 3_600_000}),
            )
            .await;
        assert_eq!(s, 201, "{v}");
    }
    dq.sigterm();
    let _ = dq.child.wait();
    let free = disk_free(fs.path());
    assert!(free > 400_000, "{free} bytes free");
    write_file(&fs.path().join("later"), (free - 400_000) as usize);

    dq.restart().await;
    for i in 0..60 {
        let (s, v) = dq.delete(&format!("/v1/topics/t/jobs/j{i}")).await;
        assert_eq!(s, 200, "cancel {i} on a nearly full disk: {v}");
    }
    let more = fill_with_20kb_jobs(&dq, "t", "k").await;
    assert!(more > 0, "the drained jobs' room takes enqueues");
}

// ------------------------------------------------- crashes under load, checked

fn load_times() -> (Duration, Duration) {
    if long() {
        (Duration::from_secs(180), Duration::from_secs(7))
    } else {
        (Duration::from_secs(8), Duration::from_millis(2500))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_under_load_loses_nothing_on_the_embedded_store() {
    let dir = tempfile::tempdir().unwrap();
    let dq = Arc::new(tokio::sync::Mutex::new(
        Dq::start_embedded(dir.path()).await,
    ));
    let base = dq.lock().await.base.clone();
    let (run, every) = load_times();
    let (counts, faults) = crash_loop(&base, run, every, || {
        let dq = dq.clone();
        async move { dq.lock().await.restart().await }
    })
    .await;
    check("kill -9 of dq serve, embedded", &counts, faults, run);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_under_load_loses_nothing_on_redis() {
    let redis = RedisServer::start_durable();
    let dq = Arc::new(tokio::sync::Mutex::new(Dq::start(&redis.url()).await));
    let base = dq.lock().await.base.clone();
    let (run, every) = load_times();
    let (counts, faults) = crash_loop(&base, run, every, || {
        let dq = dq.clone();
        async move { dq.lock().await.restart().await }
    })
    .await;
    check(
        "kill -9 of dq serve, Redis (AOF always)",
        &counts,
        faults,
        run,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_and_restarted_under_load_loses_nothing() {
    let redis = Arc::new(Mutex::new(RedisServer::start_durable()));
    let url = redis.lock().unwrap().url();
    let dq = Dq::start(&url).await;
    let (run, every) = load_times();
    let (counts, faults) = crash_loop(&dq.base, run, every, || {
        let redis = redis.clone();
        async move {
            // `restart` stops it with SIGKILL and starts it on the same files.
            tokio::task::spawn_blocking(move || redis.lock().unwrap().restart())
                .await
                .unwrap();
        }
    })
    .await;
    check("kill -9 of Redis (AOF always)", &counts, faults, run);
}

// ----------------------------------------- the shard of partition 0 killed

/// Which shard `dq serve --redis-shards` puts a partition on (the same
/// hash the binary uses; nothing is connected).
fn shard_of(servers: &[RedisServer], part: &dq_core::Topic) -> usize {
    let shards = servers
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let config = dq_redis::RedisConfig {
                url: s.url(),
                ..Default::default()
            };
            (
                format!("shard {i}"),
                dq_redis::RedisStore::new(&config).unwrap(),
            )
        })
        .collect();
    dq_redis::ShardedStore::new(shards).shard_of_partition(part)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shard_of_partition_zero_killed_delays_only_its_own_jobs() {
    let mut servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start_durable()).collect();
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let args = [
        "--redis-shards",
        &urls.join(","),
        "--redis-timeout",
        "500ms",
    ];
    let warm = Dq::start_with(&args).await;
    // Partitions 0 and 1 on different shards (partition 1 keeps the second
    // copy of the topic's settings).
    let name = (0..)
        .map(|i| format!("orders-{i}"))
        .find(|n| {
            let t = dq_core::Topic::new(n.clone()).unwrap();
            shard_of(&servers, &t.partition(0)) != shard_of(&servers, &t.partition(1))
        })
        .unwrap();
    let topic = dq_core::Topic::new(name.clone()).unwrap();
    let zero = shard_of(&servers, &topic.partition(0));
    let (s, v, _) = warm
        .call(
            reqwest::Method::PUT,
            &format!("/v1/topics/{name}"),
            Some(json!({"partitions": 12})),
        )
        .await;
    assert!(s == 200 || s == 201, "{v}");
    let jobs: Vec<Value> = (0..300).map(|i| json!({"body": i})).collect();
    let (s, v) = warm
        .post(
            &format!("/v1/topics/{name}/jobs:batch"),
            json!({"jobs": jobs}),
        )
        .await;
    assert_eq!(s, 200, "{v}");

    servers[zero].stop();
    // An instance that was running, and one started while the shard is down.
    let cold = Dq::start_with(&args).await;
    let mut accepted = 300;
    for (who, dq) in [("warm", &warm), ("cold", &cold)] {
        let started = Instant::now();
        let mut ok = 0;
        for i in 0..75 {
            let (s, v) = dq
                .post(&format!("/v1/topics/{name}/jobs"), json!({"body": i}))
                .await;
            assert!(s == 201 || s == 503, "{who}: {v}");
            ok += usize::from(s == 201);
        }
        eprintln!(
            "faults: shard of partition 0 down, {who}: {ok} of 75 generated-id enqueues accepted in {:?}",
            started.elapsed()
        );
        assert!(
            ok >= 70,
            "{who}: generated ids go to live shards: {ok} of 75"
        );
        accepted += ok;
        let (s, v) = dq
            .post(
                "/v1/reserve",
                json!({"topics": [name], "max": 10, "lease_ms": 600000}),
            )
            .await;
        assert_eq!(s, 200, "{who}: {v}");
        let got = v["jobs"].as_array().unwrap();
        assert!(!got.is_empty(), "{who}: live partitions hand out");
        for j in got {
            let (s, v) = dq.ack(&name, j).await;
            assert_eq!(s, 200, "{who}: {v}");
            accepted -= 1;
        }
        let (s, v) = dq.get(&format!("/v1/topics/{name}")).await;
        assert_eq!(s, 200, "{who}: {v}");
        assert_eq!(v["stats"]["partial"], true, "{who}: {v}");
        let missing = v["stats"]["missing"].as_array().unwrap();
        assert_eq!(missing.len(), 1, "{who}: {v}");
        assert!(
            missing[0]
                .as_str()
                .unwrap()
                .starts_with(&format!("shard {zero} ")),
            "{who}: the shard down is named: {v}"
        );
    }

    // The shard comes back with its jobs: every accepted job is there.
    servers[zero].restart();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, v) = warm.get(&format!("/v1/topics/{name}")).await;
        if v["stats"].get("partial").is_none_or(|p| p == false) {
            assert_eq!(v["stats"]["ready"].as_u64(), Some(accepted as u64), "{v}");
            break;
        }
        assert!(Instant::now() < deadline, "the shard is seen back: {v}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// --------------------------------------------- bodies round-trip byte for byte

/// A random JSON value as text, written the way a careless or hostile client
/// might: numbers beyond f64 and u64, `-0`, exponents, escapes of every kind,
/// lone surrogates, odd whitespace, nesting up to `depth`.
fn json_text(rng: &mut impl rand::Rng, depth: usize) -> String {
    const ATOMS: &[&str] = &[
        "1e400",
        "-1E-400",
        "18446744073709551617",
        "-0",
        "-0.0",
        "1E2",
        "0.1000000000000000055511151231257827",
        "123456789012345678901234567890",
        "true",
        "false",
        "null",
        r#""\ud800""#,
        r#""\udfff\ud800""#,
        r#""\u0041\/\b\f\n\r\t\"\\""#,
        r#""é😀\u00e9""#,
        r#""""#,
        r#""\u0000""#,
    ];
    let pick = rng.random_range(0..10);
    if depth == 0 || pick < 5 {
        return ATOMS[rng.random_range(0..ATOMS.len())].to_string();
    }
    let n = rng.random_range(0..4);
    let space = [" ", "", "\n\t", "  "][rng.random_range(0..4)];
    let items: Vec<String> = (0..n)
        .map(|i| {
            let v = json_text(rng, depth - 1);
            if pick < 8 {
                v
            } else {
                format!(r#""k{i}\u00e9"{space}:{space}{v}"#)
            }
        })
        .collect();
    let inner = items.join(&format!("{space},{space}"));
    if pick < 8 {
        format!("[{space}{inner}{space}]")
    } else {
        format!("{{{space}{inner}{space}}}")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_round_trip_byte_for_byte_through_the_binary_on_both_stores() {
    use rand::SeedableRng;
    let seed: u64 = std::env::var("DQ_FAULTS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("faults: bodies: seed {seed} (DQ_FAULTS_SEED={seed} repeats this run)");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let limit = dq_core::limits::MAX_JSON_DEPTH;
    let mut bodies: Vec<String> = (0..if long() { 2000 } else { 150 })
        .map(|_| json_text(&mut rng, 6))
        .collect();
    // At the documented depth limit exactly, and with the last byte a string's.
    bodies.push(format!("{}{}", "[".repeat(limit), "]".repeat(limit)));
    bodies.push(format!("{}\"]\"{}", "[".repeat(limit), "]".repeat(limit)));

    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start();
    let embedded = Dq::start_embedded(dir.path()).await;
    let on_redis = Dq::start(&redis.url()).await;
    for (store, dq) in [("embedded", &embedded), ("redis", &on_redis)] {
        for (i, body) in bodies.iter().enumerate() {
            let res = dq
                .http
                .post(format!("{}/v1/topics/bytes/jobs", dq.base))
                .header("content-type", "application/json")
                .body(format!(r#"{{"id":"b{i}","body":{body}}}"#))
                .send()
                .await
                .unwrap();
            let status = res.status().as_u16();
            let text = res.text().await.unwrap();
            assert_eq!(status, 201, "{store}: {body} refused: {text}");
            let got = dq.get_text(&format!("/v1/topics/bytes/jobs/b{i}")).await;
            assert!(
                got.contains(&format!(r#""body":{body}"#)),
                "{store}: {body} came back as {got} (seed {seed})"
            );
        }
        // Handed out as sent, too.
        let mut seen = 0;
        while seen < bodies.len() {
            let text = dq
                .http
                .post(format!("{}/v1/reserve", dq.base))
                .json(&json!({"topics": ["bytes"], "max": 1000}))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            // Not parsed: the test's own parser refuses lone surrogates.
            let n = text.matches(r#"{"topic":"bytes","id":"#).count();
            assert!(n > 0, "{store}: reserve gave {text}");
            seen += n;
            for (i, body) in bodies.iter().enumerate() {
                let marker = format!(r#""id":"b{i}""#);
                if let Some(at) = text.find(&marker) {
                    let rest = &text[at..];
                    let end = rest[1..]
                        .find(r#"{"topic":"bytes","id":"#)
                        .map_or(rest.len(), |e| e + 1);
                    assert!(
                        rest[..end].contains(&format!(r#""body":{body}"#)),
                        "{store} reserve: {body} changed (seed {seed})"
                    );
                }
            }
        }
    }
}

// ------------------------------------------------------ the PostgreSQL store

/// A 503 `store_unavailable` with `Retry-After`, as every call answers while
/// PostgreSQL is down or a statement hits `statement_timeout`.
fn assert_unavailable(what: &str, (s, v, retry_after): &(u16, Value, Option<String>)) {
    assert_eq!(
        (*s, v["error"]["code"].as_str()),
        (503, Some("store_unavailable")),
        "{what}: {v}"
    );
    assert_eq!(retry_after.as_deref(), Some("1"), "{what}: Retry-After");
}

/// Waits (up to `limit`) until `/readyz` answers 200.
async fn wait_ready_within(dq: &Dq, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        let (s, v) = dq.get("/readyz").await;
        if s == 200 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "ready again within {limit:?}: {s} {v}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_stopped_and_restarted_under_load_loses_nothing() {
    let pg = Arc::new(support::pg::OwnPg::start("faults"));
    let dq = Arc::new(Dq::start_with(&["--postgres", &pg.url()]).await);
    let (run, every) = load_times();
    let outages = Arc::new(Mutex::new(Vec::new()));
    // When each stop was over (the server gone).
    let stops = Arc::new(Mutex::new(Vec::new()));
    let (counts, faults) = crash_loop(&dq.base, run, every, || {
        let (pg, dq, outages, stops) = (pg.clone(), dq.clone(), outages.clone(), stops.clone());
        async move {
            pg.stop_immediate().await;
            stops.lock().unwrap().push(Instant::now());
            // While it is down: every call 503 with a code and Retry-After
            // (on a topic of their own, apart from the checked load).
            let probe = dq
                .call(
                    reqwest::Method::POST,
                    "/v1/topics/probe/jobs",
                    Some(json!({"body": 1})),
                )
                .await;
            assert_unavailable("enqueue while PostgreSQL is down", &probe);
            let probe = dq
                .call(
                    reqwest::Method::POST,
                    "/v1/reserve",
                    Some(json!({"topics": ["probe"], "max": 1})),
                )
                .await;
            assert_unavailable("reserve while PostgreSQL is down", &probe);
            let (s, v, retry_after) = dq.call(reqwest::Method::GET, "/readyz", None).await;
            assert_eq!((s, retry_after.as_deref()), (503, Some("1")), "{v}");
            assert_eq!(v["status"], "unavailable", "{v}");
            // Started again on the same port: the same dq process recovers.
            pg.start_again().await;
            let back = Instant::now();
            wait_ready_within(&dq, Duration::from_secs(20)).await;
            let (s, v) = dq.post("/v1/topics/probe/jobs", json!({"body": 2})).await;
            assert_eq!(s, 201, "enqueue after the restart: {v}");
            outages.lock().unwrap().push(back.elapsed());
        }
    })
    .await;
    eprintln!(
        "faults: PostgreSQL restarts: ready again after {:?}",
        outages.lock().unwrap()
    );
    // Acks commit with synchronous_commit = off (docs/postgres.md): an
    // immediate stop loses those whose commit record was still in
    // PostgreSQL's WAL buffers, written out within 3 × wal_writer_delay
    // (200 ms). Such a job is handed out again after its ack: allowed for
    // an ack answered at most 1 s before a stop, counted apart; any other
    // duplicate fails the test.
    let stops = stops.lock().unwrap().clone();
    let in_window = |ack: &Instant| {
        stops
            .iter()
            .any(|s| *ack <= *s && s.duration_since(*ack) <= Duration::from_secs(1))
    };
    let lazy: Vec<Duration> = counts
        .undone_acks
        .iter()
        .filter(|a| in_window(a))
        .map(|a| {
            stops
                .iter()
                .filter(|s| *a <= **s)
                .map(|s| s.duration_since(*a))
                .min()
                .unwrap()
        })
        .collect();
    eprintln!(
        "faults: PostgreSQL stopped (immediate): {} jobs handed out again after an ack answered in the last second before a stop (asynchronous commit), answered {lazy:?} before it",
        lazy.len()
    );
    let lazy = lazy.len();
    let mut rest = counts;
    rest.duplicated -= lazy;
    check(
        "PostgreSQL stopped (immediate) and restarted, apart from acks lost with the async commit window",
        &rest,
        faults,
        run,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_under_load_loses_nothing_on_postgres() {
    let url = dq_testkit::PgServer::shared().fresh_database("faults");
    let dq = Arc::new(tokio::sync::Mutex::new(
        Dq::start_with(&["--postgres", &url]).await,
    ));
    let base = dq.lock().await.base.clone();
    let (run, every) = load_times();
    let (counts, faults) = crash_loop(&base, run, every, || {
        let dq = dq.clone();
        async move { dq.lock().await.restart().await }
    })
    .await;
    check("kill -9 of dq serve, PostgreSQL", &counts, faults, run);
}

/// A session of the test's own holding a lock, ended (its backend
/// terminated, the lock released) when dropped.
struct LockHolder<'a> {
    pg: &'a dq_testkit::PgServer,
    db: String,
    psql: std::process::Child,
}

impl Drop for LockHolder<'_> {
    fn drop(&mut self) {
        // The backend would sleep on after its psql is killed.
        self.pg.psql(
            &self.db,
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = current_database() AND wait_event = 'PgSleep'",
        );
        let _ = self.psql.kill();
        let _ = self.psql.wait();
    }
}

/// A session of the test's own that holds the row of `topic` in dq's
/// `topics` table (every write of that topic locks it first) until dropped;
/// returns once the lock is taken.
async fn hold_topic_lock<'a>(
    pg: &'a dq_testkit::PgServer,
    db: &str,
    topic: &str,
) -> LockHolder<'a> {
    let mut psql = pg.psql_spawn(
        db,
        &format!(
            "BEGIN; SELECT 1 FROM dq.topics WHERE name = '{topic}' FOR UPDATE; SELECT pg_sleep(120); COMMIT"
        ),
    );
    // In pg_sleep: the row lock before it is held.
    let deadline = Instant::now() + Duration::from_secs(20);
    let sql = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event = 'PgSleep'";
    while pg.psql(db, sql).trim() != "1" {
        if Instant::now() > deadline {
            let _ = psql.kill();
            let _ = psql.wait();
            panic!("the lock holder did not start");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    LockHolder {
        pg,
        db: db.to_string(),
        psql,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_stuck_behind_a_lock_times_out_with_503_and_frees_its_connection() {
    let pg = dq_testkit::PgServer::shared();
    let url = pg.fresh_database("faults");
    let db = url.rsplit('/').next().unwrap().to_string();
    let dq =
        Arc::new(Dq::start_with(&["--postgres", &url, "--postgres-statement-timeout", "1s"]).await);
    for topic in ["stuck", "free"] {
        let (s, v) = dq
            .post(
                &format!("/v1/topics/{topic}/jobs"),
                json!({"id": "a", "body": 1}),
            )
            .await;
        assert_eq!(s, 201, "{v}");
    }
    let holder = hold_topic_lock(pg, &db, "stuck").await;

    // More calls stuck behind the lock than the pool has connections (16):
    // each is cancelled by statement_timeout, answers 503, and gives its
    // connection back.
    let started = Instant::now();
    let stuck = (0..24).map(|i| {
        let dq = dq.clone();
        async move {
            let r = dq
                .call(
                    reqwest::Method::POST,
                    "/v1/topics/stuck/jobs",
                    Some(json!({"id": format!("s{i}"), "body": i})),
                )
                .await;
            (r, started.elapsed())
        }
    });
    let answers = futures::future::join_all(stuck).await;
    let slowest = answers.iter().map(|(_, t)| *t).max().unwrap();
    for (r, _) in &answers {
        assert_unavailable("an enqueue stuck behind the lock", r);
    }
    eprintln!(
        "faults: PostgreSQL statement_timeout 1s: 24 enqueues behind a lock all 503 after at most {slowest:?}"
    );
    // Bounded: a few rounds of the 1 s timeout over 16 connections, far from
    // the 120 s the lock is held.
    assert!(slowest < Duration::from_secs(30), "{slowest:?}");
    // Nothing of theirs was written; the pool is not wedged: other topics
    // work while the lock is still held, and so does /readyz.
    let (s, v) = dq.get("/readyz").await;
    assert_eq!(s, 200, "{v}");
    let (s, v) = dq
        .post("/v1/topics/free/jobs", json!({"id": "b", "body": 2}))
        .await;
    assert_eq!(s, 201, "{v}");
    let (s, v) = dq
        .post("/v1/reserve", json!({"topics": ["free"], "max": 2}))
        .await;
    assert_eq!(s, 200, "{v}");
    let jobs = v["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 2, "{v}");
    for j in jobs {
        let (s, v) = dq.ack("free", j).await;
        assert_eq!(s, 200, "{v}");
    }
    // The lock goes: the topic works again, and none of the refused jobs exist.
    drop(holder);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (s, v) = dq
            .post("/v1/topics/stuck/jobs", json!({"id": "after", "body": 3}))
            .await;
        if s == 201 {
            break;
        }
        assert!(Instant::now() < deadline, "the topic works again: {s} {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for i in 0..24 {
        let (s, v) = dq.get(&format!("/v1/topics/stuck/jobs/s{i}")).await;
        assert_eq!(s, 404, "a refused enqueue wrote nothing: {v}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_exhausting_the_pool_do_not_stall_acks_or_the_dispatcher() {
    let pg = dq_testkit::PgServer::shared();
    let url = pg.fresh_database("faults");
    let db = url.rsplit('/').next().unwrap().to_string();
    let dq =
        Arc::new(Dq::start_with(&["--postgres", &url, "--postgres-statement-timeout", "1s"]).await);
    let (s, v) = dq
        .post("/v1/topics/stuck/jobs", json!({"id": "a", "body": 1}))
        .await;
    assert_eq!(s, 201, "{v}");
    let _holder = hold_topic_lock(pg, &db, "stuck").await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut slow = Vec::new();
    // 100 long polls on an empty topic for the whole test...
    for _ in 0..100 {
        let dq = dq.clone();
        slow.push(tokio::spawn(async move {
            let (s, v) = dq
                .post(
                    "/v1/reserve",
                    json!({"topics": ["idle"], "wait_ms": 25_000, "max": 1}),
                )
                .await;
            assert!(s == 200 || s == 503, "{s} {v}");
        }));
    }
    // ...and 32 clients whose every write waits on the lock until
    // statement_timeout: together more than the pool's 16 connections.
    // Batches, each its own store call (single enqueues into one topic
    // would share calls: the service's combiner).
    for c in 0..32 {
        let (dq, stop) = (dq.clone(), stop.clone());
        slow.push(tokio::spawn(async move {
            let mut n = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                n += 1;
                let (s, v) = dq
                    .post(
                        "/v1/topics/stuck/jobs:batch",
                        json!({"jobs": [{"id": format!("c{c}-{n}"), "body": n}]}),
                    )
                    .await;
                assert_eq!(s, 503, "{v}");
            }
        }));
    }
    // Let the slow clients fill the pool.
    wait_for_stuck_statements(pg, &db, 16).await;

    // A delayed job becomes due and is handed out (the dispatcher and the
    // wake-ups still run), and its ack goes through, each within a bound
    // (the pool's queue in front of it is the stuck clients' 1 s
    // statements, 16 at a time).
    let bound = Duration::from_secs(15);
    let t = Instant::now();
    let (s, v) = dq
        .post(
            "/v1/topics/work/jobs",
            json!({"id": "w", "body": 1, "delay_ms": 500}),
        )
        .await;
    assert_eq!(s, 201, "enqueue while the pool is exhausted: {v}");
    let enqueued = t.elapsed();
    let t = Instant::now();
    let (s, v) = dq
        .post(
            "/v1/reserve",
            json!({"topics": ["work"], "wait_ms": 20_000, "max": 1, "lease_ms": 60_000}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["jobs"][0]["id"], "w", "handed out once due: {v}");
    let handed = t.elapsed();
    let t = Instant::now();
    let (s, v) = dq.ack("work", &v["jobs"][0]).await;
    assert_eq!(s, 200, "ack while the pool is exhausted: {v}");
    let acked = t.elapsed();
    eprintln!(
        "faults: PostgreSQL pool exhausted (100 long polls, 32 clients stuck on a lock, statement_timeout 1s): enqueue {enqueued:?}, due job handed out after {handed:?}, ack {acked:?}"
    );
    for (what, took) in [("enqueue", enqueued), ("reserve", handed), ("ack", acked)] {
        assert!(took < bound, "{what} took {took:?}");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in slow {
        t.abort();
    }
}

/// Waits until `n` statements of dq's pool wait on a lock in `db`.
async fn wait_for_stuck_statements(pg: &dq_testkit::PgServer, db: &str, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let sql = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND application_name = 'dq'";
    loop {
        let stuck: usize = pg.psql(db, sql).trim().parse().unwrap();
        if stuck >= n {
            return;
        }
        assert!(Instant::now() < deadline, "{stuck} of {n} statements stuck");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
