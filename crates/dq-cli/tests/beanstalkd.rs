//! beanstalkd client libraries, unchanged, against `dq serve --beanstalkd`
//! on both stores: greenstalk (PyPI) and pheanstalk 4 (Debian's
//! `php-pda-pheanstalk`, the client of Laravel's queue driver), each driving
//! a producer and a worker (`tests/beanstalkd/`).

mod support;

use std::process::Command;

use dq_testkit::{RedisServer, free_port};
use support::Dq;

/// Runs a client script that prints "ok" when its checks held.
fn run_client(program: &str, script: &str, args: &[&str]) {
    let path = format!("{}/tests/beanstalkd/{script}", env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(program)
        .arg(path)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {program}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.trim() == "ok",
        "{script} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Both stores, each behind a `dq serve --beanstalkd` on a free port; `f`
/// gets the port and the server.
async fn on_both_stores(f: impl Fn(u16, &Dq)) {
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start();
    let url = redis.url();
    let data = dir.path().to_str().unwrap().to_string();
    for (name, store) in [
        ("embedded", vec!["--data-dir", data.as_str()]),
        ("redis", vec!["--redis", url.as_str()]),
    ] {
        let (port, dq) = loop {
            let port = free_port();
            let listen = format!("127.0.0.1:{port}");
            let mut args = store.clone();
            args.extend(["--beanstalkd", listen.as_str()]);
            if let Some(dq) = Dq::try_start_env(&[], &args).await {
                break (port, dq);
            }
        };
        eprintln!("client on {name}");
        tokio::task::block_in_place(|| f(port, &dq));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn greenstalk_works_unchanged_on_both_stores() {
    support::ensure_python_module("greenstalk", "greenstalk");
    on_both_stores(|port, dq| {
        run_client(
            "python3",
            "greenstalk_worker.py",
            &[&port.to_string(), &dq.base],
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pheanstalk_works_unchanged_on_both_stores() {
    for file in ["/usr/bin/php", "/usr/share/php/Pheanstalk/autoload.php"] {
        support::ensure_package(file, &["php-cli", "php-pda-pheanstalk"]);
    }
    on_both_stores(|port, _| {
        run_client("php", "pheanstalk_worker.php", &[&port.to_string()]);
    })
    .await;
}
