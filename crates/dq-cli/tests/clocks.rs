//! One time source: `dq serve` instances whose clocks disagree, and an
//! embedded store whose process clock steps, never hand a job out early, cut
//! a lease short, or shorten a retry wait. The clocks are faked with
//! libfaketime (Debian package `faketime`, installed by `.ci/run` or here),
//! the real clock only: monotonic time is left alone
//! (`FAKETIME_DONT_FAKE_MONOTONIC=1`), as an NTP step leaves it.

mod support;

use std::time::{Duration, Instant};

use dq_testkit::RedisServer;
use dq_testkit::cluster::RedisCluster;
use serde_json::{Value, json};
use support::Dq;

/// libfaketime's preload library, installed if missing.
fn faketime_lib() -> String {
    support::ensure_package("/usr/bin/faketime", &["faketime"]);
    let lib = std::fs::read_dir("/usr/lib")
        .unwrap()
        .flatten()
        .map(|d| d.path().join("faketime/libfaketime.so.1"))
        .find(|p| p.exists())
        .expect("libfaketime.so.1 under /usr/lib/<arch>/faketime");
    lib.to_str().unwrap().to_string()
}

/// Reserves one job of `topic` through `dq`, waiting for it.
async fn reserve_one(dq: &Dq, topic: &str, lease_ms: u64) -> (Value, Instant) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (s, v) = dq
            .post(
                "/v1/reserve",
                json!({"topics": [topic], "max": 1, "wait_ms": 200, "lease_ms": lease_ms}),
            )
            .await;
        assert_eq!(s, 200, "{v}");
        if let Some(j) = v["jobs"].as_array().and_then(|a| a.first()) {
            return (j.clone(), Instant::now());
        }
        assert!(Instant::now() < deadline, "nothing handed out on {topic}");
    }
}

fn at_least(what: &str, got: Duration, min_ms: u64, slack_ms: u64) {
    assert!(
        got >= Duration::from_millis(min_ms),
        "{what}: after {got:?}, before its {min_ms} ms"
    );
    assert!(
        got <= Duration::from_millis(min_ms + slack_ms),
        "{what}: after {got:?}, more than {slack_ms} ms past its {min_ms} ms"
    );
}

