//! Operations on an instance through the real router: `POST
//! /v1/admin/drain` (reserves refused with 503 `draining`, a waiting reserve
//! let go, `/readyz` 503 `draining`, leases held go on being acked) and
//! `POST /v1/admin/backup` (a copy of the embedded store that restores; each
//! refusal with its code; Redis refused), and who may call them.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::ConnectInfo;
use axum::http::StatusCode;
use dq_core::SystemClock;
use dq_embedded::EmbeddedStore;
use dq_server::{AppState, app};
use dq_testkit::http::Api;
use serde_json::{Value, json};

/// The router over a fresh embedded store (which backs itself up), with
/// `token` as admin token.
fn embedded(token: Option<&str>) -> (Api, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let store = EmbeddedStore::open(&data).unwrap();
    let mut state = AppState::new(Arc::new(store), Arc::new(SystemClock), support::limits());
    state.admin = Arc::new(dq_server::auth::AdminAuth::new(token.map(str::to_string)));
    let root = dir.path().to_path_buf();
    (Api::new(app(state, support::MAX_REQUEST_BYTES), dir), root)
}

const LOOPBACK: &str = "127.0.0.1:5000";

/// `method uri` with `body`, from `peer`, with an optional bearer token.
async fn call(
    api: &Api,
    peer: &str,
    bearer: Option<&str>,
    method: &str,
    uri: &str,
    body: Value,
) -> (StatusCode, Value) {
    let r = support::request_from(api, peer, bearer, method, uri, body).await;
    (r.status, r.json())
}

async fn local(api: &Api, method: &str, uri: &str, body: Value) -> (StatusCode, Value) {
    call(api, LOOPBACK, None, method, uri, body).await
}

fn code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or("")
}

