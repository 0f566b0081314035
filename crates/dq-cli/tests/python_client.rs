//! A client in another language, generated from the OpenAPI document: the
//! test generates a Python client with `openapi-python-client` (PyPI,
//! installed when missing) from `crates/dq-server/src/openapi.json`, checks
//! the generator took every schema, and runs the README tour through the
//! generated client (`tests/python_client/tour.py`) against `dq serve` on
//! both stores.

mod support;

use std::process::Command;

use dq_testkit::RedisServer;
use support::{Dq, ensure_python_module};

fn generate(into: &std::path::Path) -> std::path::PathBuf {
    let doc = format!(
        "{}/../dq-server/src/openapi.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let out = Command::new("python3")
        .args(["-m", "openapi_python_client", "generate", "--path", &doc])
        .current_dir(into)
        .output()
        .expect("run openapi-python-client");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "generator failed:\n{said}");
    // A schema the generator cannot take is dropped from the client with a
    // warning: the document must not have any.
    assert!(
        !said.contains("Unable to process") && !said.contains("Warning"),
        "the generator dropped part of the document:\n{said}"
    );
    into.join("dq-client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generated_python_client_runs_the_readme_tour() {
    ensure_python_module("openapi_python_client", "openapi-python-client");
    let gen_dir = tempfile::tempdir().unwrap();
    let client = generate(gen_dir.path());
    let tour = format!("{}/tests/python_client/tour.py", env!("CARGO_MANIFEST_DIR"));
    let data = tempfile::tempdir().unwrap();
    let redis = RedisServer::start();
    for dq in [
        Dq::start_embedded(data.path()).await,
        Dq::start(&redis.url()).await,
    ] {
        let out = Command::new("python3")
            .args([tour.as_str(), client.to_str().unwrap(), dq.base.as_str()])
            .output()
            .expect("run tour.py");
        assert!(
            out.status.success() && String::from_utf8_lossy(&out.stdout).contains("tour ok"),
            "tour failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
