//! API keys through the real router, on both stores: creating the first
//! key, enforcement once one exists (401 for no, unknown and revoked keys
//! alike, 403 naming the missing scope), every scope on every route (a
//! table that fails for a route without a scope), whole-batch refusal,
//! rotation, revocation seen by a second instance within a second, the
//! failed-authentication limit, `auth = "required"` and the metrics token.

mod support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::{StatusCode, header};
use dq_core::{Clock, ManualClock, Store, SystemClock};
use dq_server::auth::{AdminAuth, Need};
use dq_server::keys::Action;
use dq_server::routes::{Auth, ROUTES};
use dq_server::{AppState, app};
use dq_testkit::http::{Api, FreshApi, Reply};
use serde_json::{Value, json};
use support::{embedded_store, limits, request_from, sharded_redis_store};

const LOOPBACK: &str = "127.0.0.1:5000";
const REMOTE: &str = "192.0.2.7:5000";
const TOKEN: &str = "correct-horse-battery-staple";

/// The router over `store`, with `auth` as its admin settings.
fn api_with(
    store: Arc<dyn Store>,
    guard: impl std::any::Any + Send + Sync,
    clock: Arc<dyn Clock>,
    auth: AdminAuth,
) -> Api {
    let mut state = AppState::new(store, clock, limits());
    state.admin = Arc::new(auth);
    Api::new(app(state, support::MAX_REQUEST_BYTES), guard)
}

async fn call(api: &Api, bearer: Option<&str>, method: &str, uri: &str, body: Value) -> Reply {
    request_from(api, REMOTE, bearer, method, uri, body).await
}

fn code(r: &Reply) -> String {
    r.json()["error"]["code"].as_str().unwrap_or("").to_string()
}