fn refs(e: &[(String, String)]) -> Vec<(&str, &str)> {
    e.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

/// Two instances on one store, one with its clock 30 s ahead and one 30 s
/// behind: due times, leases and retry waits hold by the real clock.
async fn clocks_a_minute_apart(store_args: &[&str]) {
    let lib = faketime_lib();
    let fake = |offset: &str| -> Vec<(String, String)> {
        [
            ("LD_PRELOAD", lib.as_str()),
            ("FAKETIME", offset),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    };
    let mut args = store_args.to_vec();
    // Leases taken through the other instance are noticed within 100 ms.
    args.extend(["--dispatcher-max-sleep", "100ms"]);
    let (env_a, env_b) = (fake("+30s"), fake("-30s"));
    let ahead = Dq::start_env(&refs(&env_a), &args).await;
    let behind = Dq::start_env(&refs(&env_b), &args).await;

    // The clocks really differ, and each instance reports its offset.
    for (who, dq, want) in [("ahead", &ahead, -30_000i64), ("behind", &behind, 30_000)] {
        let (s, v) = dq.get("/readyz").await;
        assert_eq!(s, 200, "{v}");
        let off = v["clock_offset_ms"].as_i64().unwrap();
        assert!((off - want).abs() < 1000, "{who}: clock_offset_ms {off}");
        let metrics = dq.get_text("/metrics").await;
        let gauge: f64 = metrics
            .lines()
            .find_map(|l| l.strip_prefix("dq_clock_offset_seconds "))
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            (gauge * 1000.0 - want as f64).abs() < 1000.0,
            "{who}: {gauge}"
        );
    }

    // Never early: enqueued through one, handed out through the other.
    for (name, from, to) in [("a", &ahead, &behind), ("b", &behind, &ahead)] {
        let sent = Instant::now();
        let (s, v) = from
            .post(
                "/v1/topics/skew/jobs",
                json!({"id": name, "body": 1, "delay_ms": 1500}),
            )
            .await;
        assert_eq!(s, 201, "{v}");
        let (job, at) = reserve_one(to, "skew", 60_000).await;
        assert_eq!(job["id"], name);
        at_least(&format!("job {name}"), at - sent, 1500, 500);
        let (s, v) = to.ack("skew", &job).await;
        assert_eq!(s, 200, "{v}");
    }

    // A lease taken through the clock ahead lasts its length, watched
    // through the clock behind.
    let (s, _) = behind
        .post("/v1/topics/lease/jobs", json!({"id": "l", "body": 1}))
        .await;
    assert_eq!(s, 201);
    let sent = Instant::now();
    let (job, _) = reserve_one(&ahead, "lease", 1500).await;
    assert_eq!(job["id"], "l");
    let deadline = Instant::now() + Duration::from_secs(5);
    let expired = loop {
        let (_, v) = behind.get("/v1/topics/lease/jobs/l").await;
        if v["state"] != "reserved" {
            break sent.elapsed();
        }
        assert!(Instant::now() < deadline, "the lease never expired: {v}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    at_least("the lease", expired, 1500, 150);

    // A retry wait asked through the clock behind, handed out through the
    // clock ahead: exactly its length.
    let (s, _) = ahead
        .post("/v1/topics/retry/jobs", json!({"id": "r", "body": 1}))
        .await;
    assert_eq!(s, 201);
    let (job, _) = reserve_one(&ahead, "retry", 60_000).await;
    let sent = Instant::now();
    let (s, v) = behind
        .post(
            "/v1/topics/retry/jobs/r/nack",
            json!({"token": job["token"], "retry_in_ms": 1000}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let (job, at) = reserve_one(&ahead, "retry", 60_000).await;
    assert_eq!(job["attempt"], 2);
    at_least("the retry", at - sent, 1000, 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_on_one_redis_with_clocks_a_minute_apart() {
    let redis = RedisServer::start();
    clocks_a_minute_apart(&["--redis", &redis.url()]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_on_a_cluster_with_clocks_a_minute_apart() {
    let cluster = RedisCluster::start(3, 0);
    let urls = cluster.urls().join(",");
    clocks_a_minute_apart(&["--redis-cluster", &urls]).await;
}

/// The embedded store's process clock steps an hour forward and back under
/// load: nothing early, no lease cut short (no job handed out twice), and
/// the step is reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embedded_store_whose_clock_steps_an_hour_keeps_its_times() {
    let lib = faketime_lib();
    let dir = tempfile::tempdir().unwrap();
    let step_file = dir.path().join("faketime");
    std::fs::write(&step_file, "+0\n").unwrap();
    let data = dir.path().join("data");
    let dq = Dq::start_env(
        &[
            ("LD_PRELOAD", &lib),
            ("FAKETIME_TIMESTAMP_FILE", step_file.to_str().unwrap()),
            ("FAKETIME_NO_CACHE", "1"),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1"),
        ],
        &["--data-dir", data.to_str().unwrap()],
    )
    .await;

    // A lease held across the steps keeps its length.
    let (s, _) = dq
        .post("/v1/topics/held/jobs", json!({"id": "h", "body": 1}))
        .await;
    assert_eq!(s, 201);
    let (held, _) = reserve_one(&dq, "held", 20_000).await;

    let steps = ["+1h", "-1h", "+0"];
    let mut next = 0;
    let (counts, faults) = support::load::crash_loop(
        &dq.base,
        Duration::from_secs(3),
        Duration::from_millis(900),
        || {
            std::fs::write(&step_file, format!("{}\n", steps[next % steps.len()])).unwrap();
            next += 1;
            async {}
        },
    )
    .await;
    support::load::check(
        "the embedded store's clock stepping ±1 h",
        &counts,
        faults,
        Duration::from_secs(3),
    );
    assert_eq!(
        counts.redelivered_after_crash, 0,
        "a lease was cut short: {counts:?}"
    );

    // The held lease was not cut short by the forward step.
    let (_, v) = dq.get("/v1/topics/held/jobs/h").await;
    assert_eq!(v["state"], "reserved", "{v}");
    let (s, v) = dq.ack("held", &held).await;
    assert_eq!(s, 200, "{v}");

    // An hour ahead on the host's clock: dq keeps its own time, and says so.
    std::fs::write(&step_file, "+1h\n").unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let (_, v) = dq.get("/readyz").await;
    let off = v["clock_offset_ms"].as_i64().unwrap();
    assert!((off + 3_600_000).abs() < 2000, "clock_offset_ms {off}");
}
