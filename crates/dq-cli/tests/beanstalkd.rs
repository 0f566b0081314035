//! beanstalkd client libraries, unchanged, against `dq serve --beanstalkd`
//! on both stores: greenstalk (PyPI) and pheanstalk 4 (Debian's
//! `php-pda-pheanstalk`, the client of Laravel's queue driver), each driving
//! a producer and a worker (`tests/beanstalkd/`); and jobs put over HTTP
//! with ids that are not numbers, taken by beanstalkd consumers.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use dq_testkit::{RedisServer, free_port};
use serde_json::json;
use support::Dq;
use support::beanstalk::Raw;

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
    let stores = both_stores().await;
    for (name, port, dq) in &stores.servers {
        eprintln!("client on {name}");
        tokio::task::block_in_place(|| f(*port, dq));
    }
}

/// A `dq serve --beanstalkd` on each store, and what they run on.
struct Stores {
    /// Each store's name, beanstalkd port and server.
    servers: Vec<(&'static str, u16, Dq)>,
    _dir: tempfile::TempDir,
    _redis: RedisServer,
}

async fn both_stores() -> Stores {
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start();
    let url = redis.url();
    let data = dir.path().to_str().unwrap().to_string();
    let mut out = Vec::new();
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
        out.push((name, port, dq));
    }
    Stores {
        servers: out,
        _dir: dir,
        _redis: redis,
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

/// A job put over HTTP without an id (a UUIDv7) is seen through beanstalkd
/// under a numeric alias: a reserve answers within its timeout and hands
/// it out, and the commands that name a job by number reach it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_with_ids_that_are_not_numbers_get_a_number() {
    let stores = both_stores().await;
    for (name, port, dq) in &stores.servers {
        let (name, port) = (*name, *port);
        let (s, v) = dq
            .post("/v1/topics/mixed/jobs", json!({"body": {"n": 1}}))
            .await;
        assert_eq!(s, 201, "{name}: {v}");
        let uuid = v["id"].as_str().unwrap().to_string();
        assert!(uuid.parse::<u64>().is_err(), "{uuid} is not a number");
        let mut c = Raw::connect(port).await;
        assert_eq!(c.cmd("watch mixed").await.line, "WATCHING 2");
        let start = Instant::now();
        c.send(b"reserve-with-timeout 2\r\n").await;
        let got = c
            .reply_within(Duration::from_secs(4))
            .await
            .unwrap_or_else(|| panic!("{name}: no reply to reserve-with-timeout 2 within 4 s"));
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{name}: answered at once"
        );
        let w = got.words();
        assert_eq!(w[0], "RESERVED", "{name}: {got:?}");
        let n: u64 = w[1].parse().unwrap();
        assert!(
            ((1u64 << 62)..=i64::MAX as u64).contains(&n),
            "{name}: {n} is an alias a PHP int holds"
        );
        assert_eq!(got.text(), r#"{"n":1}"#);
        let stats = c.cmd(&format!("stats-job {n}")).await;
        assert!(
            stats.text().contains("state: reserved"),
            "{name}: {stats:?}"
        );
        assert!(
            stats.text().contains(&format!("id: {n}\n")),
            "{name}: {stats:?}"
        );
        // Another connection finds it by the same number.
        let mut other = Raw::connect(port).await;
        assert_eq!(
            other.cmd(&format!("peek {n}")).await.line,
            format!("FOUND {n} 7")
        );
        assert_eq!(c.cmd(&format!("release {n} 5 0")).await.line, "RELEASED");
        other.cmd("use mixed").await;
        assert_eq!(
            other.cmd("peek-ready").await.line,
            format!("FOUND {n} 7"),
            "{name}: the same number each time"
        );
        assert_eq!(c.cmd(&format!("delete {n}")).await.line, "DELETED");
        let (s, _) = dq.get(&format!("/v1/topics/mixed/jobs/{uuid}")).await;
        assert_eq!(s, 404, "{name}: the job is gone");
        // Nothing left: the reserve times out on time.
        let start = Instant::now();
        assert_eq!(c.cmd("reserve-with-timeout 0").await.line, "TIMED_OUT");
        assert!(start.elapsed() < Duration::from_secs(1), "{name}");
    }
}