/// Creates a key with `scopes` through `bearer` (None: from loopback, for
/// the first key); returns its secret.
async fn create(api: &Api, bearer: Option<&str>, name: &str, scopes: &[&str]) -> String {
    let r = request_from(
        api,
        LOOPBACK,
        bearer,
        "POST",
        "/v1/keys",
        json!({"name": name, "scopes": scopes}),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    let v = r.json();
    assert_eq!(v["name"], name);
    let secret = v["secret"].as_str().unwrap().to_string();
    assert!(secret.starts_with("dqk_") && secret.len() == 68, "{secret}");
    secret
}

async fn first_key_and_enforcement(h: FreshApi) {
    let api = h.api();
    // No key yet: open, as before keys.
    let r = call(&api, None, "GET", "/v1/topics", Value::Null).await;
    assert_eq!(r.status, StatusCode::OK);
    // Keys are the admin's: without admin_token, loopback only.
    let r = call(&api, None, "GET", "/v1/keys", Value::Null).await;
    assert_eq!(
        (r.status, code(&r).as_str()),
        (StatusCode::FORBIDDEN, "admin_loopback_only")
    );
    // Without admin_token the first key must be an admin key, or nobody
    // could manage keys afterwards; the refusal writes nothing.
    let r = request_from(
        &api,
        LOOPBACK,
        None,
        "POST",
        "/v1/keys",
        json!({"name": "w", "scopes": ["read:*"]}),
    )
    .await;
    assert_eq!(
        (r.status, code(&r).as_str()),
        (StatusCode::CONFLICT, "admin_key_needed")
    );
    let r = call(&api, None, "GET", "/v1/topics", Value::Null).await;
    assert_eq!(
        r.status,
        StatusCode::OK,
        "still open: the refused key was not written"
    );
    let admin = create(&api, None, "ops", &["admin"]).await;

    // From now on every /v1 call needs a key, from loopback too.
    for peer in [REMOTE, LOOPBACK] {
        let r = request_from(&api, peer, None, "GET", "/v1/topics", Value::Null).await;
        assert_eq!(
            (r.status, code(&r).as_str()),
            (StatusCode::UNAUTHORIZED, "unauthorized")
        );
        assert_eq!(r.header(header::WWW_AUTHENTICATE), "Bearer realm=\"dq\"");
    }
    // Health checks stay open.
    assert_eq!(
        call(&api, None, "GET", "/healthz", Value::Null)
            .await
            .status,
        StatusCode::OK
    );

    let worker = create(
        &api,
        Some(&admin),
        "billing-worker",
        &["consume:billing-*", "read:billing-*"],
    )
    .await;
    let r = call(
        &api,
        Some(&admin),
        "POST",
        "/v1/keys",
        json!({"name": "billing-worker", "scopes": ["read:*"]}),
    )
    .await;
    assert_eq!(
        (r.status, code(&r).as_str()),
        (StatusCode::CONFLICT, "key_exists")
    );
    for (body, want) in [
        (
            json!({"name": "a b", "scopes": ["read:*"]}),
            "invalid_key_name",
        ),
        (json!({"name": "x", "scopes": []}), "invalid_scope"),
        (json!({"name": "x", "scopes": ["write:*"]}), "invalid_scope"),
        (
            json!({"name": "x", "scopes": ["read:a*b"]}),
            "invalid_scope",
        ),
        (
            json!({"name": "x", "scopes": ["admin:billing"]}),
            "invalid_scope",
        ),
        (json!({"name": "x"}), "invalid_json"),
        (
            json!({"name": "x", "scopes": ["read:*"], "secret": "mine"}),
            "invalid_json",
        ),
    ] {
        let r = call(&api, Some(&admin), "POST", "/v1/keys", body.clone()).await;
        assert_eq!(
            (r.status, code(&r).as_str()),
            (StatusCode::BAD_REQUEST, want),
            "{body}"
        );
    }

    // The list shows names, scopes and use, never a secret or its hash.
    let r = call(&api, Some(&admin), "GET", "/v1/keys", Value::Null).await;
    assert_eq!(r.status, StatusCode::OK);
    let names: Vec<String> = r.json()["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["billing-worker", "ops"]);
    for secret in [&admin, &worker] {
        assert!(
            !r.text.contains(secret.as_str()) && !r.text.contains(&secret[4..]),
            "{}",
            r.text
        );
        let hash = sha256_hex(secret);
        assert!(!r.text.contains(&hash), "the hash is not shown either");
    }
    let k = call(
        &api,
        Some(&admin),
        "GET",
        "/v1/keys/billing-worker",
        Value::Null,
    )
    .await
    .json();
    assert_eq!(k["scopes"], json!(["consume:billing-*", "read:billing-*"]));
    assert!(k.get("secret").is_none());

    // 403 names the scope; 401 is the same for unknown, mistyped and revoked.
    let r = call(
        &api,
        Some(&worker),
        "POST",
        "/v1/topics/billing-eu/jobs",
        json!({}),
    )
    .await;
    assert_eq!(
        (r.status, code(&r).as_str()),
        (StatusCode::FORBIDDEN, "forbidden")
    );
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("enqueue:billing-eu"),
        "{}",
        r.text
    );
    let r = call(
        &api,
        Some(&worker),
        "GET",
        "/v1/topics/billing-eu",
        Value::Null,
    )
    .await;
    assert_eq!(
        code(&r),
        "topic_not_found",
        "read on billing-* passes: {}",
        r.text
    );
    let r = call(&api, Some(&worker), "GET", "/v1/topics/orders", Value::Null).await;
    assert_eq!(code(&r), "forbidden", "a topic outside the pattern");
    let unknown = call(
        &api,
        Some("dqk_0000000000000000000000000000000000000000000000000000000000000000"),
        "GET",
        "/v1/topics",
        Value::Null,
    )
    .await;
    let mistyped = call(
        &api,
        Some(&worker[..worker.len() - 1]),
        "GET",
        "/v1/topics",
        Value::Null,
    )
    .await;
    assert_eq!(
        call(
            &api,
            Some(&admin),
            "DELETE",
            "/v1/keys/billing-worker",
            Value::Null
        )
        .await
        .status,
        StatusCode::OK
    );
    let revoked = call(&api, Some(&worker), "GET", "/v1/topics", Value::Null).await;
    for r in [&unknown, &mistyped, &revoked] {
        assert_eq!(r.status, StatusCode::UNAUTHORIZED);
        assert_eq!(r.text, unknown.text, "one answer for every bad key");
    }
    let r = call(
        &api,
        Some(&admin),
        "DELETE",
        "/v1/keys/billing-worker",
        Value::Null,
    )
    .await;
    assert_eq!(
        (r.status, code(&r).as_str()),
        (StatusCode::NOT_FOUND, "key_not_found")
    );

    // Without admin_token the last admin key cannot be revoked.
    let r = call(&api, Some(&admin), "DELETE", "/v1/keys/ops", Value::Null).await;
    assert_eq!(
        (r.status, code(&r).as_str()),
        (StatusCode::CONFLICT, "admin_key_needed")
    );

    // Rotation: a new secret, the old one refused at once, scopes kept.
    let r = call(
        &api,
        Some(&admin),
        "POST",
        "/v1/keys/ops/rotate",
        Value::Null,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let rotated = r.json()["secret"].as_str().unwrap().to_string();
    assert_ne!(rotated, admin);
    assert_eq!(
        call(&api, Some(&admin), "GET", "/v1/keys", Value::Null)
            .await
            .status,
        StatusCode::UNAUTHORIZED
    );
    let r = call(&api, Some(&rotated), "GET", "/v1/keys", Value::Null).await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json()["keys"][0]["scopes"], json!(["admin"]));
    assert!(
        r.json()["keys"][0]["last_used_ms"].is_u64(),
        "last use is shown: {}",
        r.text
    );
}

fn sha256_hex(s: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(s.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The `/v1` routes of [`ROUTES`], each with its scope.
fn api_routes()
-> impl Iterator<Item = (&'static &'static str, &'static &'static str, &'static Need)> {
    ROUTES.iter().filter_map(|r| match &r.auth {
        Auth::Api(n) => Some((&r.method, &r.path, n)),
        _ => None,
    })
}

/// A request on `route` (a template of [`ROUTES`]) about `topic`: the path
/// with its parameters filled in and a body the route takes.
fn request_for(method: &str, template: &str, topic: &str) -> (String, Value) {
    let path = template
        .replace("{topic}", topic)
        .replace("{id}", "j1")
        .replace(
            "{name}",
            if template.starts_with("/v1/keys") {
                "nosuch"
            } else {
                topic
            },
        );
    let body = match (method, template) {
        ("POST", "/v1/reserve") => json!({"topics": [topic]}),
        ("POST", "/v1/ack:batch") => json!({"acks": [{"topic": topic, "id": "j1", "token": "x"}]}),
        ("POST", "/v1/nack:batch") => {
            json!({"nacks": [{"topic": topic, "id": "j1", "token": "x"}]})
        }
        ("POST", "/v1/touch:batch") => {
            json!({"touches": [{"topic": topic, "id": "j1", "token": "x"}]})
        }
        ("PUT", "/v1/schedules/{name}") => json!({"topic": topic, "every": "1h", "paused": true}),
        ("POST", "/v1/topics/{topic}/jobs:batch") => json!({"jobs": [{}]}),
        (
            "POST",
            "/v1/topics/{topic}/jobs/{id}/ack"
            | "/v1/topics/{topic}/jobs/{id}/nack"
            | "/v1/topics/{topic}/jobs/{id}/touch"
            | "/v1/topics/{topic}/jobs/{id}/release",
        ) => json!({"token": "x"}),
        ("PATCH", _) => json!({"delay_ms": 5}),
        ("POST", "/v1/keys") => json!({"name": "new", "scopes": ["read:*"]}),
        ("POST", "/v1/admin/drain") => Value::Null,
        ("POST" | "PUT", _) => json!({}),
        _ => Value::Null,
    };
    (path, body)
}

/// Every route of [`ROUTES`], called with a key of each action on a topic
/// its pattern matches and on one it does not: allowed calls get anything
/// but 401/403, refused ones exactly 403 `forbidden`.
async fn every_scope_on_every_route(h: FreshApi) {
    let api = h.api();
    let admin = create(&api, None, "root", &["admin"]).await;
    // (action, whether its pattern matches billing-eu, secret); none matches orders.
    let mut keys = vec![];
    for a in [
        Action::Enqueue,
        Action::Consume,
        Action::Read,
        Action::Manage,
    ] {
        let secret = create(&api, Some(&admin), a.as_str(), &[&format!("{a}:billing-*")]).await;
        keys.push((a, true, secret));
    }
    keys.push((
        Action::Read,
        false,
        create(&api, Some(&admin), "other", &["read:other"]).await,
    ));
    let fixtures = || async {
        for t in ["billing-eu", "orders"] {
            let r = call(
                &api,
                Some(&admin),
                "PUT",
                &format!("/v1/topics/{t}"),
                json!({}),
            )
            .await;
            assert!(r.status.is_success(), "{}", r.text);
            let r = call(
                &api,
                Some(&admin),
                "PUT",
                &format!("/v1/schedules/{t}"),
                json!({"topic": t, "every": "1h", "paused": true}),
            )
            .await;
            assert!(r.status.is_success(), "{}", r.text);
        }
    };
    fixtures().await;
    let mut checked = 0;
    for (method, template, need) in api_routes() {
        if *template == "/v1/admin/drain" {
            continue; // checked last: a drained instance refuses reserves
        }
        // Lists name no topic: any scope of the action lets them through
        // (they show only what the key may read).
        let topicless = matches!(*template, "/v1/topics" | "/v1/schedules");
        for topic in ["billing-eu", "orders"] {
            for (action, matches, secret) in &keys {
                let allowed = match need {
                    Need::Admin => false,
                    Need::Topic(a) | Need::Handler(a) => {
                        a == action && (topicless || (*matches && topic == "billing-eu"))
                    }
                };
                let (path, body) = request_for(method, template, topic);
                if *method == "GET" {
                    // HEAD runs the GET handler: it needs the same scope.
                    let r = call(&api, Some(secret), "HEAD", &path, Value::Null).await;
                    let refused = r.status == StatusCode::FORBIDDEN;
                    assert_eq!(
                        refused, !allowed,
                        "{action:?} key, HEAD {path}: {}",
                        r.status
                    );
                }
                let r = call(&api, Some(secret), method, &path, body).await;
                if allowed {
                    assert!(
                        r.status != StatusCode::UNAUTHORIZED && r.status != StatusCode::FORBIDDEN,
                        "{action:?} key, {method} {path}: {} {}",
                        r.status,
                        r.text
                    );
                    if *method != "GET" {
                        fixtures().await;
                    }
                } else {
                    assert_eq!(
                        (r.status, code(&r).as_str()),
                        (StatusCode::FORBIDDEN, "forbidden"),
                        "{action:?} key, {method} {path}: {}",
                        r.text
                    );
                }
                checked += 1;
            }
        }
    }
    for (_, _, secret) in &keys {
        let r = call(&api, Some(secret), "POST", "/v1/admin/drain", Value::Null).await;
        assert_eq!(code(&r), "forbidden");
    }
    let r = call(&api, Some(&admin), "POST", "/v1/admin/drain", Value::Null).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert!(checked > 300, "{checked}");

    // Lists show only what the key may read.
    let reader = &keys[2].2;
    let r = call(&api, Some(reader), "GET", "/v1/topics", Value::Null).await;
    let names: Vec<String> = r.json()["topics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["billing-eu"]);
    let r = call(&api, Some(reader), "GET", "/v1/schedules", Value::Null).await;
    let names: Vec<String> = r.json()["schedules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["billing-eu"]);
}

/// A batch (reserve, `ack:batch`) touching one topic outside the key's
/// scopes is refused whole; a schedule cannot be moved onto, or taken off,
/// a topic outside them.
async fn batches_are_refused_whole(h: FreshApi) {
    let api = h.api();
    let admin = create(&api, None, "root", &["admin"]).await;
    let w = create(
        &api,
        Some(&admin),
        "w",
        &["consume:a", "enqueue:a", "manage:a"],
    )
    .await;
    for t in ["a", "b"] {
        let r = call(
            &api,
            Some(&admin),
            "POST",
            &format!("/v1/topics/{t}/jobs"),
            json!({"id": "j"}),
        )
        .await;
        assert_eq!(r.status, StatusCode::CREATED);
    }
    let r = call(
        &api,
        Some(&w),
        "POST",
        "/v1/reserve",
        json!({"topics": ["a", "b"], "max": 10}),
    )
    .await;
    assert_eq!(
        (r.status, code(&r).as_str()),
        (StatusCode::FORBIDDEN, "forbidden")
    );
    assert!(r.text.contains("consume:b"), "{}", r.text);
    let r = call(&api, Some(&admin), "GET", "/v1/topics/a", Value::Null).await;
    assert_eq!(
        r.json()["stats"]["ready"],
        1,
        "nothing was reserved: {}",
        r.text
    );
    let r = call(
        &api,
        Some(&w),
        "POST",
        "/v1/reserve",
        json!({"topics": ["a"]}),
    )
    .await;
    let lease = r.json()["jobs"][0].clone();
    assert_eq!(lease["id"], "j");
    let r = call(
        &api,
        Some(&w),
        "POST",
        "/v1/ack:batch",
        json!({"acks": [
            {"topic": "a", "id": "j", "token": lease["token"]},
            {"topic": "b", "id": "j", "token": "x"},
        ]}),
    )
    .await;
    assert_eq!(code(&r), "forbidden");
    for (path, field) in [("/v1/nack:batch", "nacks"), ("/v1/touch:batch", "touches")] {
        let r = call(
            &api,
            Some(&w),
            "POST",
            path,
            json!({field: [
                {"topic": "a", "id": "j", "token": lease["token"]},
                {"topic": "b", "id": "j", "token": "x"},
            ]}),
        )
        .await;
        assert_eq!(code(&r), "forbidden", "{path}");
    }
    let r = call(
        &api,
        Some(&admin),
        "GET",
        "/v1/topics/a/jobs/j",
        Value::Null,
    )
    .await;
    assert_eq!(
        r.json()["state"],
        "reserved",
        "the allowed ack, nack or touch was not done either"
    );
    assert_eq!(
        r.json()["lease_deadline_ms"],
        lease["lease_deadline_ms"],
        "not touched"
    );
    // Schedules: onto b refused; a schedule on b cannot be moved to a.
    let r = call(
        &api,
        Some(&w),
        "PUT",
        "/v1/schedules/s",
        json!({"topic": "b", "every": "1h"}),
    )
    .await;
    assert_eq!(code(&r), "forbidden");
    let r = call(
        &api,
        Some(&admin),
        "PUT",
        "/v1/schedules/s",
        json!({"topic": "b", "every": "1h"}),
    )
    .await;
    assert!(r.status.is_success());
    let r = call(
        &api,
        Some(&w),
        "PUT",
        "/v1/schedules/s",
        json!({"topic": "a", "every": "1h"}),
    )
    .await;
    assert_eq!(code(&r), "forbidden", "{}", r.text);
    for (m, p) in [
        ("DELETE", "/v1/schedules/s"),
        ("POST", "/v1/schedules/s/pause"),
        ("GET", "/v1/schedules/s"),
    ] {
        let r = call(&api, Some(&w), m, p, Value::Null).await;
        assert_eq!(code(&r), "forbidden", "{m} {p}");
    }
}

/// Failed authentications from one address: a burst of 20, then one per
/// 500 ms; past that 429 with Retry-After. A good key still passes, and
/// other addresses are not affected.
async fn failed_authentications_are_limited(h: FreshApi) {
    let clock = ManualClock::new(1_000_000);
    let api = h.with_clock(Arc::new(clock.clone()));
    let admin = create(&api, None, "root", &["admin"]).await;
    let bad = "dqk_nope";
    for i in 0..20 {
        let r = call(&api, Some(bad), "GET", "/v1/topics", Value::Null).await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "failure {i}");
    }
    let r = call(&api, Some(bad), "GET", "/v1/topics", Value::Null).await;
    assert_eq!(
        (r.status, code(&r).as_str()),
        (StatusCode::TOO_MANY_REQUESTS, "too_many_auth_failures")
    );
    assert_eq!(r.header(header::RETRY_AFTER), "1");
    let r = call(&api, Some(&admin), "GET", "/v1/topics", Value::Null).await;
    assert_eq!(
        r.status,
        StatusCode::OK,
        "a good key passes while throttled"
    );
    let r = request_from(&api, LOOPBACK, Some(bad), "GET", "/v1/topics", Value::Null).await;
    assert_eq!(
        r.status,
        StatusCode::UNAUTHORIZED,
        "another address is not throttled"
    );
    clock.advance(499);
    let r = call(&api, Some(bad), "GET", "/v1/topics", Value::Null).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    clock.advance(1);
    let r = call(&api, Some(bad), "GET", "/v1/topics", Value::Null).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "one more after 500 ms");
    let r = call(&api, Some(bad), "GET", "/v1/topics", Value::Null).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
    // IPv6 addresses count per /64.
    for i in 0..20 {
        let peer = format!("[2001:db8:0:1::{i:x}]:5000");
        request_from(&api, &peer, Some(bad), "GET", "/v1/topics", Value::Null).await;
    }
    let r = request_from(
        &api,
        "[2001:db8:0:1::ffff]:5000",
        Some(bad),
        "GET",
        "/v1/topics",
        Value::Null,
    )
    .await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "the same /64");
    let r = request_from(
        &api,
        "[2001:db8:0:2::1]:5000",
        Some(bad),
        "GET",
        "/v1/topics",
        Value::Null,
    )
    .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "another /64");
}

/// A key with a `rate_limit`: its burst, then one request per token, 429
/// `rate_limited` with Retry-After between; other keys go on.
async fn a_key_rate_limit_holds_per_instance(h: FreshApi) {
    let clock = ManualClock::new(5_000_000);
    let api = h.with_clock(Arc::new(clock.clone()));
    let admin = create(&api, None, "root", &["admin"]).await;
    let r = call(
        &api,
        Some(&admin),
        "POST",
        "/v1/keys",
        json!({"name": "slow", "scopes": ["read:*"], "rate_limit": {"limit": 2, "per_ms": 1000}}),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    assert_eq!(
        r.json()["rate_limit"],
        json!({"limit": 2, "per_ms": 1000, "burst": 2})
    );
    let slow = r.json()["secret"].as_str().unwrap().to_string();
    for _ in 0..2 {
        assert_eq!(
            call(&api, Some(&slow), "GET", "/v1/topics", Value::Null)
                .await
                .status,
            StatusCode::OK
        );
    }
    let r = call(&api, Some(&slow), "GET", "/v1/topics", Value::Null).await;
    assert_eq!(
        (r.status, code(&r).as_str()),
        (StatusCode::TOO_MANY_REQUESTS, "rate_limited")
    );
    assert_eq!(r.header(header::RETRY_AFTER), "1");
    assert_eq!(
        call(&api, Some(&admin), "GET", "/v1/topics", Value::Null)
            .await
            .status,
        StatusCode::OK,
        "other keys go on"
    );
    clock.advance(499);
    assert_eq!(
        call(&api, Some(&slow), "GET", "/v1/topics", Value::Null)
            .await
            .status,
        StatusCode::TOO_MANY_REQUESTS
    );
    clock.advance(1);
    assert_eq!(
        call(&api, Some(&slow), "GET", "/v1/topics", Value::Null)
            .await
            .status,
        StatusCode::OK
    );
    // A refresh of the keys keeps the bucket.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(
        call(&api, Some(&slow), "GET", "/v1/topics", Value::Null)
            .await
            .status,
        StatusCode::TOO_MANY_REQUESTS
    );
    for bad in [
        json!({"limit": 0, "per_ms": 1000}),
        json!({"limit": 1, "per_ms": 0}),
        json!({"limit": 1}),
    ] {
        let r = call(
            &api,
            Some(&admin),
            "POST",
            "/v1/keys",
            json!({"name": "x", "scopes": ["read:*"], "rate_limit": bad}),
        )
        .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad}: {}", r.text);
    }
}

