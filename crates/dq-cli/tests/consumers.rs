//! The consumer examples of docs/consumers.md, run: PHP, Python and Node
//! workers (`examples/consumers/`, shown verbatim in the doc — checked
//! here) each take the same three jobs from `dq serve`, ack the two that
//! work and nack the one that fails, which goes dead (max_attempts 1);
//! started while dq is down, each waits longer and longer (no busy loop)
//! and goes on when dq is back; given a key dq refuses, each stops with the
//! reason. The runtimes are installed when missing (php-cli, nodejs,
//! requests).

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::json;
use support::{Dq, ensure_package, ensure_python_module};

const WORKERS: [(&str, &str); 3] = [
    ("php", "worker.php"),
    ("python3", "worker.py"),
    ("node", "worker.mjs"),
];

fn ensure_runtimes() {
    ensure_package("/usr/bin/php", &["php-cli"]);
    ensure_package("/usr/bin/node", &["nodejs"]);
    ensure_python_module("requests", "requests");
}

/// A `dq serve` holding the three jobs of the examples: two that work, one
/// that fails (and goes dead at once: max_attempts 1).
async fn dq_with_three_orders(dir: &std::path::Path) -> Dq {
    let dq = Dq::start_embedded(dir).await;
    let (s, v, _) = dq
        .call(
            reqwest::Method::PUT,
            "/v1/topics/orders",
            Some(json!({"max_attempts": 1})),
        )
        .await;
    assert!(s == 200 || s == 201, "{v}");
    let (s, v) = dq
        .post(
            "/v1/topics/orders/jobs:batch",
            json!({"jobs": [
                {"id": "o/1", "body": {"order": 1}},
                {"id": "o2", "body": {"order": 2}},
                {"id": "bad", "body": {"order": -1}}
            ]}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    dq
}

/// The example `name` run by `program` against `base`, stopping when
/// nothing is due; its standard error comes line by line on the channel.
fn spawn_worker(
    program: &str,
    name: &str,
    base: &str,
    token: Option<&str>,
) -> (Child, mpsc::Receiver<String>) {
    let (path, _) = example(name);
    let mut cmd = Command::new(program);
    cmd.arg(&path)
        .env("DQ", base)
        .env("EXIT_WHEN_IDLE", "1")
        .env_remove("DQ_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(t) = token {
        cmd.env("DQ_TOKEN", t);
    }
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("run {program}: {e}"));
    let (tx, rx) = mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    (child, rx)
}

/// Waits (up to `limit`) for the child to exit; kills it and fails if it
/// does not. Returns its standard output.
fn wait_exit(mut child: Child, limit: Duration, what: &str) -> (std::process::ExitStatus, String) {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut out = String::new();
            std::io::Read::read_to_string(child.stdout.as_mut().unwrap(), &mut out).unwrap();
            return (status, out);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{what}: still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The state the examples leave: two acked, one dead with its error.
async fn assert_two_acked_one_dead(dq: &Dq, name: &str) {
    let (_, t) = dq.get("/v1/topics/orders").await;
    let st = &t["stats"];
    assert_eq!(
        (
            st["counters"]["acked"].as_u64(),
            st["dead"].as_u64(),
            st["ready"].as_u64()
        ),
        (Some(2), Some(1), Some(0)),
        "{name}: {t}"
    );
    let (_, dead) = dq.get("/v1/topics/orders/dead").await;
    assert_eq!(dead["jobs"][0]["id"], "bad", "{name}: {dead}");
    assert_eq!(
        dead["jobs"][0]["last_error"], "no such order -1",
        "{name}: {dead}"
    );
}

fn example(name: &str) -> (String, String) {
    let path = format!(
        "{}/../../examples/consumers/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap();
    (path, text)
}

#[test]
fn the_doc_shows_the_examples_as_they_are() {
    let doc = std::fs::read_to_string(format!(
        "{}/../../docs/consumers.md",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    for name in ["worker.php", "worker.py", "worker.mjs"] {
        let (_, text) = example(name);
        assert!(
            doc.contains(&text),
            "docs/consumers.md does not show examples/consumers/{name} as it is"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn php_python_and_node_workers_ack_and_nack() {
    ensure_runtimes();
    for (program, name) in WORKERS {
        let dir = tempfile::tempdir().unwrap();
        let dq = dq_with_three_orders(dir.path()).await;
        let (child, errors) = spawn_worker(program, name, &dq.base, None);
        let (status, stdout) = wait_exit(child, Duration::from_secs(60), name);
        let said: Vec<String> = errors.try_iter().collect();
        assert!(status.success(), "{name}: {stdout}\n{}", said.join("\n"));
        assert!(
            stdout.contains("closed order 1") && stdout.contains("closed order 2"),
            "{name}: {stdout}"
        );
        assert_two_acked_one_dead(&dq, name).await;
    }
}

/// Started while dq is down, a worker retries after 1 s, 2 s, 4 s, … (three
/// attempts take at least 3 s, where a busy loop would make thousands),
/// then takes the jobs once dq is back on its address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_wait_longer_and_longer_while_dq_is_down_then_go_on() {
    ensure_runtimes();
    for (program, name) in WORKERS {
        let dir = tempfile::tempdir().unwrap();
        let mut dq = dq_with_three_orders(dir.path()).await;
        dq.kill9();
        let (child, errors) = spawn_worker(program, name, &dq.base, None);
        let mut retries = Vec::new();
        while retries.len() < 3 {
            let line = errors
                .recv_timeout(Duration::from_secs(20))
                .unwrap_or_else(|_| panic!("{name}: no retry after {retries:?}"));
            assert!(line.contains("retrying in"), "{name}: {line}");
            retries.push((Instant::now(), line));
        }
        let spread = retries[2].0 - retries[0].0;
        assert!(
            spread >= Duration::from_millis(2500),
            "{name}: three attempts within {spread:?}: {retries:?}"
        );
        assert!(
            retries[2].1.contains("retrying in 4 s"),
            "{name}: {retries:?}"
        );
        dq.restart().await;
        let (status, stdout) = wait_exit(child, Duration::from_secs(60), name);
        assert!(status.success(), "{name}: {stdout}");
        let more: Vec<String> = errors.try_iter().collect();
        assert!(more.len() <= 2, "{name}: {more:?}");
        assert_two_acked_one_dead(&dq, name).await;
    }
}

/// A key dq refuses (401) is not retried: the worker stops at once with
/// the status and dq's error (code and message), exit status 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_stop_with_the_reason_when_dq_refuses_their_key() {
    ensure_runtimes();
    let dir = tempfile::tempdir().unwrap();
    let dq = dq_with_three_orders(dir.path()).await;
    // Once a key exists, every call needs one.
    let (s, v) = dq
        .post("/v1/keys", json!({"name": "ops", "scopes": ["admin"]}))
        .await;
    assert_eq!(s, 201, "{v}");
    for (program, name) in WORKERS {
        for token in [
            None,
            Some("dqk_0000000000000000000000000000000000000000000000000000000000000000"),
        ] {
            let (child, errors) = spawn_worker(program, name, &dq.base, token);
            let (status, stdout) = wait_exit(child, Duration::from_secs(20), name);
            let said: Vec<String> = errors.try_iter().collect();
            assert_eq!(status.code(), Some(1), "{name}: {stdout} {said:?}");
            let said = said.join("\n");
            assert!(
                said.contains("dq refused the reserve (401)") && said.contains("unauthorized"),
                "{name} {token:?}: {said}"
            );
        }
    }
    let (_, t) = dq.get("/v1/topics/orders").await;
    assert_eq!(t["error"]["code"], "unauthorized", "{t}");
}
