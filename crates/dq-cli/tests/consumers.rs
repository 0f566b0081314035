//! The consumer examples of docs/consumers.md, run: PHP, Python and Node
//! workers (`examples/consumers/`, shown verbatim in the doc — checked
//! here) each take the same three jobs from `dq serve`, ack the two that
//! work and nack the one that fails, which goes dead (max_attempts 1).
//! The runtimes are installed when missing (php-cli, nodejs, requests).

mod support;

use std::process::Command;

use serde_json::json;
use support::{Dq, ensure_package, ensure_python_module};

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
    ensure_package("/usr/bin/php", &["php-cli"]);
    ensure_package("/usr/bin/node", &["nodejs"]);
    ensure_python_module("requests", "requests");
    for (program, name) in [
        ("php", "worker.php"),
        ("python3", "worker.py"),
        ("node", "worker.mjs"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let dq = Dq::start_embedded(dir.path()).await;
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
        let (path, _) = example(name);
        let out = Command::new(program)
            .arg(&path)
            .env("DQ", &dq.base)
            .env("EXIT_WHEN_IDLE", "1")
            .output()
            .unwrap_or_else(|e| panic!("run {program}: {e}"));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{name}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.contains("closed order 1") && stdout.contains("closed order 2"),
            "{name}: {stdout}"
        );
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
}