dq_testkit::router_tests! {
    embedded: FreshApi::new(|clock| support::api_over(embedded_store(), clock)),
    sharded_redis: FreshApi::new(|clock| support::api_over(sharded_redis_store(), clock)),
    postgres: FreshApi::new(|clock| support::api_over(support::postgres_store(), clock)),
    tests: [
        first_key_and_enforcement,
        every_scope_on_every_route,
        batches_are_refused_whole,
        failed_authentications_are_limited,
        a_key_rate_limit_holds_per_instance,
    ],
}

/// Every `/v1` operation of the OpenAPI document has a line in [`ROUTES`],
/// and every line there is an operation: a route added without a scope
/// fails here.
#[test]
fn every_route_has_a_scope() {
    let doc: Value = serde_json::from_str(include_str!("../src/openapi.json")).unwrap();
    let mut documented = BTreeSet::new();
    for (path, ops) in doc["paths"].as_object().unwrap() {
        if !path.starts_with("/v1/") {
            continue;
        }
        for method in ops.as_object().unwrap().keys() {
            documented.insert((method.to_uppercase(), path.clone()));
        }
    }
    let scoped: BTreeSet<(String, String)> = api_routes()
        .map(|(m, p, _)| (m.to_string(), p.to_string()))
        .collect();
    assert_eq!(
        scoped.len(),
        api_routes().count(),
        "a route is listed twice"
    );
    let unscoped: Vec<_> = documented.difference(&scoped).collect();
    let undocumented: Vec<_> = scoped.difference(&documented).collect();
    assert!(unscoped.is_empty(), "routes without a scope: {unscoped:?}");
    assert!(
        undocumented.is_empty(),
        "scoped but not in the document: {undocumented:?}"
    );
}

