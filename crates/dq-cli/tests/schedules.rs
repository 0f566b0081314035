//! Schedules through the real binary: two `dq serve` on one Redis give
//! exactly one job per slot, none early; a kill -9 and 5 s of downtime give
//! what each `catch_up` says, with the schedules read from dq.toml again at
//! the restart (same settings: progress kept). The exact slot arithmetic
//! with a manual clock is in dq-server's `tests/schedules.rs`.

mod support;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use dq_testkit::{RedisServer, free_port};
use serde_json::{Value, json};
use support::*;

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// A job as a consumer saw it: its slot (from the id), due time, and when
/// the reserve returned it.
#[derive(Debug, Clone)]
struct Seen {
    slot: u64,
    due: u64,
    at: u64,
}

/// Reserves (long-polling) and acks every job of `topics` at `base` until
/// `until`; returns what came, per topic.
async fn consume(
    http: &reqwest::Client,
    base: &str,
    topics: &[&str],
    until: Instant,
    out: &mut BTreeMap<String, Vec<Seen>>,
) {
    let post = |path: String, body: Value| async move {
        let r = http
            .post(format!("{base}{path}"))
            .json(&body)
            .send()
            .await
            .unwrap();
        (
            r.status().as_u16(),
            r.json::<Value>().await.unwrap_or(Value::Null),
        )
    };
    while Instant::now() < until {
        let (s, v) = post(
            "/v1/reserve".into(),
            json!({"topics": topics, "max": 50, "wait_ms": 300}),
        )
        .await;
        assert_eq!(s, 200, "{v}");
        let at = now_ms();
        for j in v["jobs"].as_array().unwrap() {
            let topic = j["topic"].as_str().unwrap().to_string();
            let id = j["id"].as_str().unwrap();
            let slot: u64 = id.rsplit_once('@').unwrap().1.parse().unwrap();
            out.entry(topic.clone()).or_default().push(Seen {
                slot,
                due: j["due_at_ms"].as_u64().unwrap(),
                at,
            });
            let (s, v) = post(
                format!("/v1/topics/{topic}/jobs/{id}/ack"),
                json!({"token": j["token"]}),
            )
            .await;
            assert_eq!(s, 200, "{v}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_on_one_redis_give_one_job_per_slot_none_early() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let redis = RedisServer::start();
    let a = Dq::start(&redis.url()).await;
    let b = Dq::start(&redis.url()).await;
    let (s, v) = a
        .call(
            reqwest::Method::PUT,
            "/v1/schedules/beat",
            Some(
                json!({"topic": "beats", "every": "1s", "catch_up": "all", "body": {"beat": true}}),
            ),
        )
        .await
        .into_parts();
    assert_eq!(s, 201, "{v}");
    let started = now_ms();
    let until = Instant::now() + Duration::from_secs(10);
    let mut seen = BTreeMap::new();
    let mut seen_b = BTreeMap::new();
    // Consumers on both instances at once.
    tokio::join!(
        consume(&a.http, &a.base, &["beats"], until, &mut seen),
        consume(&b.http, &b.base, &["beats"], until, &mut seen_b)
    );
    let (s, _) = b.delete("/v1/schedules/beat").await;
    assert_eq!(s, 200);
    let mut all: Vec<Seen> = seen
        .remove("beats")
        .unwrap_or_default()
        .into_iter()
        .chain(seen_b.remove("beats").unwrap_or_default())
        .collect();
    all.sort_by_key(|s| s.slot);
    for s in &all {
        assert!(s.at >= s.slot, "early: {s:?}");
        assert!(s.due >= s.slot, "due before its slot: {s:?}");
    }
    let slots: Vec<u64> = all.iter().map(|s| s.slot).collect();
    let mut unique = slots.clone();
    unique.dedup();
    assert_eq!(unique, slots, "a slot twice");
    let first = slots[0];
    assert!(
        first > started && first <= started + 1_000,
        "first slot {first}, created {started}"
    );
    let want: Vec<u64> = (0..slots.len() as u64).map(|k| first + k * 1000).collect();
    assert_eq!(slots, want, "every slot once, none missing");
    assert!(slots.len() >= 9, "10 s of a 1 s schedule: {}", slots.len());
}

trait IntoParts {
    fn into_parts(self) -> (u16, Value);
}

impl IntoParts for (u16, Value, Option<String>) {
    fn into_parts(self) -> (u16, Value) {
        (self.0, self.1)
    }
}

/// A `dq serve` killed (-9) and reaped when dropped.
struct Serve(std::process::Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `dq serve` on `data_dir` with the config file `config`, on `port`.
fn spawn(port: u16, data_dir: &std::path::Path, config: &std::path::Path) -> Serve {
    let child = Command::new(env!("CARGO_BIN_EXE_dq"))
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--data-dir", data_dir.to_str().unwrap()])
        .args(["--config", config.to_str().unwrap(), "--log-level", "warn"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn dq");
    Serve(child)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_after_downtime_catches_up_as_configured() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("dq.toml");
    let mut toml = String::new();
    for mode in ["skip", "one", "all"] {
        toml.push_str(&format!(
            "[schedules.{mode}]\ntopic = \"{mode}\"\nevery = \"1s\"\ncatch_up = \"{mode}\"\n\n"
        ));
    }
    std::fs::write(&config, toml).unwrap();
    let data = dir.path().join("data");
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    let topics = ["skip", "one", "all"];
    let dq = spawn(port, &data, &config);
    wait_ready(&http, &base).await;
    let mut seen = BTreeMap::new();
    let soon = |ms| Instant::now() + Duration::from_millis(ms);
    consume(&http, &base, &topics, soon(2_500), &mut seen).await;
    // kill -9, 5 s down, the same dq.toml again.
    let killed = now_ms();
    drop(dq);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let back = now_ms();
    let _dq = spawn(port, &data, &config);
    wait_ready(&http, &base).await;
    consume(&http, &base, &topics, soon(3_000), &mut seen).await;
    for mode in topics {
        let got = &seen[mode];
        let slots: Vec<u64> = got.iter().map(|s| s.slot).collect();
        let mut sorted = slots.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), slots.len(), "{mode}: a slot twice: {slots:?}");
        for s in got {
            assert!(s.at >= s.slot, "{mode}: early: {s:?}");
        }
        // Slots that passed while dq was down (enqueued ahead before the
        // kill, at most 2 s): what catch_up did with them shows as jobs
        // due later than their slot.
        // (A job enqueued a few ms after its slot because the pass was
        // slow is not a catch-up: those are due 0.5 s after it or later.)
        let late: Vec<&Seen> = got.iter().filter(|s| s.due >= s.slot + 500).collect();
        let gap: Vec<u64> = (sorted[0]..=*sorted.last().unwrap())
            .step_by(1000)
            .filter(|s| !sorted.contains(s))
            .collect();
        let down = |s: u64| s > killed && s < back;
        match mode {
            "skip" => {
                assert!(late.is_empty(), "skip fires nothing late: {late:?}");
                assert!(
                    gap.len() >= 2 && gap.iter().all(|s| down(*s)),
                    "skip: {gap:?}"
                );
            }
            "one" => {
                assert_eq!(late.len(), 1, "one job for the missed slots: {late:?}");
                assert!(down(late[0].slot), "{late:?}");
                assert!(
                    !gap.is_empty() && gap.iter().all(|s| *s < late[0].slot),
                    "one: {gap:?}"
                );
            }
            _ => {
                assert!(gap.is_empty(), "all: every slot: {gap:?}");
                assert!(
                    late.len() >= 2 && late.iter().all(|s| down(s.slot)),
                    "all: {late:?}"
                );
            }
        }
    }
}
