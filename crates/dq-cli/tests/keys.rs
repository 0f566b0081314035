//! API keys through the real binary and the CLI: two `dq serve` on one
//! Redis; `dq keys create` makes the first (admin) key from loopback and
//! the others with it; a key's scopes hold on both instances; `dq keys
//! revoke` on one is refused by the other within a second; every change
//! made with a key is a `dq::audit` line naming it; no secret is in any
//! log, listing or CLI output but the one that creates it.

mod support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use dq_testkit::{RedisServer, free_port};

struct Instance {
    base: String,
    log: std::path::PathBuf,
    _child: support::KillOnDrop,
    child: Child,
}

fn serve(redis: &str, dir: &std::path::Path, name: &str) -> Instance {
    let port = free_port();
    let log = dir.join(format!("{name}.log"));
    let child = Command::new(env!("CARGO_BIN_EXE_dq"))
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--redis", redis, "--config", "/dev/null"])
        .args(["--log-level", "debug,hyper=info,h2=info,reqwest=info"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("spawn dq");
    Instance {
        base: format!("http://127.0.0.1:{port}"),
        log,
        _child: support::KillOnDrop(child.id()),
        child,
    }
}

/// Runs `dq args… --server base [--token t]`: success, stdout, stderr.
fn dq(base: &str, token: Option<&str>, args: &[&str]) -> (bool, String, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_dq"));
    c.args(args).args(["--server", base]).env_remove("DQ_TOKEN");
    if let Some(t) = token {
        c.args(["--token", t]);
    }
    let out = c.output().expect("run dq");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn created_secret(out: &(bool, String, String)) -> String {
    assert!(out.0, "{} {}", out.1, out.2);
    let secret = out.1.trim().to_string();
    assert!(
        secret.starts_with("dqk_") && secret.len() == 68,
        "{secret:?}"
    );
    assert!(out.2.contains("shown this once"), "{}", out.2);
    secret
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_through_the_cli_on_two_instances() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let http = reqwest::Client::new();
    let mut a = serve(&redis.url(), dir.path(), "a");
    let mut b = serve(&redis.url(), dir.path(), "b");
    support::wait_ready(&http, &a.base).await;
    support::wait_ready(&http, &b.base).await;

    // The first key: an admin key, from loopback, without a token.
    let refused = dq(
        &a.base,
        None,
        &["keys", "create", "--name", "w", "--scope", "read:*"],
    );
    assert!(
        !refused.0 && refused.2.contains("admin_key_needed"),
        "{refused:?}"
    );
    let root = created_secret(&dq(
        &a.base,
        None,
        &["keys", "create", "--name", "root", "--scope", "admin"],
    ));
    let worker = created_secret(&dq(
        &a.base,
        Some(&root),
        &[
            "keys",
            "create",
            "--name",
            "billing-worker",
            "--scope",
            "consume:billing-*",
            "--scope",
            "read:billing-*",
        ],
    ));
    // b learns of keys made on a within a second.
    let made = Instant::now();
    while http
        .get(format!("{}/v1/keys", b.base))
        .bearer_auth(&worker)
        .send()
        .await
        .unwrap()
        .status()
        == 401
    {
        assert!(
            made.elapsed() < Duration::from_secs(1),
            "b does not know the key"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let (ok, list, _) = dq(&b.base, Some(&root), &["keys", "list"]);
    assert!(
        ok && list.contains("billing-worker") && list.contains("consume:billing-*"),
        "{list}"
    );
    assert!(
        !list.contains(&root[4..20]) && !list.contains(&worker[4..20]),
        "{list}"
    );
    let (ok, json, _) = dq(&b.base, Some(&root), &["keys", "list", "--json"]);
    assert!(
        ok && !json.contains("secret") && !json.contains("sha256"),
        "{json}"
    );

    // Without a key nothing is open any more; with one, its scopes hold.
    let (ok, _, err) = dq(&b.base, None, &["topics"]);
    assert!(!ok && err.contains("unauthorized"), "{err}");
    let (ok, _, err) = dq(
        &b.base,
        Some(&worker),
        &["push", "billing-eu", "{\"order\":45}"],
    );
    assert!(
        !ok && err.contains("enqueue:billing-eu"),
        "the 403 names the scope: {err}"
    );
    let (ok, out, err) = dq(
        &b.base,
        Some(&root),
        &["push", "billing-eu", "{\"order\":45}", "--id", "o45"],
    );
    assert!(ok, "{out}{err}");
    let r = http
        .post(format!("{}/v1/reserve", a.base))
        .bearer_auth(&worker)
        .json(&serde_json::json!({"topics": ["billing-eu"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["jobs"][0]["id"], "o45");
    let r = http
        .post(format!("{}/v1/topics/billing-eu/jobs/o45/ack", a.base))
        .bearer_auth(&worker)
        .json(&serde_json::json!({"token": v["jobs"][0]["token"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    // Revoked through a, refused by b within a second.
    let (ok, out, err) = dq(
        &a.base,
        Some(&root),
        &["keys", "revoke", "billing-worker", "--yes"],
    );
    assert!(ok, "{out}{err}");
    let revoked = Instant::now();
    loop {
        let r = http
            .get(format!("{}/v1/topics/billing-eu", b.base))
            .bearer_auth(&worker)
            .send()
            .await
            .unwrap();
        if r.status() == 401 {
            break;
        }
        assert!(
            revoked.elapsed() < Duration::from_secs(1),
            "b takes a revoked key after {:?}",
            revoked.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    // Rotation: the old secret stops, the new one works.
    let rotated = created_secret(&dq(&a.base, Some(&root), &["keys", "rotate", "root"]));
    let (ok, _, _) = dq(&a.base, Some(&root), &["keys", "list"]);
    assert!(!ok, "the old secret is refused");
    let (ok, _, _) = dq(&a.base, Some(&rotated), &["keys", "list"]);
    assert!(ok);

    let _ = a.child.kill();
    let _ = b.child.kill();
    let _ = a.child.wait();
    let _ = b.child.wait();
    let log_a = std::fs::read_to_string(&a.log).unwrap();
    let log_b = std::fs::read_to_string(&b.log).unwrap();
    for (name, log) in [("a", &log_a), ("b", &log_b)] {
        for secret in [&root, &worker, &rotated] {
            assert!(!log.contains(&secret[4..36]), "a secret in {name}'s log");
        }
    }
    let audit: Vec<&str> = log_a.lines().filter(|l| l.contains("dq::audit")).collect();
    assert!(
        audit.iter().any(|l| l.contains(r#"key="billing-worker""#)
            && l.contains("/ack")
            && l.contains(r#"id="o45""#)),
        "the worker's ack is audited: {audit:#?}"
    );
    assert!(
        audit.iter().any(|l| l.contains(r#"key="root""#)
            && l.contains("DELETE")
            && l.contains(r#"id="billing-worker""#)),
        "the revocation is audited: {audit:#?}"
    );
    let log_b_audit: Vec<&str> = log_b.lines().filter(|l| l.contains("dq::audit")).collect();
    assert!(
        log_b_audit
            .iter()
            .any(|l| l.contains(r#"key="root""#) && l.contains(r#"topic="billing-eu""#)),
        "the push through b is audited there: {log_b_audit:#?}"
    );
}