/// With an admin token: it is an admin key; keys may be made without an
/// admin key first; the last admin key may go.
#[tokio::test]
async fn the_admin_token_is_an_admin_key() {
    let (store, dir) = embedded_store();
    let api = api_with(
        store,
        dir,
        Arc::new(SystemClock),
        AdminAuth::new(Some(TOKEN.into())),
    );
    let r = call(&api, None, "GET", "/v1/keys", Value::Null).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "keys need the token");
    let w = create(&api, Some(TOKEN), "reader", &["read:*"]).await;
    let r = call(&api, Some(&w), "POST", "/v1/topics/t/jobs", json!({})).await;
    assert_eq!(code(&r), "forbidden");
    let r = call(&api, Some(TOKEN), "POST", "/v1/topics/t/jobs", json!({})).await;
    assert_eq!(r.status, StatusCode::CREATED);
    assert_eq!(
        call(&api, None, "GET", "/v1/topics", Value::Null)
            .await
            .status,
        StatusCode::UNAUTHORIZED,
        "reads need a key once one exists"
    );
    let a = create(&api, Some(TOKEN), "a", &["admin"]).await;
    let r = call(&api, Some(&a), "DELETE", "/v1/keys/a", Value::Null).await;
    assert_eq!(
        r.status,
        StatusCode::OK,
        "the token stays: the last admin key may go"
    );
    let r = call(&api, Some(TOKEN), "DELETE", "/v1/keys/reader", Value::Null).await;
    assert_eq!(r.status, StatusCode::OK);
    let r = call(&api, None, "GET", "/v1/topics", Value::Null).await;
    assert_eq!(r.status, StatusCode::OK, "no key left: reads open again");
}

