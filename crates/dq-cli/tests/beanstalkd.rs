//! A beanstalkd client library, unchanged, against `dq serve --beanstalkd`
//! on both stores: greenstalk (PyPI), driving a producer and a worker
//! (`tests/beanstalkd/greenstalk_worker.py`).

mod support;

use std::process::Command;

use dq_testkit::{RedisServer, free_port};
use support::Dq;

fn run_greenstalk(port: u16, dq: &Dq) {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/beanstalkd/greenstalk_worker.py"
    );
    let out = Command::new("python3")
        .arg(script)
        .arg(port.to_string())
        .arg(&dq.base)
        .output()
        .expect("run python3");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.trim() == "ok",
        "greenstalk worker failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn greenstalk_works_unchanged_on_both_stores() {
    support::ensure_python_module("greenstalk", "greenstalk");
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start();
    let url = redis.url();
    let data = dir.path().to_str().unwrap().to_string();
    for (name, store) in [
        ("embedded", vec!["--data-dir", data.as_str()]),
        ("redis", vec!["--redis", url.as_str()]),
    ] {
        let port = free_port();
        let listen = format!("127.0.0.1:{port}");
        let mut args = store.clone();
        args.extend(["--beanstalkd", listen.as_str()]);
        let dq = Dq::start_with(&args).await;
        eprintln!("greenstalk on {name}");
        let dq_ref = &dq;
        tokio::task::block_in_place(|| run_greenstalk(port, dq_ref));
    }
}
