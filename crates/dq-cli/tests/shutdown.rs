//! Shutdown of the real binary: logging never holds it up, and a second
//! signal ends what the first one is waiting for.

mod support;

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use dq_testkit::free_port;

fn spawn(dir: &std::path::Path, port: u16, log_level: &str, stderr: Stdio) -> Child {
    let _ = rustls::crypto::ring::default_provider().install_default();
    Command::new(env!("CARGO_BIN_EXE_dq"))
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--data-dir", dir.to_str().unwrap()])
        .args(["--config", "/dev/null", "--log-level", log_level])
        .args(["--shutdown-grace", "60s", "--http-header-timeout", "60s"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("spawn dq")
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
}

/// What each thread of a process that did not stop is doing (gdb, when this
/// machine has it), for the failure message.
fn threads(child: &Child) -> String {
    match Command::new("gdb")
        .args([
            "-p",
            &child.id().to_string(),
            "-batch",
            "-ex",
            "thread apply all bt 12",
        ])
        .stdin(Stdio::null())
        .output()
    {
        Ok(out) => String::from_utf8_lossy(&out.stdout).into_owned(),
        Err(e) => format!("(no thread dump: gdb: {e})"),
    }
}

/// Waits for the child to exit; its exit status and how long that took.
async fn exited(
    child: &mut Child,
    within: Duration,
) -> Option<(std::process::ExitStatus, Duration)> {
    let started = Instant::now();
    while started.elapsed() < within {
        if let Some(status) = child.try_wait().unwrap() {
            return Some((status, started.elapsed()));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

/// Waits up to `within` for the child to exit after a stop signal and
/// asserts it exited successfully; a dq that did not stop fails the test
/// with `what` and its threads.
async fn stops_cleanly_within(child: &mut Child, within: Duration, what: &str) {
    let Some((status, _)) = exited(child, within).await else {
        panic!(
            "dq serve {what} (not exited within {within:?}); its threads:\n{}",
            threads(child)
        );
    };
    assert!(status.success(), "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_stderr_pipe_stalls_neither_requests_nor_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    // stderr is a pipe this test holds open and never reads: after ~64 KiB
    // every write to it would block.
    let mut child = spawn(dir.path(), port, "debug", Stdio::piped());
    let _reaper = support::KillOnDrop(child.id());
    let _unread = child.stderr.take();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    support::wait_ready(&http, &base).await;
    // 2,000 requests write far more than the pipe holds (an access-log line
    // each, plus debug lines); every one must still be answered.
    for i in 0..2000 {
        let res = http
            .post(format!("{base}/v1/topics/t/jobs"))
            .json(&serde_json::json!({"id": format!("j{i}")}))
            .send()
            .await
            .unwrap_or_else(|e| panic!("request {i} not answered: {e}"));
        assert!(res.status().is_success(), "request {i}: {}", res.status());
    }
    signal(&child, "-TERM");
    stops_cleanly_within(
        &mut child,
        Duration::from_secs(10),
        "did not stop on SIGTERM with stderr full",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_signal_stops_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let mut child = spawn(dir.path(), port, "warn", Stdio::null());
    let _reaper = support::KillOnDrop(child.id());
    let http = reqwest::Client::new();
    support::wait_ready(&http, &base).await;
    // A request in flight that will not finish by itself: half a body.
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        conn,
        "POST /v1/topics/t/jobs HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{{\"id\":"
    )
    .unwrap();
    conn.flush().unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    signal(&child, "-TERM");
    // The first signal waits for it (the grace period is 60 s) ...
    assert!(
        exited(&mut child, Duration::from_millis(1500))
            .await
            .is_none(),
        "graceful shutdown waits for the request in flight"
    );
    // ... the second does not.
    signal(&child, "-INT");
    let (status, took) = exited(&mut child, Duration::from_secs(5))
        .await
        .expect("dq serve did not exit on the second signal");
    assert_eq!(status.code(), Some(130), "128 + SIGINT");
    assert!(took < Duration::from_secs(5));
    drop(conn);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_that_sent_nothing_do_not_hold_up_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let mut child = spawn(dir.path(), port, "warn", Stdio::null());
    let _reaper = support::KillOnDrop(child.id());
    let http = reqwest::Client::new();
    support::wait_ready(&http, &base).await;
    // What a browser does: spare connections opened and never used.
    let spare: Vec<_> = (0..2)
        .map(|_| std::net::TcpStream::connect(("127.0.0.1", port)).unwrap())
        .collect();
    // Accepted (an answered request after them comes through the same
    // accept loop).
    let res = http.get(format!("{base}/healthz")).send().await.unwrap();
    assert!(res.status().is_success());
    drop(http);
    signal(&child, "-TERM");
    // The grace period and the header timeout are 60 s: an idle connection
    // that held the stop would hold it that long.
    stops_cleanly_within(
        &mut child,
        Duration::from_secs(10),
        "waited for connections that never sent a request",
    )
    .await;
    drop(spare);
}
