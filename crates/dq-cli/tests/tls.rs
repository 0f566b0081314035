//! HTTPS through the binaries: `dq serve --tls-cert --tls-key` with a
//! self-signed certificate made here, the CLI reaching it with `--cacert`
//! (and refused without), and the start refused, with the reason, for a
//! missing key or unreadable files.

mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::KillOnDrop;

fn dq(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_dq"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn serve_over_https_and_the_cli_trusts_a_given_ca() {
    let dir = tempfile::tempdir().unwrap();
    let c = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let cert = dir.path().join("cert.pem");
    let key = dir.path().join("key.pem");
    std::fs::write(&cert, c.cert.pem()).unwrap();
    std::fs::write(&key, c.key_pair.serialize_pem()).unwrap();
    let port = dq_testkit::free_port();
    let listen = format!("127.0.0.1:{port}");
    let data = dir.path().join("data");
    let mut child = Command::new(env!("CARGO_BIN_EXE_dq"))
        .args(["serve", "--listen", &listen, "--data-dir"])
        .arg(&data)
        .arg("--tls-cert")
        .arg(&cert)
        .arg("--tls-key")
        .arg(&key)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _guard = KillOnDrop(child.id());
    let server = format!("https://localhost:{port}");
    let cacert = cert.to_str().unwrap();
    let t0 = Instant::now();
    loop {
        let out = dq(&[
            "push",
            "orders",
            r#"{"order": 1}"#,
            "--id",
            "o1",
            "--server",
            &server,
            "--cacert",
            cacert,
        ]);
        if out.status.success() {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "push over https: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = dq(&[
        "get", "orders", "o1", "--json", "--server", &server, "--cacert", cacert,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("\"order\": 1")
            || String::from_utf8_lossy(&out.stdout).contains("\"order\":1")
    );
    // Without the CA the certificate is not trusted.
    let out = dq(&["get", "orders", "o1", "--server", &server]);
    assert!(!out.status.success());
    // Plain http to the TLS port gets no answer.
    let out = dq(&[
        "get",
        "orders",
        "o1",
        "--server",
        &format!("http://127.0.0.1:{port}"),
    ]);
    assert!(!out.status.success());
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn a_start_with_bad_tls_settings_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let missing = dir.path().join("missing.pem");
    let port = dq_testkit::free_port().to_string();
    let listen = format!("127.0.0.1:{port}");
    for (args, want) in [
        (
            vec!["--tls-cert", missing.to_str().unwrap()],
            "tls_cert and tls_key go together",
        ),
        (
            vec![
                "--tls-cert",
                missing.to_str().unwrap(),
                "--tls-key",
                missing.to_str().unwrap(),
            ],
            "tls_cert",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_dq"))
            .args(["serve", "--listen", &listen, "--data-dir"])
            .arg(&data)
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} started");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}
