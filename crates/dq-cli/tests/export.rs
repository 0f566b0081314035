//! `dq export` and `dq import` through the real binary: the move from an
//! embedded store to a Redis-backed one (docs/operations.md's recipe).
//! Jobs in every state (scheduled soon and far, ready, reserved, dead with
//! its error, one with attempts and its own settings, JSON and bytes
//! bodies), topic settings (one with push credentials) and a schedule go
//! from an embedded server to a Redis one; exporting that one again gives
//! the same jobs, states, due times, attempts and dead letters; importing
//! twice changes nothing. Then every ordered pair of the embedded store,
//! one Redis and PostgreSQL.

mod support;

use std::collections::BTreeMap;
use std::process::{Command, Output, Stdio};

use dq_testkit::RedisServer;
use serde_json::{Value, json};
use support::Dq;

/// A JSON body whose text a parse-and-print would change.
const SOON: &str = r#"{"n": 1.50, "s": "\u00e9"}"#;

fn dq(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dq"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run dq")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `dq export --server URL [more]` into `file`; its stderr.
fn export(base: &str, file: &std::path::Path, more: &[&str]) -> String {
    let mut args = vec!["export", "--server", base];
    args.extend_from_slice(more);
    let out = dq(&args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    std::fs::write(file, &out.stdout).unwrap();
    text(&out.stderr)
}

/// `dq import --server URL file`; its stderr.
fn import(base: &str, file: &std::path::Path) -> String {
    let out = dq(&["import", "--server", base, file.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stderr)
}

/// The lines of an export file, by kind.
fn lines(file: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The jobs of an export by (topic, id), their waiting states as one: a
/// scheduled job whose due time passed is ready, and a reserved job is
/// exported as ready at its lease deadline (scheduled until then once
/// imported), so "waiting" is what both stores agree on.
fn jobs(lines: &[Value]) -> BTreeMap<(String, String), Value> {
    lines
        .iter()
        .filter(|l| l["kind"] == "job")
        .map(|l| {
            let mut j = l["job"].clone();
            if j["state"] == "scheduled" || j["state"] == "ready" {
                j["state"] = json!("waiting");
            }
            (
                (
                    l["topic"].as_str().unwrap().to_string(),
                    j["id"].as_str().unwrap().to_string(),
                ),
                j,
            )
        })
        .collect()
}

fn of_kind(lines: &[Value], kind: &str) -> Vec<Value> {
    lines
        .iter()
        .filter(|l| l["kind"] == kind)
        .cloned()
        .collect()
}

/// Reserves the next job of `topic` (lease `lease_ms`) on `dq`.
async fn reserve(d: &Dq, topic: &str, lease_ms: u64) -> Value {
    let (s, v) = d
        .post(
            "/v1/reserve",
            json!({"topics": [topic], "max": 1, "lease_ms": lease_ms}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    v["jobs"][0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_to_redis_keeps_every_job_and_a_second_import_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let src = Dq::start_embedded(&dir.path().join("data")).await;
    let put = |path: &str, body: Value| {
        let (src, path) = (&src, path.to_string());
        async move {
            let (s, v, _) = src.call(reqwest::Method::PUT, &path, Some(body)).await;
            assert!(s == 200 || s == 201, "{path}: {s} {v}");
        }
    };
    put(
        "/v1/topics/orders",
        json!({"max_attempts": 5, "lease_ms": 60_000, "dead_cap": 1000, "retry": {"fixed_ms": 1000}}),
    )
    .await;
    put(
        "/v1/topics/hooks",
        json!({"delivery": {"mode": "push", "url": "http://127.0.0.1:9/hook",
            "secrets": ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"], "headers": {"X-Api-Key": "k-123456789"}}}),
    )
    .await;
    // Reserved, failed once (scheduled again, attempts 1, its error), dead.
    for (id, priority) in [("held", 1), ("tried", 2), ("dead", 3)] {
        let (s, v) = src
            .post(
                "/v1/topics/orders/jobs",
                json!({"id": id, "body": {"order": id}, "priority": priority}),
            )
            .await;
        assert_eq!(s, 201, "{v}");
    }
    let held = reserve(&src, "orders", 600_000).await;
    assert_eq!(held["id"], "held");
    let tried = reserve(&src, "orders", 600_000).await;
    assert_eq!(tried["id"], "tried");
    let (s, v) = src
        .post(
            "/v1/topics/orders/jobs/tried/nack",
            json!({"token": tried["token"], "error": "gateway timeout", "retry_in_ms": 3_600_000}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let dead = reserve(&src, "orders", 600_000).await;
    assert_eq!(dead["id"], "dead");
    let (s, v) = src
        .post(
            "/v1/topics/orders/jobs/dead/nack",
            json!({"token": dead["token"], "error": "card declined", "dead": true}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let (s, v) = src
        .post(
            "/v1/topics/orders/jobs:batch",
            json!({"jobs": [
                {"id": "far", "body": [1, 2], "delay_ms": 3 * 86_400_000u64},
                {"id": "bytes", "body_base64": "AP8Q", "max_attempts": 9, "lease_ms": 5000,
                 "retry": {"delays_ms": [10, 20]}},
            ]}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    // A JSON body as text, kept byte for byte (spacing, 1.50, the escape).
    let res = src
        .http
        .post(format!("{}/v1/topics/orders/jobs", src.base))
        .header("content-type", "application/json")
        .body(format!(
            r#"{{"id": "soon", "delay_ms": 50000, "body": {SOON}}}"#
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201);
    put(
        "/v1/schedules/nightly",
        json!({"topic": "orders", "cron": "0 3 * * *", "timezone": "Europe/Berlin"}),
    )
    .await;

    // The recipe: drain the old server (it hands nothing out any more),
    // then export.
    let out = dq(&["drain", "--server", &src.base, "--wait", "1s"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let file = dir.path().join("export.jsonl");
    let said = export(&src.base, &file, &[]);
    let first = lines(&file);
    assert_eq!(first[0]["kind"], "header");
    assert_eq!(first[0]["version"], 1);
    let end = first.last().unwrap();
    assert_eq!(end["kind"], "end");
    let exported = jobs(&first);
    // held, tried, dead, soon, far, bytes (the schedule fires at 03:00
    // only: no job of it yet).
    assert_eq!(exported.len(), 6, "{exported:?}");
    assert_eq!(end["jobs"], 6);
    assert!(
        said.contains("exported 6 jobs, 2 topics, 1 schedules"),
        "{said}"
    );
    assert!(
        said.contains("hooks") && said.contains("redacted"),
        "names the topic whose credentials must be set again: {said}"
    );
    assert!(
        !std::fs::read_to_string(&file)
            .unwrap()
            .contains("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
        "no secret in the file"
    );
    let key = |id: &str| ("orders".to_string(), id.to_string());
    let h = &exported[&key("held")];
    assert_eq!(h["state"], "waiting", "reserved is exported as ready");
    assert_eq!(
        h["due_at_ms"], held["lease_deadline_ms"],
        "at its lease deadline"
    );
    assert_eq!(h["attempts"], 1);
    assert!(h.get("lease_deadline_ms").is_none());
    let t = &exported[&key("tried")];
    assert_eq!(
        (t["attempts"].clone(), t["last_error"].clone()),
        (json!(1), json!("gateway timeout"))
    );
    let d = &exported[&key("dead")];
    assert_eq!(d["state"], "dead");
    assert_eq!(d["last_error"], "card declined");
    assert!(d["died_at_ms"].as_u64().is_some());
    assert_eq!(exported[&key("bytes")]["body_base64"], "AP8Q");
    assert_eq!(
        exported[&key("bytes")]["retry"],
        json!({"delays_ms": [10, 20]})
    );
    assert_eq!(exported[&key("bytes")]["max_attempts"], 9);
    let raw = std::fs::read_to_string(&file).unwrap();
    assert!(
        raw.contains(&format!(r#""body":{SOON}"#)),
        "a JSON body as it was sent: {raw}"
    );

    // Into a Redis-backed server.
    let redis = RedisServer::start();
    let dst = Dq::start(&redis.url()).await;
    let said = import(&dst.base, &file);
    assert!(
        said.contains("imported 6 jobs (6 created, 0 already there, 0 in their dedup window), 2 topics, 1 schedules"),
        "{said}"
    );
    assert!(
        said.contains("hooks"),
        "says the push delivery was not imported: {said}"
    );
    let (_, g) = dst.get("/v1/topics/orders/jobs/dead").await;
    assert_eq!(
        (
            g["state"].clone(),
            g["last_error"].clone(),
            g["attempts"].clone()
        ),
        (json!("dead"), json!("card declined"), json!(1))
    );
    let (_, dl) = dst.get("/v1/topics/orders/dead").await;
    assert_eq!(dl["jobs"].as_array().unwrap().len(), 1, "{dl}");

    let again = dir.path().join("again.jsonl");
    export(&dst.base, &again, &[]);
    let second = lines(&again);
    assert!(
        std::fs::read_to_string(&again)
            .unwrap()
            .contains(&format!(r#""body":{SOON}"#)),
        "and as it was sent after the move"
    );
    assert_eq!(
        jobs(&second),
        exported,
        "the same jobs, states, due times, attempts, dead letters"
    );
    assert_eq!(of_kind(&second, "schedule"), of_kind(&first, "schedule"));
    let topics = |l: &[Value]| -> BTreeMap<String, Value> {
        of_kind(l, "topic")
            .into_iter()
            .map(|t| (t["name"].as_str().unwrap().to_string(), t["config"].clone()))
            .collect()
    };
    // The comparison docs/operations.md gives, where jq is installed.
    if Command::new("jq").arg("--version").output().is_ok() {
        let norm = r#"select(.kind=="job") | .job + {topic: .topic} | .state |= (if . == "dead" then . else "waiting" end)"#;
        let script = format!(
            "diff <(jq -cS '{norm}' {a} | sort) <(jq -cS '{norm}' {b} | sort) && echo same",
            a = file.display(),
            b = again.display()
        );
        let out = Command::new("bash").args(["-c", &script]).output().unwrap();
        assert_eq!(text(&out.stdout).trim(), "same", "{}", text(&out.stderr));
    }
    let (a, b) = (topics(&first), topics(&second));
    assert_eq!(a["orders"], b["orders"], "settings kept");
    assert_eq!(
        b["hooks"]["delivery"]["mode"], "pull",
        "credentials are not copied"
    );

    // A second import: nothing changes.
    let (_, before) = dst.get("/v1/topics/orders").await;
    let said = import(&dst.base, &file);
    assert!(said.contains("(0 created, 6 already there"), "{said}");
    let third = dir.path().join("third.jsonl");
    export(&dst.base, &third, &[]);
    assert_eq!(jobs(&lines(&third)), jobs(&second));
    let (_, after) = dst.get("/v1/topics/orders").await;
    assert_eq!(after["stats"]["counters"], before["stats"]["counters"]);
    assert_eq!(after["config"], before["config"]);

    // One topic only.
    let one = dir.path().join("one.jsonl");
    export(&src.base, &one, &["--topic", "hooks"]);
    let l = lines(&one);
    assert_eq!(of_kind(&l, "topic").len(), 1);
    assert!(
        of_kind(&l, "schedule").is_empty(),
        "orders' schedule left out"
    );
    assert!(of_kind(&l, "job").is_empty());
}

/// An import refuses what dq export did not write, and a record it cannot
/// take (a dead letter without its death time), with the line; a file cut
/// short imports what it holds and says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_refuses_foreign_and_cut_files() {
    let dir = tempfile::tempdir().unwrap();
    let d = Dq::start_embedded(&dir.path().join("data")).await;
    let file = dir.path().join("f.jsonl");
    std::fs::write(&file, "{\"kind\":\"job\",\"topic\":\"t\"}\n").unwrap();
    let out = dq(&["import", "--server", &d.base, file.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("not a dq export header"),
        "{}",
        text(&out.stderr)
    );

    let header = r#"{"kind":"header","format":"dq-export","version":1,"exported_at_ms":1}"#;
    let job = r#"{"kind":"job","topic":"t","job":{"id":"a","state":"ready","due_at_ms":1,"priority":1,"attempts":0}}"#;
    std::fs::write(&file, format!("{header}\n{job}\n")).unwrap();
    let out = dq(&["import", "--server", &d.base, file.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("cut short"),
        "{}",
        text(&out.stderr)
    );
    let (s, _) = d.get("/v1/topics/t/jobs/a").await;
    assert_eq!(s, 200, "what the file held is imported");

    let bad = r#"{"kind":"job","topic":"t","job":{"id":"r","state":"dead","due_at_ms":1,"priority":1,"attempts":0}}"#;
    std::fs::write(&file, format!("{header}\n{bad}\n")).unwrap();
    let out = dq(&["import", "--server", &d.base, file.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("invalid_died_at") && err.contains("lines 2-2"),
        "{err}"
    );

    std::fs::write(
        &file,
        r#"{"kind":"header","format":"dq-export","version":9,"exported_at_ms":1}"#,
    )
    .unwrap();
    let out = dq(&["import", "--server", &d.base, file.to_str().unwrap()]);
    assert!(
        text(&out.stderr).contains("newer dq"),
        "{}",
        text(&out.stderr)
    );
}

/// The stores an export moves between, one `dq serve` each.
enum Kind {
    Embedded,
    Redis,
    Postgres,
}

impl Kind {
    fn name(&self) -> &'static str {
        match self {
            Kind::Embedded => "embedded",
            Kind::Redis => "redis",
            Kind::Postgres => "postgres",
        }
    }
}

/// Writes into `d`, under topic `{p}.orders` and schedule `{p}.nightly`,
/// the jobs a move must keep: reserved, failed once (its error, attempts
/// 1), dead (its error and death time), ready, scheduled soon and far, a
/// JSON body as text, a bytes body with its own settings, flow-control keys,
/// priorities and a dedup window.
async fn seed(d: &Dq, p: &str) {
    let topic = format!("{p}.orders");
    let (s, v, _) = d
        .call(
            reqwest::Method::PUT,
            &format!("/v1/topics/{topic}"),
            Some(
                json!({"max_attempts": 5, "lease_ms": 60_000, "dead_cap": 1000,
                "retry": {"fixed_ms": 1000}}),
            ),
        )
        .await;
    assert!(s == 200 || s == 201, "{p}: {s} {v}");
    let jobs = format!("/v1/topics/{topic}/jobs");
    for (id, priority) in [("held", 1), ("tried", 2), ("dead", 3)] {
        let (s, v) = d
            .post(
                &jobs,
                json!({"id": id, "body": {"order": id}, "priority": priority, "key": "customer-1"}),
            )
            .await;
        assert_eq!(s, 201, "{p}: {v}");
    }
    let held = reserve(d, &topic, 600_000).await;
    assert_eq!(held["id"], "held", "{p}");
    let tried = reserve(d, &topic, 600_000).await;
    assert_eq!(tried["id"], "tried", "{p}");
    let (s, v) = d
        .post(
            &format!("{jobs}/tried/nack"),
            json!({"token": tried["token"], "error": "gateway timeout", "retry_in_ms": 3_600_000}),
        )
        .await;
    assert_eq!(s, 200, "{p}: {v}");
    let dead = reserve(d, &topic, 600_000).await;
    assert_eq!(dead["id"], "dead", "{p}");
    let (s, v) = d
        .post(
            &format!("{jobs}/dead/nack"),
            json!({"token": dead["token"], "error": "card declined", "dead": true}),
        )
        .await;
    assert_eq!(s, 200, "{p}: {v}");
    let (s, v) = d
        .post(
            &format!("{jobs}:batch"),
            json!({"jobs": [
                {"id": "ready", "body": "now", "priority": 7, "key": "customer-2"},
                {"id": "far", "body": [1, 2], "delay_ms": 3 * 86_400_000u64, "priority": 0},
                {"id": "keyed", "body": {"k": true}, "delay_ms": 600_000, "key": "customer-3",
                 "dedup_ms": 3_600_000, "priority": 4_000_000_000u64},
                {"id": "bytes", "body_base64": "AP8Q", "max_attempts": 9, "lease_ms": 5000,
                 "retry": {"delays_ms": [10, 20]}, "delay_ms": 900_000},
            ]}),
        )
        .await;
    assert_eq!(s, 200, "{p}: {v}");
    let res = d
        .http
        .post(format!("{}{jobs}", d.base))
        .header("content-type", "application/json")
        .body(format!(
            r#"{{"id": "soon", "delay_ms": 120000, "body": {SOON}}}"#
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 201, "{p}");
    let (s, v, _) = d
        .call(
            reqwest::Method::PUT,
            &format!("/v1/schedules/{p}.nightly"),
            Some(json!({"topic": topic, "cron": "0 3 * * *", "timezone": "Europe/Berlin"})),
        )
        .await;
    assert!(s == 200 || s == 201, "{p}: {s} {v}");
}

/// Every ordered pair of the embedded store, one Redis and PostgreSQL:
/// each server is seeded under its own names and exported; each export is
/// imported into the two other servers; an export of the imported topic
/// there gives the same jobs (states, due times, priorities, attempts,
/// errors, death times, keys, dedup windows, job settings, bodies as
/// sent), the same topic settings and the same schedule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_store_exports_into_every_other_store_the_same_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start();
    let pg_url = dq_testkit::PgServer::shared().fresh_database("export");
    let servers = [
        (
            Kind::Embedded,
            Dq::start_embedded(&dir.path().join("data")).await,
        ),
        (Kind::Redis, Dq::start(&redis.url()).await),
        (
            Kind::Postgres,
            Dq::start_with(&["--postgres", &pg_url]).await,
        ),
    ];
    let mut files = Vec::new();
    for (kind, d) in &servers {
        seed(d, kind.name()).await;
        let file = dir.path().join(format!("{}.jsonl", kind.name()));
        let said = export(&d.base, &file, &[]);
        assert!(
            said.contains("exported 8 jobs, 1 topics, 1 schedules"),
            "{}: {said}",
            kind.name()
        );
        files.push(file);
    }
    let topic_config = |l: &[Value]| of_kind(l, "topic")[0]["config"].clone();
    for (from, file) in servers.iter().map(|(k, _)| k).zip(&files) {
        let sent = lines(file);
        let sent_jobs = jobs(&sent);
        assert_eq!(sent_jobs.len(), 8, "{}", from.name());
        // What the file carries, so that "the same" means something.
        let job = |id: &str| &sent_jobs[&(format!("{}.orders", from.name()), id.to_string())];
        let (keyed, dead, tried, held) = (job("keyed"), job("dead"), job("tried"), job("held"));
        assert_eq!(
            (
                &keyed["key"],
                &keyed["dedup_ms"],
                &keyed["priority"],
                &keyed["state"]
            ),
            (
                &json!("customer-3"),
                &json!(3_600_000),
                &json!(4_000_000_000u64),
                &json!("waiting")
            ),
            "{}: {keyed}",
            from.name()
        );
        assert_eq!(
            (&dead["state"], &dead["last_error"], &dead["key"]),
            (
                &json!("dead"),
                &json!("card declined"),
                &json!("customer-1")
            ),
            "{}: {dead}",
            from.name()
        );
        assert!(dead["died_at_ms"].as_u64().is_some(), "{dead}");
        assert_eq!(
            (&tried["attempts"], &tried["last_error"]),
            (&json!(1), &json!("gateway timeout")),
            "{tried}"
        );
        assert_eq!(
            (&held["attempts"], &held["priority"]),
            (&json!(1), &json!(1)),
            "{held}"
        );
        assert_eq!(job("bytes")["retry"], json!({"delays_ms": [10, 20]}));
        for (to, d) in servers.iter().filter(|(k, _)| k.name() != from.name()) {
            let pair = format!("{} → {}", from.name(), to.name());
            let said = import(&d.base, file);
            assert!(
                said.contains("imported 8 jobs (8 created, 0 already there, 0 in their dedup window), 1 topics, 1 schedules"),
                "{pair}: {said}"
            );
            let back = dir
                .path()
                .join(format!("{}-in-{}.jsonl", from.name(), to.name()));
            export(
                &d.base,
                &back,
                &["--topic", &format!("{}.orders", from.name())],
            );
            let got = lines(&back);
            assert_eq!(jobs(&got), jobs(&sent), "{pair}: the jobs");
            assert_eq!(topic_config(&got), topic_config(&sent), "{pair}: settings");
            assert_eq!(
                of_kind(&got, "schedule"),
                of_kind(&sent, "schedule"),
                "{pair}: the schedule"
            );
            assert!(
                std::fs::read_to_string(&back)
                    .unwrap()
                    .contains(&format!(r#""body":{SOON}"#)),
                "{pair}: a JSON body as it was sent"
            );
        }
    }
}