/// `auth = "required"`: a key on every call before any exists; the first
/// is made from loopback.
#[tokio::test]
async fn auth_required_wants_a_key_from_the_start() {
    let (store, dir) = embedded_store();
    let api = api_with(
        store,
        dir,
        Arc::new(SystemClock),
        AdminAuth::new(None).requiring_keys(true),
    );
    let r = call(&api, None, "GET", "/v1/topics", Value::Null).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("loopback"),
        "{}",
        r.text
    );
    let admin = create(&api, None, "root", &["admin"]).await;
    let r = request_from(&api, LOOPBACK, None, "GET", "/v1/topics", Value::Null).await;
    assert_eq!(
        r.status,
        StatusCode::UNAUTHORIZED,
        "loopback too, once a key exists"
    );
    assert_eq!(
        call(&api, Some(&admin), "GET", "/v1/topics", Value::Null)
            .await
            .status,
        StatusCode::OK
    );
}

/// `/metrics` with a metrics token: 401 without it, 200 with it or with
/// the admin token.
#[tokio::test]
async fn the_metrics_token_guards_metrics() {
    let (store, dir) = embedded_store();
    let auth =
        AdminAuth::new(Some(TOKEN.into())).with_metrics_token(Some("scrape-0123456789abc".into()));
    let api = api_with(store, dir, Arc::new(SystemClock), auth);
    assert_eq!(
        call(&api, None, "GET", "/metrics", Value::Null)
            .await
            .status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        call(
            &api,
            Some("wrong-0123456789abcd"),
            "GET",
            "/metrics",
            Value::Null
        )
        .await
        .status,
        StatusCode::UNAUTHORIZED
    );
    let r = call(
        &api,
        Some("scrape-0123456789abc"),
        "GET",
        "/metrics",
        Value::Null,
    )
    .await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(
        r.text.contains("dq_"),
        "{}",
        &r.text[..100.min(r.text.len())]
    );
    assert_eq!(
        call(&api, Some(TOKEN), "GET", "/metrics", Value::Null)
            .await
            .status,
        StatusCode::OK
    );
}

