//! The client subcommands through the real binary against a real `dq serve`
//! (embedded store): the tour, `--json` output, and the inputs a careless
//! user gives (a JSON typo, a server without scheme, an unknown topic).

mod support;

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::{Value, json};
use support::Dq;

/// Runs `dq ARGS --server BASE`, with `stdin` as its input; (success, stdout, stderr).
fn dq(base: &str, args: &[&str], stdin: &str) -> (bool, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_dq"))
        .args(args)
        .args(["--server", base])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json_of(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_tour_and_its_refusals() {
    let dir = tempfile::tempdir().unwrap();
    let d = Dq::start_embedded(dir.path()).await;
    let base = d.base.as_str();
    // Without a scheme the server address still works.
    let bare = base.trim_start_matches("http://");

    // A JSON body is sent as written.
    let (ok, out, err) = dq(
        bare,
        &[
            "push",
            "orders",
            r#"{"order": 42,  "note": "é"}"#,
            "--id",
            "o42",
            "--delay",
            "30m",
            "--json",
        ],
        "",
    );
    assert!(ok, "{err}");
    let e = json_of(&out);
    assert_eq!(
        (e["id"].clone(), e["created"].clone()),
        (json!("o42"), json!(true))
    );
    let (s, v, _) = d
        .call(reqwest::Method::GET, "/v1/topics/orders/jobs/o42", None)
        .await;
    assert_eq!(s, 200);
    assert_eq!(v["body"], json!({"order": 42, "note": "é"}));

    // A typo is refused and writes nothing; --raw sends the text as a string.
    let (ok, _, err) = dq(
        base,
        &["push", "orders", r#"{"order": 45,}"#, "--id", "o45"],
        "",
    );
    assert!(!ok, "a body that is not JSON is refused");
    assert!(err.contains("--raw"), "{err}");
    let (s, _, _) = d
        .call(reqwest::Method::GET, "/v1/topics/orders/jobs/o45", None)
        .await;
    assert_eq!(s, 404, "nothing written");
    let (ok, _, err) = dq(
        base,
        &["push", "orders", "not json", "--raw", "--id", "raw"],
        "",
    );
    assert!(ok, "{err}");
    let (_, v, _) = d
        .call(reqwest::Method::GET, "/v1/topics/orders/jobs/raw", None)
        .await;
    assert_eq!(v["body"], json!("not json"));

    // `-` reads the body from stdin.
    let (ok, _, err) = dq(
        base,
        &["push", "orders", "-", "--id", "stdin"],
        "[1, 2, 3]\n",
    );
    assert!(ok, "{err}");
    let (_, v, _) = d
        .call(reqwest::Method::GET, "/v1/topics/orders/jobs/stdin", None)
        .await;
    assert_eq!(v["body"], json!([1, 2, 3]));

    // get, reschedule (by the server's clock), cancel.
    let (ok, out, err) = dq(base, &["get", "orders", "o42"], "");
    assert!(
        ok && out.contains("scheduled") && out.contains(r#""order": 42"#),
        "{out}{err}"
    );
    let (ok, out, err) = dq(
        base,
        &["reschedule", "orders", "o42", "--delay", "2h", "--json"],
        "",
    );
    assert!(ok, "{err}");
    let due = json_of(&out)["due_at_ms"].as_u64().unwrap();
    let (_, v, _) = d
        .call(reqwest::Method::GET, "/v1/topics/orders/jobs/o42", None)
        .await;
    assert_eq!(v["due_at_ms"].as_u64(), Some(due));
    let (ok, out, _) = dq(base, &["cancel", "orders", "o42"], "");
    assert!(ok && out.contains("cancelled (was scheduled)"), "{out}");
    let (ok, _, err) = dq(base, &["cancel", "orders", "o42"], "");
    assert!(!ok && err.contains("job_not_found"), "{err}");

    // Topic settings with the CLI's units, and the counts.
    let (ok, out, err) = dq(
        base,
        &[
            "topics",
            "put",
            "orders",
            "--max-attempts",
            "3",
            "--retry",
            "1m,3m",
            "--lease",
            "45s",
            "--json",
        ],
        "",
    );
    assert!(ok, "{err}");
    let c = &json_of(&out)["config"];
    assert_eq!(
        (
            c["max_attempts"].clone(),
            c["lease_ms"].clone(),
            c["retry"].clone()
        ),
        (
            json!(3),
            json!(45000),
            json!({"delays_ms": [60000, 180000]})
        )
    );
    let sources = &json_of(&out)["config_sources"];
    assert_eq!(
        (&sources["max_attempts"], &sources["dead_cap"]),
        (&json!("set"), &json!("default")),
        "{out}"
    );
    // The settings in effect, one a row, in the CLI's units, each with
    // where it comes from.
    let (ok, out, err) = dq(base, &["stats", "orders"], "");
    assert!(ok, "{err}");
    let row = |name: &str| {
        out.lines()
            .find(|l| l.split_whitespace().nth(1) == Some(name))
            .unwrap_or_else(|| panic!("no {name} row in {out}"))
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert!(row("retry").contains("1m,3m set"), "{out}");
    assert!(row("lease_ms").contains("45s set"), "{out}");
    assert!(row("max_attempts").contains(" 3 set"), "{out}");
    assert!(row("dead_cap").contains("default (pull)"), "{out}");
    assert!(row("delivery").contains("pull default (pull)"), "{out}");
    let (ok, out, _) = dq(base, &["stats", "--json"], "");
    assert!(ok);
    let topics = json_of(&out)["topics"].clone();
    assert_eq!(topics[0]["name"], "orders");
    let counters = &topics[0]["stats"]["counters"];
    assert_eq!(
        (counters["enqueued"].clone(), counters["cancelled"].clone()),
        (json!(3), json!(1)),
        "{topics}"
    );

    // Dead letters of a topic that does not exist: an error, not "0 replayed".
    for args in [
        &["dead", "list", "nosuch"][..],
        &["dead", "replay", "nosuch", "--yes"],
        &["dead", "purge", "nosuch", "--yes"],
    ] {
        let (ok, _, err) = dq(base, args, "");
        assert!(!ok && err.contains("topic_not_found"), "{args:?}: {err}");
    }
    // Replaying every dead letter asks first, as purge does: with no
    // terminal to ask on and no --yes, nothing is done.
    let (ok, _, err) = dq(base, &["dead", "replay", "orders"], "");
    assert!(!ok && err.contains("Not without --yes"), "{err}");
    let (ok, out, _) = dq(base, &["dead", "replay", "orders", "--yes"], "");
    assert!(ok && out.contains("0 replayed"), "{out}");

    // A consumer in a shell script: reserve, then ack or nack by token.
    let (ok, out, err) = dq(base, &["push", "work", "{\"n\": 1}", "--id", "w1"], "");
    assert!(ok, "{err}");
    let (ok, out2, err) = dq(base, &["push", "work", "{\"n\": 2}", "--id", "w2"], "");
    assert!(ok, "{out}{out2}{err}");
    let (ok, out, err) = dq(
        base,
        &["reserve", "work", "--max", "2", "--wait", "1s", "--json"],
        "",
    );
    assert!(ok, "{err}");
    let jobs = json_of(&out)["jobs"].as_array().unwrap().clone();
    assert_eq!(jobs.len(), 2, "{out}");
    let token = |id: &str| {
        jobs.iter()
            .find(|j| j["id"] == id)
            .and_then(|j| j["token"].as_str())
            .unwrap()
            .to_string()
    };
    let (ok, out, err) = dq(base, &["ack", "work", "w1", &token("w1")], "");
    assert!(ok && out.contains("w1 acked"), "{out}{err}");
    let (ok, _, err) = dq(base, &["ack", "work", "w1", &token("w1")], "");
    assert!(!ok && err.contains("not found"), "acked twice: {err}");
    let (ok, out, err) = dq(
        base,
        &[
            "nack",
            "work",
            "w2",
            &token("w2"),
            "--error",
            "boom",
            "--dead",
        ],
        "",
    );
    assert!(ok && out.contains("dead"), "{out}{err}");
    let (_, v, _) = d
        .call(reqwest::Method::GET, "/v1/topics/work/jobs/w2", None)
        .await;
    assert_eq!(
        (v["state"].clone(), v["last_error"].clone()),
        (json!("dead"), json!("boom"))
    );
    assert_eq!(
        (&v["errors"][0]["attempt"], &v["errors"][0]["error"]),
        (&json!(1), &json!("boom")),
        "each failed attempt: {v}"
    );
    assert!(v["errors"][0]["at_ms"].as_u64().unwrap() > 0, "{v}");
    let (ok, out, err) = dq(base, &["get", "work", "w2"], "");
    assert!(ok, "{err}");
    assert!(
        out.lines().any(|l| l.contains("errors")
            && l.contains("attempt 1 at ")
            && l.trim_end().ends_with("boom")),
        "{out}"
    );

    // Dead letters newest death first, as the admin page lists them, with
    // their bodies cut; --oldest-first in the API's order.
    let long = format!("{{\"note\": \"{}\"}}", "x".repeat(200));
    for id in ["d1", "d2", "d3"] {
        let (_, v, _) = d
            .call(
                reqwest::Method::POST,
                "/v1/topics/graves/jobs",
                Some(json!({"id": id, "body": serde_json::from_str::<Value>(&long).unwrap()})),
            )
            .await;
        assert_eq!(v["id"], id, "{v}");
        let (_, v, _) = d
            .call(
                reqwest::Method::POST,
                "/v1/reserve",
                Some(json!({"topics": ["graves"], "max": 1})),
            )
            .await;
        let token = v["jobs"][0]["token"].as_str().unwrap().to_string();
        let (ok, _, err) = dq(base, &["nack", "graves", id, &token, "--dead"], "");
        assert!(ok, "{err}");
    }
    let ids = |out: &str| -> Vec<String> {
        out.lines()
            .filter_map(|l| l.split_whitespace().nth(1))
            .filter(|w| w.starts_with('d') && w.len() == 2)
            .map(String::from)
            .collect()
    };
    let (ok, out, err) = dq(base, &["dead", "list", "graves"], "");
    assert!(ok, "{err}");
    assert_eq!(ids(&out), ["d3", "d2", "d1"], "{out}");
    assert!(
        out.contains(&format!("{{\"note\":\"{}…", "x".repeat(51))),
        "bodies cut: {out}"
    );
    let (_, out, _) = dq(base, &["dead", "list", "graves", "--oldest-first"], "");
    assert_eq!(ids(&out), ["d1", "d2", "d3"], "{out}");
    let (_, out, _) = dq(
        base,
        &["dead", "list", "graves", "--limit", "1", "--offset", "1"],
        "",
    );
    assert_eq!(ids(&out), ["d2"], "{out}");
    let (_, out, _) = dq(base, &["dead", "list", "graves", "--offset", "5"], "");
    assert!(ids(&out).is_empty(), "{out}");

    // Destructive commands ask; a script without --yes is refused and
    // nothing is deleted.
    let (ok, _, err) = dq(base, &["dead", "purge", "work"], "y\n");
    assert!(!ok && err.contains("--yes"), "{err}");
    let (ok, _, err) = dq(base, &["topics", "delete", "work"], "y\n");
    assert!(!ok && err.contains("--yes"), "{err}");
    let (s, _, _) = d
        .call(reqwest::Method::GET, "/v1/topics/work/jobs/w2", None)
        .await;
    assert_eq!(s, 200, "nothing deleted without --yes");
    let (ok, out, err) = dq(base, &["dead", "purge", "work", "--yes"], "");
    assert!(ok && out.contains("1 purged"), "{out}{err}");
    let (ok, out, err) = dq(base, &["topics", "delete", "work", "--yes"], "");
    assert!(ok && out.contains("work deleted"), "{out}{err}");

    // A server URL with another scheme says what is wrong.
    let (ok, _, err) = dq("ftp://127.0.0.1:1", &["stats"], "");
    assert!(!ok && err.contains("http://"), "{err}");
}

/// `dq topics put --rate-limit N/WINDOW [--rate-burst B]`, `--no-rate-limit`,
/// `dq topics pause|resume`: the settings as the API shows them; a paused
/// topic hands nothing out; an unknown topic is refused, not created; a bad
/// limit is the API's `invalid_rate_limit`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_flow_control_from_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let d = Dq::start_embedded(dir.path()).await;
    let base = d.base.as_str();
    let put = |args: &[&str]| {
        let mut all = vec!["topics", "put", "fc"];
        all.extend_from_slice(args);
        all.push("--json");
        dq(base, &all, "")
    };
    let (ok, out, err) = put(&["--rate-limit", "50/1s", "--rate-burst", "100"]);
    assert!(ok, "{err}");
    assert_eq!(
        json_of(&out)["config"]["rate_limit"],
        json!({"limit": 50, "per_ms": 1000, "burst": 100})
    );
    let (ok, _, err) = put(&["--rate-limit", "0/1s"]);
    assert!(!ok && err.contains("invalid_rate_limit"), "{err}");
    let (ok, _, err) = put(&["--rate-limit", "50"]);
    assert!(!ok && err.contains("N/WINDOW"), "{err}");

    d.post("/v1/topics/fc/jobs", json!({"id": "a"})).await;
    let (ok, out, err) = dq(base, &["topics", "pause", "fc"], "");
    assert!(ok && out.contains("fc paused"), "{out}{err}");
    let (_, v) = d
        .post("/v1/reserve", json!({"topics": ["fc"], "wait_ms": 100}))
        .await;
    assert_eq!(v["jobs"], json!([]), "paused: {v}");
    let (_, v) = d.get("/v1/topics/fc").await;
    assert_eq!(v["config"]["paused"], json!(true));
    let (ok, _, err) = dq(base, &["topics", "pause", "nope"], "");
    assert!(!ok && err.contains("topic_not_found"), "{err}");
    let (s, _) = d.get("/v1/topics/nope").await;
    assert_eq!(s, 404, "not created by a pause");
    let (ok, out, err) = dq(base, &["topics", "resume", "fc", "--json"], "");
    assert!(ok, "{err}");
    assert_eq!(json_of(&out)["config"]["paused"], json!(false));
    let (_, v) = d.post("/v1/reserve", json!({"topics": ["fc"]})).await;
    assert_eq!(v["jobs"][0]["id"], json!("a"));
    let (ok, out, err) = put(&["--no-rate-limit"]);
    assert!(ok, "{err}");
    assert!(json_of(&out)["config"].get("rate_limit").is_none(), "{out}");
}

/// `dq topics put --key-concurrency N --key-rate-limit N/WINDOW
/// [--key-rate-burst B]`, their `--no-…` forms, and `dq push --key`: the
/// settings as the API shows them, the key on the job, a key at its limit
/// holding its other jobs while another key goes; bad values are the API's
/// codes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_from_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let d = Dq::start_embedded(dir.path()).await;
    let base = d.base.as_str();
    let put = |args: &[&str]| {
        let mut all = vec!["topics", "put", "tenants"];
        all.extend_from_slice(args);
        all.push("--json");
        dq(base, &all, "")
    };
    let (ok, out, err) = put(&[
        "--key-concurrency",
        "1",
        "--key-rate-limit",
        "5/1s",
        "--key-rate-burst",
        "2",
    ]);
    assert!(ok, "{err}");
    let c = &json_of(&out)["config"];
    assert_eq!(c["key_concurrency"], json!(1));
    assert_eq!(
        c["key_rate_limit"],
        json!({"limit": 5, "per_ms": 1000, "burst": 2})
    );
    let (ok, _, err) = put(&["--key-concurrency", "0"]);
    assert!(!ok && err.contains("invalid_key_concurrency"), "{err}");
    let (ok, _, err) = put(&["--key-rate-limit", "5"]);
    assert!(
        !ok && err.contains("--key-rate-limit") && err.contains("N/WINDOW"),
        "{err}"
    );
    for (id, key) in [("a1", "a"), ("a2", "a"), ("b1", "b")] {
        let (ok, _, err) = dq(
            base,
            &["push", "tenants", "{}", "--id", id, "--key", key],
            "",
        );
        assert!(ok, "{err}");
    }
    let (ok, _, err) = dq(base, &["push", "tenants", "{}", "--key", "has space"], "");
    assert!(!ok && err.contains("invalid_key"), "{err}");
    let (_, v) = d.get("/v1/topics/tenants/jobs/a1").await;
    assert_eq!(v["key"], json!("a"), "{v}");
    let (_, v) = d
        .post("/v1/reserve", json!({"topics": ["tenants"], "max": 10}))
        .await;
    let mut got: Vec<&str> = v["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect();
    got.sort();
    assert_eq!(got, vec!["a1", "b1"], "one lease per key: {v}");
    let (ok, out, err) = put(&["--no-key-concurrency", "--no-key-rate-limit"]);
    assert!(ok, "{err}");
    let c = &json_of(&out)["config"];
    assert!(
        c.get("key_concurrency").is_none() && c.get("key_rate_limit").is_none(),
        "{c}"
    );
    let (_, v) = d
        .post("/v1/reserve", json!({"topics": ["tenants"], "max": 10}))
        .await;
    assert_eq!(v["jobs"][0]["id"], json!("a2"), "{v}");
}

/// Expiry from the CLI (issue #51): `dq enqueue` (the alias of `dq push`)
/// `--expires-in 10m` and `--expires-at`, shown by `dq get`; `dq topics
/// put --expires --on-expiry`; bad values are the API's codes, both flags
/// together refused by the CLI.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_from_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let d = Dq::start_embedded(dir.path()).await;
    let base = d.base.as_str();
    let (ok, out, err) = dq(
        base,
        &[
            "enqueue",
            "reminders",
            "{}",
            "--id",
            "r1",
            "--expires-in",
            "10m",
            "--json",
        ],
        "",
    );
    assert!(ok, "{err}");
    let due = json_of(&out)["due_at_ms"].as_u64().unwrap();
    let (_, v) = d.get("/v1/topics/reminders/jobs/r1").await;
    let at = v["expires_at_ms"].as_u64().unwrap();
    // Counted from the server's enqueue, which is the job's due time here.
    assert_eq!(at, due + 600_000, "{v}");
    let (ok, out, err) = dq(base, &["get", "reminders", "r1"], "");
    assert!(ok && out.contains("expires"), "{out}{err}");
    let (ok, _, err) = dq(
        base,
        &[
            "push",
            "reminders",
            "{}",
            "--expires-at",
            "2001-01-01T00:00:00Z",
        ],
        "",
    );
    assert!(!ok && err.contains("invalid_expiry"), "{err}");
    let (ok, _, err) = dq(
        base,
        &[
            "push",
            "reminders",
            "{}",
            "--delay",
            "1h",
            "--expires-in",
            "30m",
        ],
        "",
    );
    assert!(!ok && err.contains("invalid_expiry"), "{err}");
    let (ok, _, err) = dq(
        base,
        &[
            "push",
            "reminders",
            "{}",
            "--expires-in",
            "1m",
            "--expires-at",
            "2031-01-01T00:00:00Z",
        ],
        "",
    );
    assert!(!ok && err.contains("--expires-at"), "{err}");
    let (ok, out, err) = dq(
        base,
        &[
            "topics",
            "put",
            "reminders",
            "--expires",
            "1h",
            "--on-expiry",
            "drop",
            "--json",
        ],
        "",
    );
    assert!(ok, "{err}");
    let c = &json_of(&out)["config"];
    assert_eq!(
        (&c["expires_ms"], &c["on_expiry"]),
        (&json!(3_600_000), &json!("drop"))
    );
    let (ok, _, err) = dq(
        base,
        &["topics", "put", "reminders", "--on-expiry", "later"],
        "",
    );
    assert!(!ok && err.contains("--on-expiry"), "{err}");
}

/// `dq topics list` follows the pages by default (more topics than one
/// page of the client's), `--prefix` filters, `--limit N` prints one page
/// and where the next starts, `--cursor` goes on from there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_list_pages_and_filters() {
    let dir = tempfile::tempdir().unwrap();
    let d = Dq::start_embedded(dir.path()).await;
    let base = d.base.as_str();
    let mut names: Vec<String> = (0..1005).map(|i| format!("q{i:04}")).collect();
    names.push("other".into());
    names.sort();
    for chunk in names.chunks(50) {
        let paths: Vec<String> = chunk.iter().map(|n| format!("/v1/topics/{n}")).collect();
        let puts = paths
            .iter()
            .map(|p| d.call(reqwest::Method::PUT, p, Some(json!({}))));
        for (s, v, _) in futures::future::join_all(puts).await {
            assert_eq!(s, 200, "{v}");
        }
    }
    let listed = |out: &str| -> Vec<String> {
        json_of(out)["topics"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect()
    };
    let (ok, out, err) = dq(base, &["topics", "list", "--json"], "");
    assert!(ok, "{err}");
    assert_eq!(listed(&out), names, "every topic, over two pages");
    assert_eq!(json_of(&out)["next_cursor"], Value::Null);
    let (ok, out, err) = dq(base, &["topics", "list", "--prefix", "q100", "--json"], "");
    assert!(ok, "{err}");
    assert_eq!(listed(&out), names[1001..1006]);
    let (ok, out, err) = dq(base, &["topics", "--json"], "");
    assert!(ok, "{err}");
    assert_eq!(
        listed(&out).len(),
        names.len(),
        "`dq topics` alone lists all"
    );

    let (ok, out, err) = dq(
        base,
        &["topics", "list", "--prefix", "q", "--limit", "3", "--json"],
        "",
    );
    assert!(ok, "{err}");
    assert_eq!(listed(&out), names[1..4]);
    assert_eq!(json_of(&out)["next_cursor"], "q0002");
    let (ok, out, err) = dq(
        base,
        &["topics", "list", "--limit", "2", "--cursor", "q1003"],
        "",
    );
    assert!(ok, "{err}");
    assert!(out.contains("q1004"), "{out}");
    assert!(!out.contains("q1003") && !out.contains("other"), "{out}");
    assert!(err.is_empty(), "the last page: nothing follows: {err}");
    let (ok, _, err) = dq(base, &["topics", "list", "--limit", "1"], "");
    assert!(
        ok && err.contains("more topics follow: --cursor other"),
        "{err}"
    );

    for (args, code) in [
        (&["topics", "list", "--limit", "0"][..], "invalid_limit"),
        (&["topics", "list", "--limit", "1001"], "invalid_limit"),
        (&["topics", "list", "--prefix", "a b"], "invalid_prefix"),
    ] {
        let (ok, _, err) = dq(base, args, "");
        assert!(!ok && err.contains(code), "{args:?}: {err}");
    }
    let (ok, _, err) = dq(base, &["topics", "list", "--cursor", "q1"], "");
    assert!(
        !ok && err.contains("--limit"),
        "--cursor needs --limit: {err}"
    );
}

/// `auto_create_topics` off (flag or environment): an enqueue,
/// batch or reserve naming a topic nobody created answers 404
/// `topic_not_found` and creates nothing, on both stores; a topic made
/// with `dq topics put` takes jobs. On (the default), a reserve's answer
/// names the topics nobody created, and `dq reserve` warns of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn topics_nobody_created_are_refused_or_named() {
    let redis = dq_testkit::RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data = data.to_str().unwrap();
    let url = redis.url();
    // The file's key is read as the flag is (config.rs's tests).
    let off = [
        (
            None,
            vec!["--data-dir", data, "--auto-create-topics", "false"],
        ),
        (
            Some(("DQ_AUTO_CREATE_TOPICS", "false")),
            vec!["--redis", &url],
        ),
    ];
    for (n, (env, args)) in off.into_iter().enumerate() {
        let server = Dq::start_env(env.as_slice(), &args).await;
        let t = format!("orders{n}");
        let refused = [
            (format!("/v1/topics/{t}/jobs"), json!({"body": 1})),
            (
                format!("/v1/topics/{t}/jobs:batch"),
                json!({"jobs": [{"body": 1}]}),
            ),
            (
                "/v1/reserve".to_string(),
                json!({"topics": [&t], "wait_ms": 0}),
            ),
        ];
        for (path, body) in &refused {
            let (s, v) = server.post(path, body.clone()).await;
            assert_eq!(
                (s, v["error"]["code"].as_str()),
                (404, Some("topic_not_found")),
                "{args:?} {path}: {v}"
            );
            assert!(v["error"]["message"].as_str().unwrap().contains(&t), "{v}");
        }
        let (_, list) = server.get("/v1/topics").await;
        assert_eq!(list["topics"], json!([]), "{args:?}: {list}");
        let (ok, _, err) = dq(
            &server.base,
            &["topics", "put", &t, "--max-attempts", "3"],
            "",
        );
        assert!(ok, "{err}");
        for (path, body) in &refused {
            let (s, v) = server.post(path, body.clone()).await;
            assert!(s == 200 || s == 201, "{args:?} {path}: {v}");
        }
    }

    for server in [
        Dq::start_embedded(&dir.path().join("on")).await,
        Dq::start(&url).await,
    ] {
        let (s, _) = server
            .post("/v1/topics/orders/jobs", json!({"body": 1}))
            .await;
        assert_eq!(s, 201);
        let (s, v) = server
            .post(
                "/v1/reserve",
                json!({"topics": ["ordres", "orders", "nope"], "wait_ms": 0}),
            )
            .await;
        assert_eq!(s, 200, "{v}");
        assert_eq!(v["unknown_topics"], json!(["ordres", "nope"]), "{v}");
        assert_eq!(v["jobs"].as_array().unwrap().len(), 1, "{v}");
        // Created by its first enqueue: known at once, and the field left out.
        let (s, _) = server
            .post("/v1/topics/nope/jobs", json!({"body": 1}))
            .await;
        assert_eq!(s, 201);
        let (_, v) = server
            .post("/v1/reserve", json!({"topics": ["nope"], "wait_ms": 0}))
            .await;
        assert!(v.get("unknown_topics").is_none(), "{v}");
        assert_eq!(v["jobs"].as_array().unwrap().len(), 1, "{v}");
        let (ok, _, err) = dq(&server.base, &["reserve", "ordres", "--wait", "0s"], "");
        assert!(ok, "{err}");
        assert!(err.contains("no topic named \"ordres\""), "{err}");
    }
}

/// A command's `--help` lists its own flags first and the connection flags
/// (`--server`, `--token`, `--json`, `--cacert`) apart, under their heading.
#[test]
fn help_lists_connection_flags_apart() {
    for cmd in [&["topics", "put"][..], &["reserve"], &["dead", "replay"]] {
        let out = Command::new(env!("CARGO_BIN_EXE_dq"))
            .args(cmd)
            .arg("--help")
            .output()
            .unwrap();
        let help = String::from_utf8_lossy(&out.stdout);
        let heading = help
            .find("Connection options:")
            .unwrap_or_else(|| panic!("{cmd:?}: no heading:\n{help}"));
        for flag in ["--server", "--token", "--json", "--cacert"] {
            let at = help.find(flag).unwrap_or_else(|| panic!("{cmd:?}: {flag}"));
            assert!(at > heading, "{cmd:?}: {flag} before the heading:\n{help}");
        }
    }
}
