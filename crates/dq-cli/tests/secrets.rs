//! Push credentials (signing secrets, header values) never leave dq: set
//! through the API, the CLI and the config file, then looked for in every
//! reply, in the CLI's output and in the log of the real binary.

mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use dq_testkit::free_port;
use serde_json::{Value, json};

const TOKEN: &str = "admin-token-0123456789";
/// The distinctive middle parts of each credential: none may appear anywhere.
const SECRET_API: &str = "whsec_ApiSecretQ9r8GKYqrTwjUPD8ILPZIo2w";
const SECRET_CLI: &str = "whsec_CliSecretQ9r8GKYqrTwjUPD8ILPZIo2x";
const SECRET_FILE: &str = "whsec_FileSecretQ9r8GKYqrTwjUPD8ILPZIo2y";
const HEADER_API: &str = "sk_live_ApiHeaderValue0123456789";
const HEADER_FILE: &str = "sk_live_FileHeaderValue0123456789";
const SHORT_HEADER: &str = "pw-7xq";

fn leaked(text: &str) -> Vec<&'static str> {
    [
        &SECRET_API[6..30],
        &SECRET_CLI[6..30],
        &SECRET_FILE[6..30],
        &HEADER_API[..24],
        &HEADER_FILE[..24],
        SHORT_HEADER,
    ]
    .into_iter()
    .filter(|s| text.contains(s))
    .collect()
}

fn dq_cli(base: &str, args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_dq"))
        .args(args)
        .args(["--server", base, "--token", TOKEN])
        .output()
        .expect("run dq");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

async fn get_json(http: &reqwest::Client, url: &str) -> Value {
    http.get(url).send().await.unwrap().json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_secrets_and_header_values_are_in_no_reply_output_or_log() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("dq.toml");
    std::fs::write(
        &config,
        format!(
            "admin_token = \"{TOKEN}\"\n\n[topics.fromfile]\ndelivery = {{ mode = \"push\", url = \"http://127.0.0.1:9/hook\", headers = {{ \"X-Api-Key\" = \"{HEADER_FILE}\" }}, secrets = [\"{SECRET_FILE}\"] }}\n"
        ),
    )
    .unwrap();
    let log_path = dir.path().join("dq.log");
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let mut child = Command::new(env!("CARGO_BIN_EXE_dq"))
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--data-dir", dir.path().join("data").to_str().unwrap()])
        .args(["--config", config.to_str().unwrap()])
        .args(["--log-level", "debug,hyper=info,h2=info,reqwest=info"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .expect("spawn dq");
    let _reaper = support::KillOnDrop(child.id());
    let http = reqwest::Client::new();
    support::wait_ready(&http, &base).await;

    let mut replies = String::new();
    // Set through the API (with the token).
    let res = http
        .put(format!("{base}/v1/topics/hooks"))
        .bearer_auth(TOKEN)
        .json(
            &json!({"delivery": {"mode": "push", "url": "http://127.0.0.1:9/hook",
            "headers": {"X-Api-Key": HEADER_API, "X-Short": SHORT_HEADER},
            "secrets": [SECRET_API]}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let put: Value = res.json().await.unwrap();
    replies.push_str(&put.to_string());
    // What a reader sees instead: a hint per secret, the last characters of
    // long header values, nothing of short ones.
    let shown = &put["config"]["delivery"];
    assert_eq!(shown["secrets"], json!(["whsec_…Io2w"]), "{put}");
    assert_eq!(
        shown["headers"],
        json!({"X-Api-Key": "…6789", "X-Short": "…"})
    );

    // Set through the CLI.
    let (ok, out) = dq_cli(
        &base,
        &[
            "topics",
            "put",
            "clihooks",
            "--push-url",
            "http://127.0.0.1:9/hook",
            "--push-secret",
            SECRET_CLI,
        ],
    );
    assert!(ok, "{out}");
    assert!(out.contains("whsec_…Io2x"), "{out}");
    replies.push_str(&out);

    // Read back without a token, in every way there is.
    for path in [
        "/v1/topics",
        "/v1/topics/hooks",
        "/v1/topics/clihooks",
        "/v1/topics/fromfile",
        "/metrics",
        "/openapi.json",
    ] {
        let res = http.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(res.status(), 200, "{path}");
        replies.push_str(&res.text().await.unwrap());
    }
    for args in [
        vec!["stats", "hooks"],
        vec!["stats", "fromfile"],
        vec!["stats", "hooks", "--json"],
        vec!["topics", "list"],
    ] {
        let (ok, out) = dq_cli(&base, &args);
        assert!(ok, "{args:?}: {out}");
        replies.push_str(&out);
    }
    assert!(
        replies.contains("whsec_…Io2y"),
        "the config file's topic is shown redacted"
    );

    // The redacted copy sent back is refused and changes nothing.
    let got = get_json(&http, &format!("{base}/v1/topics/hooks")).await;
    let res = http
        .put(format!("{base}/v1/topics/hooks"))
        .bearer_auth(TOKEN)
        .json(&json!({"delivery": got["config"]["delivery"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 400);
    let err: Value = res.json().await.unwrap();
    assert_eq!(err["error"]["code"], "invalid_callback", "{err}");
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("redacted"),
        "{err}"
    );
    let again = get_json(&http, &format!("{base}/v1/topics/hooks")).await;
    assert_eq!(again["config"], got["config"]);

    assert_eq!(leaked(&replies), Vec::<&str>::new(), "{replies}");

    // Stop it and read the whole log.
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(15);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "dq serve did not stop");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(
        log.contains("topic configured"),
        "the log has the lines that once held the secrets:\n{log}"
    );
    assert!(log.contains("whsec_…Io2w"), "{log}");
    assert_eq!(leaked(&log), Vec::<&str>::new(), "{log}");
}
