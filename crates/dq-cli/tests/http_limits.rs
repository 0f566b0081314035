//! Slow and greedy clients against the real binary: header and body
//! timeouts and the connection limit hold, and the server keeps answering
//! everyone else.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::json;
use support::Dq;

/// Reads until the server closes the connection (or `within` passes);
/// returns what it sent and when it closed, if it did.
fn until_closed(conn: &mut TcpStream, within: Duration) -> (String, Option<Duration>) {
    let started = Instant::now();
    conn.set_read_timeout(Some(within)).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match conn.read(&mut buf) {
            Ok(0) => {
                return (
                    String::from_utf8_lossy(&got).into(),
                    Some(started.elapsed()),
                );
            }
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                return (
                    String::from_utf8_lossy(&got).into(),
                    Some(started.elapsed()),
                );
            }
            Err(_) => return (String::from_utf8_lossy(&got).into(), None),
        }
    }
}

fn port_of(d: &Dq) -> u16 {
    d.base.rsplit(':').next().unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_are_cut_off_and_others_still_served() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let d = Dq::start_with(&[
        "--data-dir",
        data.to_str().unwrap(),
        "--http-header-timeout",
        "1s",
        "--http-body-timeout",
        "1s",
    ])
    .await;
    let port = port_of(&d);

    // Headers that never end (slowloris): closed after the header timeout.
    let mut slow_headers = TcpStream::connect(("127.0.0.1", port)).unwrap();
    slow_headers
        .write_all(b"POST /v1/topics/t/jobs HTTP/1.1\r\nhost: x\r\n")
        .unwrap();
    // A connection that sends nothing at all.
    let mut silent = TcpStream::connect(("127.0.0.1", port)).unwrap();
    // A body announced at 1000 bytes, 10 sent.
    let mut slow_body = TcpStream::connect(("127.0.0.1", port)).unwrap();
    slow_body
        .write_all(b"POST /v1/topics/t/jobs HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{\"id\": \"s")
        .unwrap();

    // Meanwhile everyone else is served.
    let (s, _) = d.post("/v1/topics/t/jobs", json!({"id": "ok"})).await;
    assert_eq!(s, 201);

    for (what, conn) in [
        ("unfinished headers", &mut slow_headers),
        ("silent connection", &mut silent),
    ] {
        let (_, closed) = until_closed(conn, Duration::from_secs(5));
        let took = closed.unwrap_or_else(|| panic!("{what}: still open after 5 s"));
        assert!(
            took < Duration::from_secs(4),
            "{what}: closed after {took:?}"
        );
    }
    let (reply, closed) = until_closed(&mut slow_body, Duration::from_secs(5));
    assert!(
        closed.is_some() || !reply.is_empty(),
        "slow body: no answer in 5 s"
    );
    assert!(reply.starts_with("HTTP/1.1 408"), "slow body: {reply}");
    assert!(reply.contains("request_timeout"), "{reply}");
    // Nothing was written by the cut-off request. Asked on a new
    // connection: the harness's pooled one has been idle for about the
    // header timeout, which also bounds keep-alive idle, so the server may
    // close it just as the client reuses it (a race, not a defect).
    let fresh = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let s = fresh
        .get(format!("{}/v1/topics/t/jobs/s", d.base))
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(s, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_limit_are_closed_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let d = Dq::start_with(&[
        "--data-dir",
        data.to_str().unwrap(),
        "--max-connections",
        "3",
    ])
    .await;
    let port = port_of(&d);
    // The harness's client holds a pooled connection from its `/readyz`
    // calls: drop that client so the three slots are all ours.
    let mut d = d;
    d.http = reqwest::Client::new();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let client = || {
        reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .build()
            .unwrap()
    };
    // Three connections, each served (one request, kept alive).
    let mut held: Vec<TcpStream> = Vec::new();
    for i in 0..3 {
        let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        c.write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
            .unwrap();
        c.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let mut buf = [0u8; 512];
        let n = c.read(&mut buf).unwrap_or(0);
        let reply = String::from_utf8_lossy(&buf[..n]).to_string();
        assert!(
            reply.starts_with("HTTP/1.1 200"),
            "connection {i}: {reply:?}"
        );
        held.push(c);
    }
    // The fourth is accepted and closed at once.
    let mut fourth = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let (_, closed) = until_closed(&mut fourth, Duration::from_secs(3));
    let took = closed.expect("the connection beyond the limit stays open");
    assert!(took < Duration::from_secs(2), "{took:?}");
    // A slot freed is a slot usable again.
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = client().get(format!("{}/readyz", d.base)).send().await;
        if r.is_ok_and(|r| r.status().is_success()) {
            break;
        }
        assert!(Instant::now() < deadline, "no slot came back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A request with both Content-Length and Transfer-Encoding (request
/// smuggling behind a proxy that frames by Content-Length): the body is
/// framed by Transfer-Encoding alone and the connection is closed after the
/// answer (RFC 9112 §6.1), so bytes hidden after the chunked body are never
/// read as a second request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_length_with_transfer_encoding_cannot_smuggle_a_request() {
    let dir = tempfile::tempdir().unwrap();
    let dq = Dq::start_embedded(dir.path()).await;
    let addr = dq.base.trim_start_matches("http://").to_string();
    let smuggled = "POST /v1/topics/smuggled/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 20\r\n\r\n{\"id\":\"s\",\"body\":1}\n";
    let body = format!("13\r\n{{\"id\":\"a\",\"body\":1}}\r\n0\r\n\r\n{smuggled}");
    let request = format!(
        "POST /v1/topics/front/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nTransfer-Encoding: chunked\r\n\r\n{body}",
        body.len()
    );
    let (got, closed) = tokio::task::spawn_blocking(move || {
        let mut conn = TcpStream::connect(addr).unwrap();
        conn.write_all(request.as_bytes()).unwrap();
        until_closed(&mut conn, Duration::from_secs(5))
    })
    .await
    .unwrap();
    assert!(
        closed.is_some(),
        "the connection is closed after the answer: {got}"
    );
    assert_eq!(
        got.matches("HTTP/1.1 ").count(),
        1,
        "one answer only: {got}"
    );
    assert!(
        got.starts_with("HTTP/1.1 201"),
        "framed by Transfer-Encoding: {got}"
    );
    assert!(got.to_lowercase().contains("connection: close"), "{got}");
    let (s, v, _) = dq
        .call(reqwest::Method::GET, "/v1/topics/smuggled/jobs/s", None)
        .await;
    assert_eq!(s, 404, "the hidden request was not run: {v}");
}
