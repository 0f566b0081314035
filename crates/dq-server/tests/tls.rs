//! HTTPS on the HTTP listener: a self-signed certificate made in the test
//! (rcgen), answers with Strict-Transport-Security, plain HTTP and clients
//! that do not trust the certificate refused, a certificate renewed on disk
//! taken on SIGHUP for new connections (open ones keep working), a broken
//! file on SIGHUP keeping the one in use, and bad files refused at start.

mod support;

use std::time::{Duration, Instant};

use dq_server::ServerConfig;
use dq_server::tls::{Tls, TlsFiles};

/// A self-signed certificate for `localhost`: (cert PEM, key PEM).
fn self_signed() -> (String, String) {
    let c = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    (c.cert.pem(), c.key_pair.serialize_pem())
}

/// A client trusting only `pem`, reaching `localhost` at `port`.
fn client(pem: &str, port: u16) -> reqwest::Client {
    reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(pem.as_bytes()).unwrap()])
        .resolve("localhost", ([127, 0, 0, 1], port).into())
        .build()
        .unwrap()
}

async fn healthz(c: &reqwest::Client, port: u16) -> Result<reqwest::Response, reqwest::Error> {
    c.get(format!("https://localhost:{port}/healthz"))
        .send()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_with_a_certificate_reloaded_on_sighup() {
    let dir = tempfile::tempdir().unwrap();
    let files = TlsFiles {
        cert: dir.path().join("cert.pem"),
        key: dir.path().join("key.pem"),
    };
    let (cert_a, key_a) = self_signed();
    std::fs::write(&files.cert, &cert_a).unwrap();
    std::fs::write(&files.key, &key_a).unwrap();
    let (store, _data) = support::embedded_store();
    let running = support::serve(
        store,
        ServerConfig {
            tls: Some(files.clone()),
            ..Default::default()
        },
    )
    .await;
    let port: u16 = running.base.rsplit(':').next().unwrap().parse().unwrap();

    let a = client(&cert_a, port);
    let r = healthz(&a, port)
        .await
        .expect("https with the certificate trusted");
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["strict-transport-security"], "max-age=31536000");
    // Plain HTTP on the TLS port, and a client that trusts other roots only.
    let plain = reqwest::get(format!("http://127.0.0.1:{port}/healthz")).await;
    assert!(plain.is_err() || !plain.unwrap().status().is_success());
    let (other, _) = self_signed();
    assert!(healthz(&client(&other, port), port).await.is_err());

    // Renewed on disk, then SIGHUP: new connections get the new certificate.
    let (cert_b, key_b) = self_signed();
    std::fs::write(&files.cert, &cert_b).unwrap();
    std::fs::write(&files.key, &key_b).unwrap();
    let hup = || {
        let ok = std::process::Command::new("kill")
            .args(["-HUP", &std::process::id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok);
    };
    hup();
    let t0 = Instant::now();
    loop {
        if healthz(&client(&cert_b, port), port).await.is_ok() {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "new certificate not served"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        healthz(&client(&cert_a, port), port).await.is_err(),
        "a new connection no longer gets the old certificate"
    );
    let r = healthz(&a, port)
        .await
        .expect("the open connection keeps working");
    assert_eq!(r.status(), 200);

    // A broken file on SIGHUP: the certificate in use stays.
    std::fs::write(&files.cert, "not a certificate").unwrap();
    hup();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = healthz(&client(&cert_b, port), port)
        .await
        .expect("still served");
    assert_eq!(r.status(), 200);
}

#[test]
fn bad_files_are_refused_at_start_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed();
    let (_, other_key) = self_signed();
    let path = |n: &str, text: &str| {
        let p = dir.path().join(n);
        std::fs::write(&p, text).unwrap();
        p
    };
    let cert_file = path("cert.pem", &cert);
    let key_file = path("key.pem", &key);
    assert!(
        Tls::load(TlsFiles {
            cert: cert_file.clone(),
            key: key_file.clone()
        })
        .is_ok()
    );
    for (files, want) in [
        (
            TlsFiles {
                cert: dir.path().join("missing.pem"),
                key: key_file.clone(),
            },
            "tls_cert",
        ),
        (
            TlsFiles {
                cert: path("empty.pem", ""),
                key: key_file.clone(),
            },
            "no CERTIFICATE",
        ),
        (
            TlsFiles {
                cert: cert_file.clone(),
                key: path("nokey.pem", &cert),
            },
            "tls_key",
        ),
        (
            TlsFiles {
                cert: cert_file.clone(),
                key: path("other.pem", &other_key),
            },
            "with tls_key",
        ),
    ] {
        let e = Tls::load(files).unwrap_err();
        assert!(e.contains(want), "{want}: {e}");
    }
}