/// Two instances on one Redis: a key made on one works on the other at
/// once or within a refresh, and one revoked on the first is refused by
/// the second within a second.
#[tokio::test]
async fn revocation_reaches_another_instance_within_a_second() {
    let redis = dq_testkit::RedisServer::start();
    let url = redis.url();
    let a = support::api_over(
        (
            Arc::new(support::sharded_redis_at(&url)) as Arc<dyn Store>,
            (),
        ),
        Arc::new(SystemClock),
    );
    let b = support::api_over(
        (
            Arc::new(support::sharded_redis_at(&url)) as Arc<dyn Store>,
            (),
        ),
        Arc::new(SystemClock),
    );
    assert_eq!(
        call(&b, None, "GET", "/v1/topics", Value::Null)
            .await
            .status,
        StatusCode::OK
    );
    let admin = create(&a, None, "root", &["admin"]).await;
    let w = create(&a, Some(&admin), "w", &["read:*"]).await;
    within_a_second(&b, &w, StatusCode::OK, "the key is known on b").await;
    assert_eq!(
        call(&b, None, "GET", "/v1/topics", Value::Null)
            .await
            .status,
        StatusCode::UNAUTHORIZED,
        "b enforces too"
    );
    let r = call(&a, Some(&admin), "DELETE", "/v1/keys/w", Value::Null).await;
    assert_eq!(r.status, StatusCode::OK);
    within_a_second(
        &b,
        &w,
        StatusCode::UNAUTHORIZED,
        "b refuses the revoked key",
    )
    .await;
    drop(redis);
}

/// Waits until `GET /v1/topics` on `api` with `secret` answers `want`,
/// failing after a second.
async fn within_a_second(api: &Api, secret: &str, want: StatusCode, what: &str) {
    let started = Instant::now();
    loop {
        let r = call(api, Some(secret), "GET", "/v1/topics", Value::Null).await;
        if r.status == want {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{what}: still {} after {:?}",
            r.status,
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
