//! `dq bench` against a real `dq serve`: a scenario runs end to end, reports
//! every figure it promises and leaves nothing behind. Never checks speed.

mod support;

use std::process::Command;

use serde_json::Value;
use support::Dq;

/// Runs `dq bench --server <base> <args>`; its last line parsed as JSON.
async fn bench(base: &str, args: &[&str]) -> Value {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dq"));
    cmd.args(["bench", "--server", base]).args(args);
    let out = tokio::task::spawn_blocking(move || cmd.output())
        .await
        .unwrap()
        .expect("run dq bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "dq bench failed\nstdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let last = stdout.lines().last().expect("some output");
    serde_json::from_str(last).unwrap_or_else(|e| panic!("last line is not JSON ({e}): {last}"))
}

/// The number at `path` of a bench's JSON line.
fn number(v: &Value, path: &str) -> f64 {
    v.pointer(path)
        .and_then(Value::as_f64)
        .unwrap_or_else(|| panic!("no number at {path} in {v}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn bench_topics_reports_its_figures_and_deletes_its_topics() {
    let dir = tempfile::tempdir().unwrap();
    let dq = Dq::start_embedded(dir.path()).await;
    let v = bench(
        &dq.base,
        &[
            "topics",
            "--topics",
            "30",
            "--idle-secs",
            "1",
            "--watch",
            "30",
            "--rate",
            "50",
            "--duration",
            "1s",
            "--delay",
            "0s..500ms",
            "--iterations",
            "50",
        ],
    )
    .await;
    let num = |path: &str| number(&v, path);
    let text = |path: &str| {
        v.pointer(path)
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no text at {path} in {v}"))
            .to_string()
    };
    assert_eq!(v["scenario"], "topics");
    assert_eq!(num("/topics"), 30.0);
    // Creation and deletion: timed, nothing refused.
    for path in ["/create/seconds", "/create/topics_per_s", "/delete/seconds"] {
        num(path);
    }
    assert_eq!(num("/create/errors"), 0.0, "{v}");
    assert_eq!(num("/delete/errors"), 0.0, "{v}");
    // Idle CPU: dq found as the listener of its port, the embedded store
    // recognised as living inside it.
    assert_eq!(num("/idle/dq_pid"), f64::from(dq.pid()), "{v}");
    num("/idle/dq_cpu_pct");
    num("/idle/dq_cpu_pct_before");
    assert!(text("/idle/store").starts_with("embedded"), "{v}");
    assert!(v["idle"]["store_cpu_pct"].is_null(), "{v}");
    assert!(v["idle"]["store_cpu_pct_before"].is_null(), "{v}");
    // Listing: the 30 topics (the steady flow's topic comes later).
    num("/list/all_ms");
    assert_eq!(num("/list/all_topics"), 30.0, "{v}");
    text("/list/paging");
    // Reserve latency: every timed reserve handed out the job just enqueued.
    assert_eq!(num("/reserve/watched"), 30.0, "{v}");
    for case in ["last", "middle", "one_topic"] {
        num(&format!("/reserve/{case}/p50_us"));
        num(&format!("/reserve/{case}/p99_us"));
        let timed = num(&format!("/reserve/{case}/timed"));
        let missed = num(&format!("/reserve/{case}/missed"));
        assert_eq!(timed + missed, 50.0, "{case}: {v}");
    }
    assert_eq!(num("/reserve/errors"), 0.0, "{v}");
    // The steady flow: every job once, none early.
    num("/steady/lateness/p99_ms");
    assert_eq!(num("/steady/jobs"), 50.0, "{v}");
    for k in ["lost", "duplicated", "early", "errors", "topics_left"] {
        assert_eq!(num(&format!("/{k}")), 0.0, "{k}: {v}");
    }
    // Nothing of the run is left on the server.
    let (status, list) = dq.get("/v1/topics").await;
    assert_eq!(status, 200);
    let left: Vec<&str> = list["topics"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .filter(|n| n.starts_with("bench-topics-"))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn bench_drain_also_measures_lateness_from_the_enqueue_ack() {
    let dir = tempfile::tempdir().unwrap();
    let dq = Dq::start_embedded(dir.path()).await;
    let v = bench(
        &dq.base,
        &[
            "drain",
            "--jobs",
            "2000",
            "--window",
            "0s..300ms",
            "--consumers",
            "2",
            "--check",
        ],
    )
    .await;
    let num = |path: &str| number(&v, path);
    assert_eq!(num("/lost"), 0.0);
    // Every job handed out was acked, each consumer waiting for its acks.
    assert_eq!(v["acks"], "inline", "{v}");
    assert_eq!(num("/acked"), 2000.0, "{v}");
    assert_eq!(num("/ack_errors"), 0.0, "{v}");
    // Measured from a later moment (the due time, or the enqueue's reply
    // if later): never more than the plain figure, quantile by quantile
    // (histogram precision: 3 significant digits).
    for q in ["p50_ms", "p99_ms", "max_ms"] {
        let plain = num(&format!("/lateness/{q}"));
        let from_ack = num(&format!("/lateness_from_enqueue_ack/{q}"));
        assert!(
            from_ack <= plain * 1.001 + 0.1,
            "{q}: {from_ack} from the ack > {plain} from the due time"
        );
    }
    // Each second of the window has its row, and the rows hold every job.
    let rows = v["lateness_by_due_second"].as_array().expect("rows");
    let seconds: Vec<u64> = rows.iter().map(|r| r[0].as_u64().unwrap()).collect();
    assert_eq!(seconds, [0], "a 0s..300ms window is second 0: {rows:?}");
    let jobs: u64 = rows.iter().map(|r| r[1].as_u64().unwrap()).sum();
    assert_eq!(jobs, 2000, "{rows:?}");
    assert!(rows[0][3].as_f64().unwrap() >= rows[0][2].as_f64().unwrap());
    // CPU per lifecycle: dq found by its port (the embedded store's CPU is
    // dq's), a real figure (2000 jobs cannot cost nothing).
    let cpu = &v["cpu_us_per_job"];
    assert!(cpu["dq"].as_f64().is_some_and(|us| us > 0.0), "{cpu}");
    assert_eq!(cpu["store"], serde_json::Value::Null, "{cpu}");
    assert!(
        cpu["measured"]["store"]
            .as_str()
            .unwrap()
            .starts_with("embedded"),
        "{cpu}"
    );
    // The writer's share of the run, from its counters in /metrics read at
    // the start and when the last job was handed out: busy some of the
    // time (at most all of it; rounding and the reads' own timing allow a
    // little over), committing part of that; each counter moved (2,000
    // jobs: 2 enqueues, 20+ reserves and acks).
    let w = &v["writer"];
    let busy = w["busy_share"].as_f64().expect("busy_share");
    let commit = w["commit_share"].as_f64().expect("commit_share");
    assert!(busy > 0.0 && busy <= 1.05, "{w}");
    assert!((0.0..=busy).contains(&commit), "{w}");
    assert!(w["commits"].as_u64().is_some_and(|c| c >= 3), "{w}");
    assert!(
        w["calls_per_commit"].as_f64().is_some_and(|c| c >= 1.0),
        "{w}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn bench_drain_with_pipelined_acks_acks_every_job_it_hands_out() {
    let dir = tempfile::tempdir().unwrap();
    let dq = Dq::start_embedded(dir.path()).await;
    let v = bench(
        &dq.base,
        &[
            "drain",
            "--jobs",
            "3000",
            "--window",
            "0s..0s",
            "--consumers",
            "3",
            "--max",
            "7",
            "--acks",
            "pipelined",
            "--topic",
            "bench-pipelined",
            "--keep",
            "--check",
        ],
    )
    .await;
    assert_eq!(v["acks"], "pipelined", "{v}");
    for (k, want) in [
        ("lost", 0.0),
        ("duplicated", 0.0),
        ("acked", 3000.0),
        ("ack_errors", 0.0),
    ] {
        assert_eq!(number(&v, &format!("/{k}")), want, "{k}: {v}");
    }
    // The store agrees: the last ack calls (sent while the consumers were
    // reserving again) arrived before the bench ended; nothing is left
    // waiting or leased.
    let (status, t) = dq.get("/v1/topics/bench-pipelined").await;
    assert_eq!(status, 200, "{t}");
    let stats = &t["stats"];
    for k in ["scheduled", "ready", "reserved", "dead"] {
        assert_eq!(stats[k], 0, "{k}: {t}");
    }
    assert_eq!(stats["counters"]["acked"], 3000, "{t}");
}