#[tokio::test]
async fn a_drained_instance_hands_out_nothing_and_says_so_on_readyz() {
    let (api, _) = embedded(None);
    for id in ["held", "waiting"] {
        let (s, _) = local(&api, "POST", "/v1/topics/t/jobs", json!({"id": id})).await;
        assert_eq!(s, StatusCode::CREATED);
    }
    let (_, v) = local(
        &api,
        "POST",
        "/v1/reserve",
        json!({"topics": ["t"], "max": 1}),
    )
    .await;
    let held = v["jobs"][0].clone();
    assert_eq!(held["id"], "held");
    let (s, v) = local(&api, "GET", "/readyz", Value::Null).await;
    assert_eq!((s, v["status"].as_str()), (StatusCode::OK, Some("ready")));

    // A reserve waiting on an empty topic when the drain comes is let go.
    let waiting = {
        let api = api.router();
        tokio::spawn(async move {
            let t0 = Instant::now();
            let mut req = dq_testkit::http::post_json(
                "/v1/reserve",
                json!({"topics": ["empty"], "wait_ms": 20000}).to_string(),
            );
            req.extensions_mut()
                .insert(ConnectInfo(LOOPBACK.parse::<SocketAddr>().unwrap()));
            let r = dq_testkit::http::send(api, req).await;
            (r.status, r.json(), t0.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;

    for wait in [json!(-1), json!(600_001)] {
        let (s, v) = local(&api, "POST", "/v1/admin/drain", json!({ "wait_ms": wait })).await;
        assert_eq!(
            (s, code(&v)),
            (StatusCode::BAD_REQUEST, "invalid_wait"),
            "{v}"
        );
    }
    let (s, v) = local(
        &api,
        "POST",
        "/v1/admin/drain",
        json!({"wait_ms": 1000, "x": 1}),
    )
    .await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::BAD_REQUEST, "invalid_json"),
        "{v}"
    );
    let (s, _) = local(&api, "GET", "/readyz", Value::Null).await;
    assert_eq!(s, StatusCode::OK, "a refused drain changes nothing");

    let (s, v) = local(&api, "POST", "/v1/admin/drain", Value::Null).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        v,
        json!({"draining": true, "in_flight": 0, "drained": true})
    );

    let (s, v, took) = waiting.await.unwrap();
    assert_eq!((s, v["jobs"].clone()), (StatusCode::OK, json!([])), "{v}");
    assert!(
        took < Duration::from_secs(5),
        "let go at the drain: {took:?}"
    );

    let (s, v) = local(&api, "POST", "/v1/reserve", json!({"topics": ["t"]})).await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::SERVICE_UNAVAILABLE, "draining"),
        "{v}"
    );
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("reserve on another")
    );
    let (s, v) = local(&api, "GET", "/readyz", Value::Null).await;
    assert_eq!(s, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(v["status"], "draining", "{v}");
    assert_eq!(code(&v), "draining");
    assert_eq!(v["stores"][0]["up"], true, "the store's health still shown");
    let (s, _) = local(&api, "GET", "/healthz", Value::Null).await;
    assert_eq!(s, StatusCode::OK, "the process is alive");

    // What consumers hold they still finish; enqueues still go in.
    let (s, v) = local(
        &api,
        "POST",
        "/v1/topics/t/jobs/held/ack",
        json!({"token": held["token"]}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (s, _) = local(&api, "POST", "/v1/topics/t/jobs", json!({"id": "new"})).await;
    assert_eq!(s, StatusCode::CREATED);
    // Asked again: the same answer.
    let (s, v) = local(&api, "POST", "/v1/admin/drain", json!({"wait_ms": 10})).await;
    assert_eq!((s, v["drained"].clone()), (StatusCode::OK, json!(true)));
}

#[tokio::test]
async fn operations_are_the_admins_alone() {
    let (api, root) = embedded(None);
    let backup = json!({"path": root.join("b").to_str().unwrap()});
    for (uri, body) in [
        ("/v1/admin/drain", json!({})),
        ("/v1/admin/backup", backup.clone()),
    ] {
        let (s, v) = call(&api, "10.1.2.3:5000", None, "POST", uri, body).await;
        assert_eq!(
            (s, code(&v)),
            (StatusCode::FORBIDDEN, "admin_loopback_only"),
            "{uri}: {v}"
        );
    }
    let (s, _) = local(&api, "GET", "/readyz", Value::Null).await;
    assert_eq!(s, StatusCode::OK, "not drained by a refused call");
    assert!(!root.join("b").exists());

    let (api, _) = embedded(Some("s3cret"));
    for peer in [LOOPBACK, "10.1.2.3:5000"] {
        let (s, v) = call(&api, peer, None, "POST", "/v1/admin/drain", json!({})).await;
        assert_eq!(
            (s, code(&v)),
            (StatusCode::UNAUTHORIZED, "unauthorized"),
            "{v}"
        );
        let (s, v) = call(
            &api,
            peer,
            Some("wrong"),
            "POST",
            "/v1/admin/drain",
            json!({}),
        )
        .await;
        assert_eq!(
            (s, code(&v)),
            (StatusCode::UNAUTHORIZED, "unauthorized"),
            "{v}"
        );
    }
    let (s, v) = call(
        &api,
        "10.1.2.3:5000",
        Some("s3cret"),
        "POST",
        "/v1/admin/drain",
        json!({}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
}

#[tokio::test]
async fn a_backup_through_the_api_restores_and_each_refusal_has_its_code() {
    let (api, root) = embedded(None);
    let (s, _) = local(
        &api,
        "POST",
        "/v1/topics/t/jobs",
        json!({"id": "kept", "delay_ms": 60000}),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED);
    let out = root.join("dq.backup");
    let taken = root.join("taken");
    std::fs::write(&taken, "x").unwrap();
    let cases = [
        (
            json!({"path": "relative/file"}),
            StatusCode::BAD_REQUEST,
            "invalid_backup_path",
        ),
        (
            json!({"path": ""}),
            StatusCode::BAD_REQUEST,
            "invalid_backup_path",
        ),
        (
            json!({"path": root.join("no/such/dir/f").to_str().unwrap()}),
            StatusCode::BAD_REQUEST,
            "invalid_backup_path",
        ),
        (
            json!({"path": "/"}),
            StatusCode::BAD_REQUEST,
            "invalid_backup_path",
        ),
        (
            json!({"path": taken.to_str().unwrap()}),
            StatusCode::CONFLICT,
            "backup_exists",
        ),
        (json!({}), StatusCode::BAD_REQUEST, "invalid_json"),
        (json!({"path": 1}), StatusCode::BAD_REQUEST, "invalid_json"),
    ];
    for (body, status, want) in cases {
        let (s, v) = local(&api, "POST", "/v1/admin/backup", body.clone()).await;
        assert_eq!((s, code(&v)), (status, want), "{body}: {v}");
    }
    assert_eq!(std::fs::read_to_string(&taken).unwrap(), "x");

    let (s, v) = local(
        &api,
        "POST",
        "/v1/admin/backup",
        json!({"path": out.to_str().unwrap()}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["path"], out.to_str().unwrap());
    assert_eq!(v["schema_version"], dq_embedded::SCHEMA_VERSION);
    assert_eq!(v["bytes"], std::fs::metadata(&out).unwrap().len());
    let (s, v) = local(
        &api,
        "POST",
        "/v1/admin/backup",
        json!({"path": out.to_str().unwrap()}),
    )
    .await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::CONFLICT, "backup_exists"),
        "{v}"
    );

    let restored = root.join("restored");
    dq_embedded::backup::restore(&out, &restored, false, &mut |_| {}).unwrap();
    // A process another test spawns at that moment shares the restore's
    // lock file until it execs (fork copies the descriptor): wait for it.
    let t0 = std::time::Instant::now();
    let s = loop {
        match EmbeddedStore::open(&restored) {
            Err(dq_embedded::OpenError::Locked { .. })
                if t0.elapsed() < std::time::Duration::from_secs(5) =>
            {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            r => break r.unwrap(),
        }
    };
    let job = dq_core::Store::get(
        &s,
        &dq_core::Topic::new("t").unwrap(),
        &dq_core::JobId::new("kept").unwrap(),
    )
    .await
    .unwrap();
    assert!(job.is_some(), "the backup holds the job");
}

#[tokio::test]
async fn a_backup_of_redis_is_refused_with_what_to_do_instead() {
    let (store, _redis) = support::sharded_redis_store();
    let state = AppState::new(store, Arc::new(SystemClock), support::limits());
    let api = Api::new(app(state, support::MAX_REQUEST_BYTES), ());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("b");
    let (s, v) = local(
        &api,
        "POST",
        "/v1/admin/backup",
        json!({"path": out.to_str().unwrap()}),
    )
    .await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::CONFLICT, "backup_unsupported"),
        "{v}"
    );
    assert!(
        v["error"]["message"].as_str().unwrap().contains("RDB"),
        "{v}"
    );
    assert!(!out.exists());
}

#[tokio::test]
async fn a_backup_of_postgres_is_refused_naming_pg_dump() {
    let (store, ()) = support::postgres_store();
    let state = AppState::new(store, Arc::new(SystemClock), support::limits());
    let api = Api::new(app(state, support::MAX_REQUEST_BYTES), ());
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("b");
    let (s, v) = local(
        &api,
        "POST",
        "/v1/admin/backup",
        json!({"path": out.to_str().unwrap()}),
    )
    .await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::CONFLICT, "backup_unsupported"),
        "{v}"
    );
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains("pg_dump --schema=dq"), "{v}");
    assert!(!message.contains("Redis"), "{v}");
    assert!(!out.exists());
}
