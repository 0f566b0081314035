//! The HTTP API through the real router, on the embedded store, the
//! sharded Redis store and the PostgreSQL store (`dq_testkit::router_tests!`
//! runs each test on all three).
//! Every error code of docs/api.md is produced here, and every rejected
//! request is checked to have written nothing.
//!
//! A few tests are about Redis and run on it alone: Redis unreachable (503,
//! `dq_up` 0), one shard of two down, and partitions (the embedded store
//! keeps a topic in one and refuses more). Three go through both stores in
//! one test, store by store (bodies as sent, lateness from a past due time,
//! the gauges of a waiting reserve).

mod support;

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use dq_core::{Clock, ManualClock, SystemClock};
use dq_testkit::RedisServer;
use dq_testkit::http::{Api, FreshApi, parse_metrics, post_json};
use serde_json::{Value, json};
use support::{
    api_over, embedded_store, postgres_store, redis_shard, sharded_redis_at, sharded_redis_store,
};

dq_testkit::router_tests! {
    embedded: FreshApi::new(|clock| api_over(embedded_store(), clock)),
    sharded_redis: FreshApi::new(|clock| api_over(sharded_redis_store(), clock)),
    postgres: FreshApi::new(|clock| api_over(postgres_store(), clock)),
    tests: [
        unpaid_order_tour,
        nack_retries_then_dead_replay_and_purge,
        batch_enqueue_and_batch_ack_report_per_item,
        batch_nack_and_batch_touch_report_per_item,
        reserve_long_poll_wakes_on_enqueue_and_due_time,
        every_error_code_and_nothing_written,
        openapi_document_names_every_route,
        metrics_after_known_operations,
        request_ids_are_echoed_or_made,
        a_topic_turned_to_push_or_back_is_seen_by_reserve_at_once,
        a_json_body_comes_back_as_it_was_sent,
        dead_letter_calls_name_a_known_topic_and_dot_names_are_refused,
        every_v1_error_is_json,
        export_listing_and_import,
        flow_control_through_the_api,
        topics_page_by_cursor_and_prefix,
        single_enqueues_at_once_each_get_their_own_answer,
        trace_context_goes_from_the_enqueue_to_the_consumer,
    ],
}

/// An API over a fresh sharded Redis store, on the system clock.
fn redis_api() -> Api {
    api_over(sharded_redis_store(), Arc::new(SystemClock))
}

/// An API over a fresh embedded store on a temp dir, on the system clock.
fn embedded_api() -> Api {
    api_over(embedded_store(), Arc::new(SystemClock))
}

/// An API over the sharded store of one Redis that nobody listens on.
fn api_with_redis_down() -> Api {
    let port = dq_testkit::free_port();
    let store = sharded_redis_at(&format!("redis://127.0.0.1:{port}"));
    api_over((Arc::new(store), ()), Arc::new(SystemClock))
}

async fn unpaid_order_tour(fresh: FreshApi) {
    let clock = ManualClock::new(1_700_000_000_000);
    let a = fresh.with_clock(Arc::new(clock.clone()));
    let (s, v) = a
        .call(
            "POST",
            "/v1/topics/orders/jobs",
            Some(json!({"id": "order-1", "body": {"order": 1}, "delay_ms": 1_800_000})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    assert_eq!(
        v,
        json!({"id": "order-1", "created": true, "replaced": false, "due_at_ms": 1_700_001_800_000u64, "state": "scheduled"})
    );
    let (s, v) = a
        .call(
            "POST",
            "/v1/topics/orders/jobs",
            Some(json!({"id": "order-1", "body": 2})),
        )
        .await;
    assert_eq!((s, &v["created"]), (StatusCode::OK, &json!(false)));
    a.call(
        "POST",
        "/v1/topics/orders/jobs",
        Some(json!({"id": "order-2", "body": {"order": 2}, "delay_ms": 1_800_000})),
    )
    .await;

    // Order 1 is paid: cancel its timeout.
    let (s, v) = a
        .call("DELETE", "/v1/topics/orders/jobs/order-1", None)
        .await;
    assert_eq!(
        (s, v["state"].clone()),
        (StatusCode::OK, json!("scheduled"))
    );

    let (_, v) = a
        .call("POST", "/v1/reserve", Some(json!({"topics": ["orders"]})))
        .await;
    assert_eq!(v["jobs"], json!([]), "nothing due yet");
    clock.advance(1_800_000);
    let (s, v) = a
        .call(
            "POST",
            "/v1/reserve",
            Some(json!({"topics": ["orders"], "max": 10})),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let jobs = v["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0]["id"], json!("order-2"));
    assert_eq!(jobs[0]["body"], json!({"order": 2}));
    assert_eq!(jobs[0]["attempt"], json!(1));
    let token = jobs[0]["token"].as_str().unwrap().to_string();

    let (s, v) = a.call("GET", "/v1/topics/orders/jobs/order-2", None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["state"], json!("reserved"));
    assert_eq!(v["max_attempts"], json!(5));

    let (s, v) = a
        .call(
            "POST",
            "/v1/topics/orders/jobs/order-2/touch",
            Some(json!({"token": token, "lease_ms": 60000})),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["lease_deadline_ms"], json!(1_700_001_860_000u64));
    let (s, _) = a
        .call(
            "POST",
            "/v1/topics/orders/jobs/order-2/ack",
            Some(json!({"token": token})),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    a.expect_error(
        "GET",
        "/v1/topics/orders/jobs/order-2",
        None,
        404,
        "job_not_found",
    )
    .await;
    let st = a.stats("orders").await;
    assert_eq!(
        (
            st["counters"]["acked"].clone(),
            st["counters"]["cancelled"].clone()
        ),
        (json!(1), json!(1))
    );
}

async fn nack_retries_then_dead_replay_and_purge(fresh: FreshApi) {
    let clock = ManualClock::new(1_700_000_000_000);
    let a = fresh.with_clock(Arc::new(clock.clone()));
    let (s, v) = a
        .call(
            "PUT",
            "/v1/topics/hooks",
            Some(json!({"max_attempts": 2, "retry": {"delays_ms": [60000]}})),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["config"]["max_attempts"], json!(2));
    assert_eq!(v["config"]["lease_ms"], json!(30000), "defaults kept");
    a.call(
        "POST",
        "/v1/topics/hooks/jobs",
        Some(json!({"id": "h", "body_base64": "AP8="})),
    )
    .await;
    for attempt in 1..=2 {
        let (_, v) = a
            .call("POST", "/v1/reserve", Some(json!({"topics": ["hooks"]})))
            .await;
        let job = &v["jobs"][0];
        assert_eq!(job["attempt"], json!(attempt));
        assert_eq!(job["body_base64"], json!("AP8="));
        let (s, v) = a
            .call(
                "POST",
                "/v1/topics/hooks/jobs/h/nack",
                Some(json!({"token": job["token"], "error": format!("HTTP 500 #{attempt}")})),
            )
            .await;
        assert_eq!(s, StatusCode::OK);
        if attempt == 1 {
            assert_eq!(
                v,
                json!({"id": "h", "state": "scheduled", "due_at_ms": 1_700_000_060_000u64})
            );
            clock.advance(60_000);
        } else {
            assert_eq!(v, json!({"id": "h", "state": "dead"}));
        }
    }
    let (_, v) = a.call("GET", "/v1/topics/hooks/dead", None).await;
    assert_eq!(v["jobs"][0]["id"], json!("h"));
    assert_eq!(v["jobs"][0]["last_error"], json!("HTTP 500 #2"));
    assert_eq!(v["jobs"][0]["attempts"], json!(2));
    let (_, v) = a
        .call("POST", "/v1/topics/hooks/dead/replay", Some(json!({})))
        .await;
    assert_eq!(v, json!({"replayed": 1}));
    let (_, v) = a
        .call("POST", "/v1/reserve", Some(json!({"topics": ["hooks"]})))
        .await;
    assert_eq!(
        v["jobs"][0]["attempt"],
        json!(1),
        "fresh attempts after replay"
    );
    let token = v["jobs"][0]["token"].clone();
    a.call(
        "POST",
        "/v1/topics/hooks/jobs/h/nack",
        Some(json!({"token": token, "retry_in_ms": 0})),
    )
    .await;
    let (_, v) = a
        .call("POST", "/v1/reserve", Some(json!({"topics": ["hooks"]})))
        .await;
    a.call(
        "POST",
        "/v1/topics/hooks/jobs/h/nack",
        Some(json!({"token": v["jobs"][0]["token"]})),
    )
    .await;
    let (_, v) = a.call("DELETE", "/v1/topics/hooks/dead", None).await;
    assert_eq!(v, json!({"purged": 1}));
    let (s, v) = a.call("DELETE", "/v1/topics/hooks", None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    a.expect_error("GET", "/v1/topics/hooks", None, 404, "topic_not_found")
        .await;
}

async fn batch_enqueue_and_batch_ack_report_per_item(fresh: FreshApi) {
    let a = fresh.api();
    let (s, v) = a
        .call(
            "POST",
            "/v1/topics/b/jobs:batch",
            Some(json!({"jobs": [
                {"id": "1", "body": 1},
                {"id": "bad id", "body": 2},
                {"id": "3", "body": 3, "delay_ms": -1},
                {"id": "1", "body": 4},
                {"body": 5}
            ]})),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let r = v["results"].as_array().unwrap();
    assert_eq!(r[0]["created"], json!(true));
    assert_eq!(r[1]["error"]["code"], json!("invalid_id"));
    assert_eq!(r[2]["error"]["code"], json!("invalid_delay"));
    assert_eq!(r[3]["created"], json!(false));
    assert_eq!(r[4]["created"], json!(true));
    let (_, v) = a
        .call(
            "POST",
            "/v1/reserve",
            Some(json!({"topics": ["b"], "max": 10})),
        )
        .await;
    let jobs = v["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 2);
    let mut acks: Vec<Value> = jobs
        .iter()
        .map(|j| json!({"topic": "b", "id": j["id"], "token": j["token"]}))
        .collect();
    acks.push(json!({"topic": "b", "id": "1", "token": "stale"}));
    let (s, v) = a
        .call("POST", "/v1/ack:batch", Some(json!({ "acks": acks })))
        .await;
    assert_eq!(s, StatusCode::OK);
    let r = v["results"].as_array().unwrap();
    assert_eq!(r[0], json!({"acked": true}));
    assert_eq!(r[1], json!({"acked": true}));
    assert_eq!(r[2]["error"]["code"], json!("job_not_found"));
}

/// `nack:batch` and `touch:batch` answer per item, in order, as the single
/// routes would one after the other, with the same error codes; a refused
/// item (bad id, bounds, stale token) changes nothing; the batch's size is
/// checked whole.
async fn batch_nack_and_batch_touch_report_per_item(fresh: FreshApi) {
    let a = fresh.api();
    let jobs: Vec<Value> = (1..=4).map(|i| json!({"id": i.to_string()})).collect();
    let (s, _) = a
        .call(
            "POST",
            "/v1/topics/nb/jobs:batch",
            Some(json!({ "jobs": jobs })),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let (_, v) = a
        .call(
            "POST",
            "/v1/reserve",
            Some(json!({"topics": ["nb"], "max": 10, "lease_ms": 10_000})),
        )
        .await;
    let token = |id: &str| {
        v["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["id"] == json!(id))
            .map(|j| j["token"].clone())
            .unwrap()
    };
    let job = |id: &'static str| {
        let a = &a;
        async move {
            a.call("GET", &format!("/v1/topics/nb/jobs/{id}"), None)
                .await
                .1
        }
    };
    let deadline = |id: &'static str| async move { job(id).await["lease_deadline_ms"].clone() };
    let before = deadline("3").await;

    let (s, t) = a
        .call(
            "POST",
            "/v1/touch:batch",
            Some(json!({"touches": [
                {"topic": "nb", "id": "1", "token": token("1"), "lease_ms": 60_000},
                {"topic": "nb", "id": "2", "token": token("2")},
                {"topic": "nb", "id": "3", "token": "stale"},
                {"topic": "nb", "id": "bad id", "token": "x"},
                {"topic": "nb", "id": "4", "token": token("4"), "lease_ms": 1},
                {"topic": "nb", "id": "nope", "token": "x"},
            ]})),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{t}");
    let r = t["results"].as_array().unwrap();
    assert_eq!(r.len(), 6);
    assert_eq!(r[0]["lease_deadline_ms"], deadline("1").await);
    assert_eq!(r[1]["lease_deadline_ms"], deadline("2").await);
    assert!(r[0]["lease_deadline_ms"].as_u64() > r[1]["lease_deadline_ms"].as_u64());
    assert_eq!(r[2]["error"]["code"], json!("lease_mismatch"));
    assert_eq!(r[3]["error"]["code"], json!("invalid_id"));
    assert_eq!(r[4]["error"]["code"], json!("invalid_lease"));
    assert_eq!(r[5]["error"]["code"], json!("job_not_found"));
    assert_eq!(
        deadline("3").await,
        before,
        "a refused touch changes nothing"
    );

    let (s, n) = a
        .call(
            "POST",
            "/v1/nack:batch",
            Some(json!({"nacks": [
                {"topic": "nb", "id": "1", "token": token("1"), "error": "boom"},
                {"topic": "nb", "id": "2", "token": token("2"), "dead": true},
                {"topic": "nb", "id": "3", "token": token("3"), "retry_in_ms": -1},
                {"topic": "nb", "id": "3", "token": token("3"), "retry_in_ms": 5, "dead": true},
                {"topic": "nb", "id": "4", "token": token("4"), "retry_in_ms": 5000, "priority": 3},
                {"topic": "nb", "id": "1", "token": token("1")},
                {"topic": "nb", "id": "nope", "token": "x"},
            ]})),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{n}");
    let r = n["results"].as_array().unwrap();
    assert_eq!(r.len(), 7);
    assert_eq!(r[0]["state"], json!("scheduled"));
    assert!(r[0]["due_at_ms"].is_u64(), "{}", r[0]);
    assert_eq!(r[1], json!({"state": "dead"}));
    assert_eq!(r[2]["error"]["code"], json!("invalid_delay"));
    assert_eq!(r[3]["error"]["code"], json!("invalid_delay"));
    assert_eq!(r[4]["state"], json!("scheduled"));
    assert_eq!(
        r[5]["error"]["code"],
        json!("lease_mismatch"),
        "nacked already"
    );
    assert_eq!(r[6]["error"]["code"], json!("job_not_found"));
    let job = |id: &'static str| {
        let a = &a;
        async move {
            a.call("GET", &format!("/v1/topics/nb/jobs/{id}"), None)
                .await
                .1
        }
    };
    let j1 = job("1").await;
    assert_eq!(
        (j1["state"].clone(), j1["last_error"].clone()),
        (json!("scheduled"), json!("boom"))
    );
    assert_eq!(job("2").await["state"], json!("dead"));
    let j3 = job("3").await;
    assert_eq!(
        j3["state"],
        json!("reserved"),
        "refused items change nothing"
    );
    assert_eq!(j3["lease_deadline_ms"], before);
    let j4 = job("4").await;
    assert_eq!(
        (j4["priority"].clone(), j4["due_at_ms"].clone()),
        (json!(3), r[4]["due_at_ms"].clone())
    );

    // The size is checked whole, before anything is done.
    for (path, field) in [("/v1/nack:batch", "nacks"), ("/v1/touch:batch", "touches")] {
        let item = json!({"topic": "nb", "id": "3", "token": token("3")});
        a.expect_error(
            "POST",
            path,
            Some(json!({ field: [] })),
            400,
            "invalid_batch",
        )
        .await;
        let many = vec![item.clone(); 1001];
        a.expect_error(
            "POST",
            path,
            Some(json!({ field: many })),
            400,
            "invalid_batch",
        )
        .await;
        a.expect_error(
            "POST",
            path,
            Some(json!({"acks": [item]})),
            400,
            "invalid_json",
        )
        .await;
    }
    assert_eq!(job("3").await["state"], json!("reserved"));
}

async fn reserve_long_poll_wakes_on_enqueue_and_due_time(fresh: FreshApi) {
    let a = Arc::new(fresh.api());
    let waiter = {
        let a = a.clone();
        tokio::spawn(async move {
            let t0 = std::time::Instant::now();
            let (_, v) = a
                .call(
                    "POST",
                    "/v1/reserve",
                    Some(json!({"topics": ["lp"], "wait_ms": 10000})),
                )
                .await;
            (v, t0.elapsed())
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    a.call(
        "POST",
        "/v1/topics/lp/jobs",
        Some(json!({"id": "soon", "delay_ms": 300})),
    )
    .await;
    let (v, took) = waiter.await.unwrap();
    assert_eq!(v["jobs"][0]["id"], json!("soon"));
    assert!(took.as_millis() >= 390, "not before due: {took:?}");
    assert!(
        took.as_millis() < 5000,
        "woke at the due time, not the wait's end: {took:?}"
    );

    // Nothing due: the call returns empty after wait_ms.
    let t0 = std::time::Instant::now();
    let (_, v) = a
        .call(
            "POST",
            "/v1/reserve",
            Some(json!({"topics": ["lp"], "wait_ms": 200})),
        )
        .await;
    assert_eq!(v["jobs"], json!([]));
    assert!(t0.elapsed().as_millis() >= 200);
}

async fn every_error_code_and_nothing_written(fresh: FreshApi) {
    let a = fresh.api();
    let j = "/v1/topics/t/jobs";
    a.expect_errors(&[
        (
            "POST",
            j,
            Some(json!({"body": 1, "delay_ms": -5})),
            400,
            "invalid_delay",
        ),
        (
            "POST",
            j,
            Some(json!({"body": 1, "delay_ms": 5, "due_at_ms": 5})),
            400,
            "invalid_delay",
        ),
        (
            "POST",
            j,
            Some(json!({"body": 1, "delay_ms": 3650u64 * 86_400_000 + 1})),
            400,
            "invalid_delay",
        ),
        (
            "POST",
            j,
            Some(json!({"body": 1, "due_at_ms": u64::MAX / 2})),
            400,
            "invalid_due_at",
        ),
        (
            "POST",
            j,
            Some(json!({"body": 1, "delay_ms": 1e300})),
            400,
            "invalid_json",
        ),
        (
            "POST",
            j,
            Some(json!({"id": "", "body": 1})),
            400,
            "invalid_id",
        ),
        (
            "POST",
            j,
            Some(json!({"id": "x".repeat(257)})),
            400,
            "invalid_id",
        ),
        (
            "POST",
            j,
            Some(json!({"body": 1, "dealy_ms": 5})),
            400,
            "invalid_json",
        ),
        (
            "POST",
            j,
            Some(json!({"body": 1, "body_base64": "AA=="})),
            400,
            "invalid_body",
        ),
        (
            "POST",
            j,
            Some(json!({"body_base64": "!!"})),
            400,
            "invalid_body",
        ),
        (
            "POST",
            j,
            Some(json!({"body": null, "body_base64": "AA=="})),
            400,
            "invalid_body",
        ),
        ("POST", j, Some(json!([null, null])), 400, "invalid_json"),
        (
            "POST",
            j,
            Some(json!({"key": "has space"})),
            400,
            "invalid_key",
        ),
        (
            "POST",
            j,
            Some(json!({"key": "k".repeat(129)})),
            400,
            "invalid_key",
        ),
        (
            "POST",
            j,
            Some(json!({"body": 1, "max_attempts": 0})),
            400,
            "invalid_max_attempts",
        ),
        (
            "POST",
            j,
            Some(json!({"body": 1, "lease_ms": 5})),
            400,
            "invalid_lease",
        ),
        (
            "POST",
            j,
            Some(json!({"body": 1, "priority": -1})),
            400,
            "invalid_json",
        ),
        (
            "POST",
            j,
            Some(json!({"body": 1, "retry": {"fixed_ms": 1, "x": 2}})),
            400,
            "invalid_json",
        ),
        (
            "POST",
            j,
            Some(json!({"retry": {"delays_ms": []}})),
            400,
            "invalid_retry",
        ),
        (
            "POST",
            "/v1/topics/bad%20topic/jobs",
            Some(json!({})),
            400,
            "invalid_topic",
        ),
        (
            "POST",
            j,
            Some(json!({"body": "x".repeat(1000)})),
            413,
            "body_too_large",
        ),
        (
            "POST",
            j,
            Some(json!({"body": "x".repeat(70_000)})),
            413,
            "request_too_large",
        ),
        (
            "POST",
            "/v1/topics/t/jobs:batch",
            Some(json!({"jobs": []})),
            400,
            "invalid_batch",
        ),
    ])
    .await;

    // Malformed bytes: invalid UTF-8, broken JSON, wrong content type.
    let raw = |body: Vec<u8>, ct: &str| {
        Request::builder()
            .method("POST")
            .uri(j)
            .header(header::CONTENT_TYPE, ct)
            .body(Body::from(body))
            .unwrap()
    };
    for (body, ct, status, code) in [
        (
            b"{\"body\": \"\xff\xfe\"}".to_vec(),
            "application/json",
            400,
            "invalid_json",
        ),
        (
            b"{\"body\": ".to_vec(),
            "application/json",
            400,
            "invalid_json",
        ),
        (b"{}".to_vec(), "text/plain", 415, "unsupported_media_type"),
    ] {
        let (s, v) = a.raw(raw(body, ct)).await;
        assert_eq!(
            (s.as_u16(), v["error"]["code"].clone()),
            (status, json!(code)),
            "{v}"
        );
    }
    let st = a.stats("t").await;
    assert_eq!(
        (st["scheduled"].clone(), st["ready"].clone()),
        (json!(0), json!(0)),
        "rejected requests wrote nothing"
    );

    // Reserve, ack, nack, touch.
    let r = "/v1/reserve";
    a.expect_errors(&[
        (
            "POST",
            r,
            Some(json!({"topics": []})),
            400,
            "invalid_topics",
        ),
        (
            "POST",
            r,
            Some(json!({"topics": ["a b"]})),
            400,
            "invalid_topic",
        ),
        (
            "POST",
            r,
            Some(json!({"topics": ["t"], "max": 0})),
            400,
            "invalid_max",
        ),
        (
            "POST",
            r,
            Some(json!({"topics": ["t"], "max": 1001})),
            400,
            "invalid_max",
        ),
        (
            "POST",
            r,
            Some(json!({"topics": ["t"], "wait_ms": 30001})),
            400,
            "invalid_wait",
        ),
        (
            "POST",
            r,
            Some(json!({"topics": ["t"], "lease_ms": 1})),
            400,
            "invalid_lease",
        ),
        (
            "POST",
            "/v1/topics/t/jobs/nope/ack",
            Some(json!({"token": "x"})),
            404,
            "job_not_found",
        ),
        (
            "POST",
            "/v1/topics/t/jobs/nope/ack",
            Some(json!({})),
            400,
            "invalid_json",
        ),
    ])
    .await;
    a.call("POST", j, Some(json!({"id": "w", "delay_ms": 60000})))
        .await;
    a.expect_errors(&[
        (
            "POST",
            "/v1/topics/t/jobs/w/ack",
            Some(json!({"token": "x"})),
            409,
            "lease_mismatch",
        ),
        (
            "POST",
            "/v1/topics/t/jobs/w/touch",
            Some(json!({"token": "x"})),
            409,
            "lease_mismatch",
        ),
    ])
    .await;
    a.call("POST", j, Some(json!({"id": "now"}))).await;
    let (_, v) = a.call("POST", r, Some(json!({"topics": ["t"]}))).await;
    let token = v["jobs"][0]["token"].clone();
    a.expect_errors(&[
        (
            "POST",
            "/v1/topics/t/jobs/now/ack",
            Some(json!({"token": "stale"})),
            409,
            "lease_mismatch",
        ),
        (
            "POST",
            "/v1/topics/t/jobs/now/nack",
            Some(json!({"token": "stale"})),
            409,
            "lease_mismatch",
        ),
        (
            "POST",
            "/v1/topics/t/jobs/now/nack",
            Some(json!({"token": token, "retry_in_ms": -1})),
            400,
            "invalid_delay",
        ),
        (
            "PATCH",
            "/v1/topics/t/jobs/now",
            Some(json!({"delay_ms": 5})),
            409,
            "not_in_state",
        ),
        (
            "PATCH",
            "/v1/topics/t/jobs/w",
            Some(json!({})),
            400,
            "invalid_delay",
        ),
        (
            "PATCH",
            "/v1/topics/t/jobs/gone",
            Some(json!({"delay_ms": 5})),
            404,
            "job_not_found",
        ),
    ])
    .await;
    let (s, _) = a
        .call(
            "POST",
            "/v1/topics/t/jobs/now/ack",
            Some(json!({"token": token})),
        )
        .await;
    assert_eq!(
        s,
        StatusCode::OK,
        "the holder's token still works after the refusals"
    );

    // Topics, dead letters, routes.
    a.expect_errors(&[
        ("GET", "/v1/topics/unknown", None, 404, "topic_not_found"),
        ("DELETE", "/v1/topics/unknown", None, 404, "topic_not_found"),
        (
            "PUT",
            "/v1/topics/t",
            Some(json!({"lease_ms": 0})),
            400,
            "invalid_lease",
        ),
        (
            "PUT",
            "/v1/topics/t",
            Some(json!({"dead_cap": 10_000_001})),
            400,
            "invalid_dead_cap",
        ),
        (
            "PUT",
            "/v1/topics/t",
            Some(json!({"delivery": {"mode": "push"}})),
            400,
            "invalid_json",
        ),
        (
            "GET",
            "/v1/topics/t/dead?limit=0",
            None,
            400,
            "invalid_limit",
        ),
        ("GET", "/v1/nothing", None, 404, "route_not_found"),
    ])
    .await;
    let (_, v) = a.call("GET", "/v1/topics/t", None).await;
    assert_eq!(
        v["config"]["lease_ms"],
        json!(30000),
        "rejected PUTs changed nothing"
    );
}

#[tokio::test]
async fn store_down_gives_503_with_retry_after() {
    let a = api_with_redis_down();
    let req = Request::builder()
        .method("POST")
        .uri("/v1/topics/t/jobs")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from("{\"body\": 1}"))
        .unwrap();
    let res = a.send(req).await;
    assert_eq!(res.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(res.headers.get(header::RETRY_AFTER).unwrap(), "1");
    a.expect_error("GET", "/readyz", None, 503, "store_unavailable")
        .await;
    // ... and says which part is down, as the 200 answer does.
    let (_, v) = a.call("GET", "/readyz", None).await;
    assert_eq!(v["status"], "unavailable", "{v}");
    let stores = v["stores"].as_array().expect("stores listed");
    assert_eq!(stores.len(), 1, "{v}");
    assert_eq!(stores[0]["up"], false);
    assert!(
        stores[0]["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{v}"
    );
    let (s, _) = a.call("GET", "/healthz", None).await;
    assert_eq!(s, StatusCode::OK, "the process itself is healthy");
}

async fn openapi_document_names_every_route(fresh: FreshApi) {
    let a = fresh.api();
    let (s, v) = a.call("GET", "/openapi.json", None).await;
    assert_eq!(s, StatusCode::OK);
    assert!(v["openapi"].as_str().unwrap().starts_with("3."));
    // The document's operations are exactly the routes the table marks
    // documented, by path and method.
    let mut documented: Vec<(String, String)> = vec![];
    for (path, ops) in v["paths"].as_object().unwrap() {
        for method in ops.as_object().unwrap().keys() {
            documented.push((method.to_uppercase(), path.clone()));
        }
    }
    documented.sort();
    let mut routed: Vec<(String, String)> = dq_server::routes::ROUTES
        .iter()
        .filter(|r| r.documented)
        .map(|r| (r.method.to_string(), r.path.to_string()))
        .collect();
    routed.sort();
    assert_eq!(documented, routed);
    // Every route but the admin page's is documented.
    for r in dq_server::routes::ROUTES {
        assert!(
            r.documented || r.path.starts_with("/admin/"),
            "{r:?} is not in the document"
        );
    }
    let mut want: Vec<&str> = routed.iter().map(|(_, p)| p.as_str()).collect();
    want.sort_unstable();
    want.dedup();
    // Each route answers something other than route_not_found.
    for p in &want {
        let uri = p
            .replace("{topic}", "t")
            .replace("{id}", "i")
            .replace("{name}", "n");
        let (s, v) = a.call("GET", &uri, None).await;
        assert_ne!(v["error"]["code"], json!("route_not_found"), "{uri}: {s}");
    }
}

async fn metrics_after_known_operations(fresh: FreshApi) {
    let a = fresh.api();
    a.call(
        "POST",
        "/v1/topics/m/jobs:batch",
        Some(json!({"jobs": [
            {"id": "1"}, {"id": "2"}, {"id": "3"}, {"id": "later", "delay_ms": 60000}
        ]})),
    )
    .await;
    let (_, v) = a
        .call(
            "POST",
            "/v1/reserve",
            Some(json!({"topics": ["m"], "max": 2})),
        )
        .await;
    let j = &v["jobs"][0];
    a.call(
        "POST",
        "/v1/topics/m/jobs/{}/ack"
            .replace("{}", j["id"].as_str().unwrap())
            .as_str(),
        Some(json!({"token": j["token"]})),
    )
    .await;
    a.call("DELETE", "/v1/topics/m/jobs/later", None).await;
    let j = &v["jobs"][1];
    let (s, _) = a
        .call(
            "POST",
            &format!("/v1/topics/m/jobs/{}/nack", j["id"].as_str().unwrap()),
            Some(json!({"token": j["token"], "dead": true})),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let (_, v) = a
        .call("POST", "/v1/reserve", Some(json!({"topics": ["m"]})))
        .await;
    let j = &v["jobs"][0];
    let (s, _) = a
        .call(
            "POST",
            &format!("/v1/topics/m/jobs/{}/nack", j["id"].as_str().unwrap()),
            Some(json!({"token": j["token"], "retry_in_ms": 60000})),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let res = a
        .send(
            Request::builder()
                .uri("/metrics")
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(res.status, StatusCode::OK);
    assert!(
        res.headers[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/plain; version=0.0.4")
    );
    let text = res.text;
    let m = parse_metrics(&text);
    let get = |k: &str| *m.get(k).unwrap_or_else(|| panic!("no {k} in\n{text}"));
    assert_eq!(get("dq_up"), 1.0);
    assert_eq!(get("dq_topic_jobs{topic=\"m\",state=\"ready\"}"), 0.0);
    assert_eq!(get("dq_topic_jobs{topic=\"m\",state=\"reserved\"}"), 0.0);
    assert_eq!(get("dq_topic_jobs{topic=\"m\",state=\"scheduled\"}"), 1.0);
    assert_eq!(get("dq_topic_jobs{topic=\"m\",state=\"dead\"}"), 1.0);
    assert_eq!(get("dq_topic_enqueued_total{topic=\"m\"}"), 4.0);
    assert_eq!(get("dq_topic_acked_total{topic=\"m\"}"), 1.0);
    assert_eq!(get("dq_topic_cancelled_total{topic=\"m\"}"), 1.0);
    assert_eq!(get("dq_topic_failed_total{topic=\"m\"}"), 2.0);
    assert_eq!(get("dq_topic_nacked_total{topic=\"m\"}"), 2.0);
    assert_eq!(get("dq_topic_retried_total{topic=\"m\"}"), 1.0);
    assert_eq!(get("dq_topic_dead_total{topic=\"m\"}"), 1.0);
    assert_eq!(get("dq_topic_expired_total{topic=\"m\"}"), 0.0);
    assert_eq!(get("dq_lateness_seconds_count{topic=\"m\"}"), 3.0);
    assert_eq!(
        get("dq_lateness_seconds_bucket{topic=\"m\",le=\"+Inf\"}"),
        3.0
    );
    assert!(get("dq_topic_oldest_overdue_seconds{topic=\"m\"}") >= 0.0);
    assert_eq!(
        get(
            "dq_http_request_duration_seconds_count{method=\"POST\",route=\"/v1/reserve\",status=\"200\"}"
        ),
        2.0
    );
    assert_eq!(
        get(
            "dq_http_request_duration_seconds_count{method=\"DELETE\",route=\"/v1/topics/{topic}/jobs/{id}\",status=\"200\"}"
        ),
        1.0
    );
    // What a dashboard expects of any process.
    assert_eq!(
        get(&format!(
            "dq_build_info{{version=\"{}\"}}",
            env!("CARGO_PKG_VERSION")
        )),
        1.0
    );
    let rss = get("process_resident_memory_bytes");
    assert!(rss > 1e6 && rss < 1e11, "{rss}");
    assert!(get("process_open_fds") >= 3.0);
    assert!(get("process_max_fds") >= get("process_open_fds"));
    assert!(get("process_cpu_seconds_total") >= 0.0);
    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let started = get("process_start_time_seconds");
    assert!(
        started <= now_s + 1.0 && started > now_s - 3600.0,
        "{started} vs {now_s}"
    );
}

#[tokio::test]
async fn metrics_say_when_the_store_is_down() {
    let a = api_with_redis_down();
    let res = a
        .send(
            Request::builder()
                .uri("/metrics")
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(
        res.status,
        StatusCode::OK,
        "metrics are served while the store is down"
    );
    let text = res.text;
    assert_eq!(parse_metrics(&text)["dq_up"], 0.0);
}

async fn request_ids_are_echoed_or_made(fresh: FreshApi) {
    let a = fresh.api();
    let res = a
        .send(
            Request::builder()
                .uri("/healthz")
                .header("x-request-id", "abc-123")
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(res.headers["x-request-id"], "abc-123");
    let ids: Vec<String> = two_request_ids(&a).await;
    assert_eq!(ids.len(), 2);
    assert_ne!(ids[0], ids[1], "each request gets its own id");
    assert!(ids.iter().all(|i| i.len() == 16));
}

async fn two_request_ids(a: &Api) -> Vec<String> {
    let mut out = Vec::new();
    for _ in 0..2 {
        let res = a
            .send(
                Request::builder()
                    .uri("/healthz")
                    .body(Body::empty())
                    .unwrap(),
            )
            .await;
        out.push(res.headers["x-request-id"].to_str().unwrap().to_string());
    }
    out
}

/// With Redis shards, one down: /readyz stays 200 and names the shard that
/// is down; /metrics says which answers.
#[tokio::test]
async fn health_per_shard() {
    let up = RedisServer::start();
    let dead_port = dq_testkit::free_port();
    let store = dq_redis::ShardedStore::new(vec![
        ("a".into(), redis_shard(&up.url())),
        (
            "b".into(),
            redis_shard(&format!("redis://127.0.0.1:{dead_port}")),
        ),
    ]);
    let a = api_over((Arc::new(store), ()), Arc::new(SystemClock));
    let (s, v) = a.call("GET", "/readyz", None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["stores"][0], json!({"name": "a", "up": true}));
    assert_eq!(v["stores"][1]["up"], json!(false));
    assert!(
        v["stores"][1]["error"]
            .as_str()
            .is_some_and(|e| !e.is_empty())
    );
    let res = a
        .send(
            Request::builder()
                .uri("/metrics")
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    let text = res.text;
    let m = parse_metrics(&text);
    assert_eq!(m["dq_up"], 1.0);
    assert_eq!(m["dq_store_up{store=\"a\"}"], 1.0);
    assert_eq!(m["dq_store_up{store=\"b\"}"], 0.0);
    drop(up);
}

/// Partitions through the API: set on an empty topic, generated ids name
/// their partition, the count cannot change while jobs wait, bounds checked.
#[tokio::test]
async fn partitions_through_the_api() {
    let a = redis_api();
    for bad in [0, 257] {
        a.expect_error(
            "PUT",
            "/v1/topics/p",
            Some(json!({ "partitions": bad })),
            400,
            "invalid_partitions",
        )
        .await;
    }
    let (s, v) = a
        .call("PUT", "/v1/topics/p", Some(json!({"partitions": 4})))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["config"]["partitions"], json!(4));
    let (s, v) = a
        .call(
            "POST",
            "/v1/topics/p/jobs:batch",
            Some(json!({"jobs": [{}, {}, {}, {}, {"id": "mine"}]})),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let ids: Vec<String> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect();
    assert!(ids[..4].iter().all(|i| i.contains("~p")), "{ids:?}");
    assert_eq!(ids[4], "mine");
    for id in &ids {
        let (s, _) = a
            .call("GET", &format!("/v1/topics/p/jobs/{id}"), None)
            .await;
        assert_eq!(s, StatusCode::OK, "{id} is found by its id");
    }
    a.expect_error(
        "PUT",
        "/v1/topics/p",
        Some(json!({"partitions": 2})),
        400,
        "invalid_partitions",
    )
    .await;
    assert_eq!(a.stats("p").await["ready"], json!(5));
    let (_, v) = a.call("GET", "/v1/topics/p", None).await;
    assert_eq!(v["config"]["partitions"], json!(4), "unchanged");
}

async fn a_topic_turned_to_push_or_back_is_seen_by_reserve_at_once(fresh: FreshApi) {
    let a = fresh.api();
    let reserve = json!({"topics": ["hooks"], "max": 1});
    let (s, _) = a
        .call("POST", "/v1/topics/hooks/jobs", Some(json!({"id": "j1"})))
        .await;
    assert_eq!(s, StatusCode::CREATED);
    // Reserved once as a pull topic: its mode is now remembered.
    let (s, v) = a.call("POST", "/v1/reserve", Some(reserve.clone())).await;
    assert_eq!(
        (s, v["jobs"].as_array().map(Vec::len)),
        (StatusCode::OK, Some(1))
    );
    // Turned to push through this instance: refused on the very next call,
    // not a second later.
    let push = json!({"delivery": {"mode": "push", "url": "http://127.0.0.1:9/hook"}});
    let (s, v) = a.call("PUT", "/v1/topics/hooks", Some(push)).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["config"]["max_attempts"], 10, "push defaults: {v}");
    a.expect_error(
        "POST",
        "/v1/reserve",
        Some(reserve.clone()),
        409,
        "topic_is_push",
    )
    .await;
    // And back to pull: reservable at once.
    let (s, _) = a
        .call(
            "PUT",
            "/v1/topics/hooks",
            Some(json!({"delivery": {"mode": "pull"}})),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let (s, v) = a.call("POST", "/v1/reserve", Some(reserve)).await;
    assert_eq!(
        (s, v["jobs"].as_array().map(Vec::len)),
        (StatusCode::OK, Some(0))
    );
}

async fn a_json_body_comes_back_as_it_was_sent(fresh: FreshApi) {
    let a = fresh.api();
    // Key order, spacing, a float written 1.0, an escape, a big integer:
    // all things a parse-and-print would change.
    let body = r#"{"z": 1.0,  "a": "\u00e9\n", "n": 12345678901234567890123}"#;
    let req = Request::builder()
        .method("POST")
        .uri("/v1/topics/asis/jobs")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(format!(r#"{{"id": "j", "body": {body}}}"#)))
        .unwrap();
    let (s, v) = a.raw(req).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let text = |req: Request<Body>| {
        let a = &a;
        async move { a.text(req).await.1 }
    };
    let got = text(
        Request::builder()
            .uri("/v1/topics/asis/jobs/j")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert!(got.contains(&format!(r#""body":{body}"#)), "{got}");
    let reserved = text(
        Request::builder()
            .method("POST")
            .uri("/v1/reserve")
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(r#"{"topics": ["asis"]}"#))
            .unwrap(),
    )
    .await;
    assert!(
        reserved.contains(&format!(r#""body":{body}"#)),
        "{reserved}"
    );
}

async fn dead_letter_calls_name_a_known_topic_and_dot_names_are_refused(fresh: FreshApi) {
    let a = fresh.api();
    let (s, _) = a
        .call("POST", "/v1/topics/known/jobs", Some(json!({"id": "j"})))
        .await;
    assert_eq!(s, StatusCode::CREATED);
    a.expect_errors(&[
        (
            "GET",
            "/v1/topics/nosuch/dead",
            None,
            404,
            "topic_not_found",
        ),
        (
            "POST",
            "/v1/topics/nosuch/dead/replay",
            Some(json!({})),
            404,
            "topic_not_found",
        ),
        (
            "DELETE",
            "/v1/topics/nosuch/dead",
            None,
            404,
            "topic_not_found",
        ),
        // Only a missing `ids` means all.
        (
            "POST",
            "/v1/topics/known/dead/replay",
            Some(json!({"ids": null})),
            400,
            "invalid_json",
        ),
        // Dot segments: clients resolve them away, so they are no names.
        (
            "POST",
            "/v1/topics/%2E%2E/jobs",
            Some(json!({})),
            400,
            "invalid_topic",
        ),
        (
            "POST",
            "/v1/topics/./jobs",
            Some(json!({})),
            400,
            "invalid_topic",
        ),
        (
            "GET",
            "/v1/topics/known/jobs/%2E%2E",
            None,
            400,
            "invalid_id",
        ),
        (
            "POST",
            "/v1/topics/known/jobs",
            Some(json!({"id": "."})),
            400,
            "invalid_id",
        ),
    ])
    .await;
    // Nothing was written by any of them; the known topic still answers.
    let (s, v) = a.call("GET", "/v1/topics", None).await;
    assert_eq!(s, StatusCode::OK);
    let names: Vec<&str> = v["topics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["known"]);
    let (s, v) = a
        .call("POST", "/v1/topics/known/dead/replay", Some(json!({})))
        .await;
    assert_eq!((s, v["replayed"].clone()), (StatusCode::OK, json!(0)));
}

async fn every_v1_error_is_json(fresh: FreshApi) {
    let a = fresh.api();
    let (s, _) = a
        .call("POST", "/v1/topics/t/jobs", Some(json!({"id": "j"})))
        .await;
    assert_eq!(s, StatusCode::CREATED);
    a.expect_errors(&[
        (
            "GET",
            "/v1/topics/t/dead?limit=abc",
            None,
            400,
            "invalid_query",
        ),
        (
            "GET",
            "/v1/topics/t/dead?nosuch=1",
            None,
            400,
            "invalid_query",
        ),
        (
            "PUT",
            "/v1/reserve",
            Some(json!({})),
            405,
            "method_not_allowed",
        ),
        (
            "POST",
            "/v1/topics/t/jobs/j",
            Some(json!({})),
            405,
            "method_not_allowed",
        ),
        ("GET", "/v1/topics/%FF/jobs/j", None, 400, "invalid_path"),
        ("GET", "/v1/topics/t/jobs/%C3", None, 400, "invalid_path"),
    ])
    .await;
    // The valid query still works.
    let (s, v) = a.call("GET", "/v1/topics/t/dead?limit=5", None).await;
    assert_eq!((s, v["jobs"].clone()), (StatusCode::OK, json!([])));
}

/// `GET /v1/topics/asis/jobs/{id}`'s text.
async fn job_text(a: &Api, id: &str) -> String {
    a.text(
        Request::builder()
            .uri(format!("/v1/topics/asis/jobs/{id}"))
            .body(Body::empty())
            .unwrap(),
    )
    .await
    .1
}

#[tokio::test]
async fn bodies_are_stored_as_sent_or_refused_on_both_stores() {
    // What a parse-and-print would change: numbers beyond f64 and u64, -0,
    // exponents, a lone surrogate escape, escapes of plain characters, deep
    // nesting up to the limit.
    let depth = 100;
    let deep = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    let bodies = [
        "1e400".to_string(),
        "18446744073709551617".to_string(),
        "-0".to_string(),
        "1E2".to_string(),
        r#""\ud800""#.to_string(),
        r#""\u0041\/""#.to_string(),
        r#"{"b":1,"a":[ 1 , 2 ]}"#.to_string(),
        deep,
    ];
    for (store, a) in [("redis", redis_api()), ("embedded", embedded_api())] {
        for (i, body) in bodies.iter().enumerate() {
            let id = format!("b{i}");
            let (s, v) = a
                .text(post_json(
                    "/v1/topics/asis/jobs",
                    format!(r#"{{"id": "{id}", "body": {body}}}"#),
                ))
                .await;
            assert_eq!(s, StatusCode::CREATED, "{store} {body}: {v}");
            let got = job_text(&a, &id).await;
            assert!(
                got.contains(&format!(r#""body":{body}"#)),
                "{store}: {body} came back as {got}"
            );
        }
        // Every one handed out as sent, too.
        let (_, got) = a
            .text(post_json(
                "/v1/reserve",
                r#"{"topics": ["asis"], "max": 100}"#.to_string(),
            ))
            .await;
        for body in &bodies {
            assert!(
                got.contains(&format!(r#""body":{body}"#)),
                "{store} reserve: {body} not in {got}"
            );
        }
        // Deeper than the documented limit: refused, nothing written.
        for n in [200, 30_000] {
            let too_deep = format!("{}{}", "[".repeat(n), "]".repeat(n));
            let (s, v) = a
                .text(post_json(
                    "/v1/topics/asis/jobs",
                    format!(r#"{{"id": "deep", "body": {too_deep}}}"#),
                ))
                .await;
            assert_eq!(s, StatusCode::BAD_REQUEST, "{store}: {v}");
            assert!(v.contains("invalid_body") && v.contains("128"), "{v}");
            let (s, _) = a.call("GET", "/v1/topics/asis/jobs/deep", None).await;
            assert_eq!(s, StatusCode::NOT_FOUND, "{store}");
        }
        // `"body": null` is the body null (as no body); a null base64 is
        // none; base64 whose last symbol has unused bits set reads as the
        // bytes it spells.
        for (id, req, want) in [
            (
                "n1",
                r#"{"id": "n1", "body": null, "body_base64": null}"#,
                r#""body":null"#,
            ),
            (
                "n2",
                r#"{"id": "n2", "body_base64": null}"#,
                r#""body":null"#,
            ),
            (
                "n3",
                r#"{"id": "n3", "body_base64": "AB=="}"#,
                r#""body_base64":"AA==""#,
            ),
        ] {
            let (s, v) = a
                .text(post_json("/v1/topics/asis/jobs", req.to_string()))
                .await;
            assert_eq!(s, StatusCode::CREATED, "{store} {req}: {v}");
            let got = job_text(&a, id).await;
            assert!(got.contains(want), "{store} {req}: {got}");
        }
    }
}

/// A due time years in the past counts as due at the enqueue: lateness and
/// "oldest overdue" start there, not in 2020 (which would fill the +Inf
/// bucket and fire the documented alerts).
#[tokio::test]
async fn lateness_and_overdue_count_from_the_enqueue_for_a_past_due_time() {
    for (store, a) in [("redis", redis_api()), ("embedded", embedded_api())] {
        let (s, v) = a
            .call(
                "POST",
                "/v1/topics/past/jobs",
                Some(json!({"id": "old", "body": 1, "due_at_ms": 1_577_836_800_000u64})),
            )
            .await;
        assert_eq!(s, StatusCode::CREATED, "{store}: {v}");
        let now = SystemClock.now_ms();
        assert!(
            v["due_at_ms"].as_u64().unwrap() + 5000 > now,
            "{store}: stored due at its enqueue: {v}"
        );
        let (_, v) = a.call("GET", "/v1/topics/past", None).await;
        assert!(
            v["stats"]["oldest_overdue_ms"].as_u64().unwrap() < 5000,
            "{store}: {v}"
        );
        let (s, v) = a
            .call("POST", "/v1/reserve", Some(json!({"topics": ["past"]})))
            .await;
        assert_eq!(s, StatusCode::OK, "{store}: {v}");
        assert_eq!(v["jobs"][0]["id"], "old");
        let text = a.metrics_text().await;
        let m = parse_metrics(&text);
        assert_eq!(
            m.get("dq_lateness_seconds_bucket{topic=\"past\",le=\"5\"}"),
            Some(&1.0),
            "{store}: lateness under 5 s\n{text}"
        );
    }
}

/// What a dashboard reads besides the topics: the store's size, reserve
/// calls waiting, push deliveries in flight, the embedded writer's work;
/// HTTP histograms stay small.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_show_store_size_waiting_reserves_and_deliveries() {
    for (store, a) in [("redis", redis_api()), ("embedded", embedded_api())] {
        let a = Arc::new(a);
        let waiter = {
            let a = a.clone();
            tokio::spawn(async move {
                a.call(
                    "POST",
                    "/v1/reserve",
                    Some(json!({"topics": ["idle"], "wait_ms": 1500})),
                )
                .await
            })
        };
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let text = a.metrics_text().await;
        let m = parse_metrics(&text);
        assert_eq!(
            m.get("dq_reserve_in_progress"),
            Some(&1.0),
            "{store}\n{text}"
        );
        assert_eq!(m.get("dq_push_deliveries_in_flight"), Some(&0.0), "{store}");
        assert!(
            m.get("dq_store_bytes").is_some_and(|b| *b > 0.0),
            "{store}\n{text}"
        );
        // The embedded store's one writer says how busy it is; Redis has none.
        let writer = |name: &str| m.get(name).copied();
        if store == "embedded" {
            let ops = writer("dq_embedded_writer_operations_total").unwrap_or(0.0);
            let commits = writer("dq_embedded_writer_commits_total").unwrap_or(0.0);
            let busy = writer("dq_embedded_writer_busy_seconds_total").unwrap_or(0.0);
            let commit = writer("dq_embedded_writer_commit_seconds_total").unwrap_or(-1.0);
            assert!(ops >= 1.0 && commits >= 1.0, "{text}");
            assert!(busy > 0.0 && (0.0..=busy).contains(&commit), "{text}");
            assert!(text.contains("# TYPE dq_embedded_writer_busy_seconds_total counter"));
        } else {
            assert_eq!(
                writer("dq_embedded_writer_operations_total"),
                None,
                "{text}"
            );
        }
        assert_eq!(waiter.await.unwrap().0, StatusCode::OK);
        let text = a.metrics_text().await;
        let m = parse_metrics(&text);
        assert_eq!(m.get("dq_reserve_in_progress"), Some(&0.0), "{store}");
        let buckets = text
            .lines()
            .filter(|l| l.starts_with("dq_http_request_duration_seconds_bucket{"))
            .filter(|l| l.contains("route=\"/v1/reserve\""))
            .count();
        assert_eq!(buckets, 9, "{store}: 8 bounds and +Inf per HTTP histogram");
    }
}

/// Every page of `GET /v1/topics/{t}/jobs?{query}` from the start.
async fn all_pages(a: &Api, t: &str, query: &str, limit: usize) -> Vec<Value> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut uri = format!("/v1/topics/{t}/jobs?limit={limit}{query}");
        if let Some(c) = &cursor {
            uri.push_str(&format!("&cursor={}", urlencode(c)));
        }
        let (s, v) = a.call("GET", &uri, None).await;
        assert_eq!(s, StatusCode::OK, "{uri}: {v}");
        out.extend(v["jobs"].as_array().unwrap().iter().cloned());
        match v["cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    out
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// `GET /v1/topics/{topic}/jobs` pages every job with its own settings;
/// `POST /v1/topics/{topic}/jobs:import` writes jobs back as they were
/// (attempts, due time, dead letters), idempotently; every bad request is
/// refused with its own code and writes nothing.
async fn export_listing_and_import(fresh: FreshApi) {
    let clock = ManualClock::new(1_700_000_000_000);
    let now = clock.now_ms();
    let a = fresh.with_clock(Arc::new(clock.clone()));
    let (s, v) = a
        .call(
            "POST",
            "/v1/topics/src/jobs:batch",
            Some(json!({"jobs": [
                {"id": "a/1", "body": {"x": [1, 2]}, "delay_ms": 60_000, "max_attempts": 3},
                {"id": "b", "body_base64": "AP8=", "retry": {"fixed_ms": 10}},
                {"id": "c", "delay_ms": 5 * 86_400_000u64, "priority": 3},
            ]})),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let jobs = all_pages(&a, "src", "", 1).await;
    let mut ids: Vec<&str> = jobs.iter().map(|j| j["id"].as_str().unwrap()).collect();
    ids.sort();
    assert_eq!(ids, ["a/1", "b", "c"]);
    let one = |id: &str| jobs.iter().find(|j| j["id"] == json!(id)).unwrap().clone();
    assert_eq!(
        one("a/1"),
        json!({"id": "a/1", "state": "scheduled", "due_at_ms": now + 60_000, "priority": 1024,
               "attempts": 0, "max_attempts": 3, "created_at_ms": now, "body": {"x": [1, 2]}})
    );
    assert_eq!(one("b")["body_base64"], json!("AP8="));
    assert_eq!(one("b")["retry"], json!({"fixed_ms": 10}));
    let ready = all_pages(&a, "src", "&state=ready", 10).await;
    assert_eq!(ready.len(), 1);
    assert_eq!(ready[0]["id"], json!("b"));

    // Into another topic, with attempts and a dead letter.
    let mut import: Vec<Value> = jobs.clone();
    import.push(
        json!({"id": "d", "state": "dead", "due_at_ms": now - 10, "priority": 1,
        "attempts": 4, "last_error": "card declined", "died_at_ms": now - 5}),
    );
    import[0]["attempts"] = json!(2);
    let (s, v) = a
        .call(
            "POST",
            "/v1/topics/dst/jobs:import",
            Some(json!({"jobs": import})),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 4);
    assert!(results.iter().all(|r| r["created"] == json!(true)), "{v}");
    assert_eq!(results[3]["state"], json!("dead"));
    let (_, d) = a.call("GET", "/v1/topics/dst/jobs/d", None).await;
    assert_eq!(
        (
            d["state"].clone(),
            d["attempts"].clone(),
            d["last_error"].clone(),
            d["died_at_ms"].clone()
        ),
        (
            json!("dead"),
            json!(4),
            json!("card declined"),
            json!(now - 5)
        )
    );
    let mut back = all_pages(&a, "dst", "", 1000).await;
    back.sort_by_key(|j| j["id"].as_str().unwrap().to_string());
    let mut want: Vec<Value> = import.clone();
    want.sort_by_key(|j| j["id"].as_str().unwrap().to_string());
    for w in &mut want {
        if w.get("created_at_ms").is_none() {
            w["created_at_ms"] = json!(now);
        }
        if w.get("body").is_none() && w.get("body_base64").is_none() {
            w["body"] = Value::Null; // no body is the JSON body null
        }
    }
    assert_eq!(back, want, "the same jobs, as they were");
    // Twice: nothing changes.
    let (s, v) = a
        .call(
            "POST",
            "/v1/topics/dst/jobs:import",
            Some(json!({"jobs": import})),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    assert!(
        v["results"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["created"] == json!(false)),
        "{v}"
    );
    let mut again = all_pages(&a, "dst", "", 1000).await;
    again.sort_by_key(|j| j["id"].as_str().unwrap().to_string());
    assert_eq!(again, back);
    let (_, st) = a.call("GET", "/v1/topics/dst", None).await;
    assert_eq!(st["stats"]["counters"]["enqueued"], json!(4));
    // A reserved job (as a listing shows it) is imported waiting, due at
    // its lease deadline; another state's lease_deadline_ms is not kept.
    let (s, v) = a
        .call(
            "POST",
            "/v1/topics/leased/jobs:import",
            Some(json!({"jobs": [
                {"id": "held", "state": "reserved", "due_at_ms": now - 10, "priority": 1,
                 "attempts": 1, "lease_deadline_ms": now + 60_000, "key": "c1"},
                {"id": "odd", "state": "scheduled", "due_at_ms": now + 1000, "priority": 1,
                 "attempts": 0, "lease_deadline_ms": 5},
            ]})),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["results"][0]["state"], json!("scheduled"), "{v}");
    let (_, j) = a.call("GET", "/v1/topics/leased/jobs/held", None).await;
    assert_eq!(
        (
            j["state"].clone(),
            j["due_at_ms"].clone(),
            j["attempts"].clone(),
            j["key"].clone()
        ),
        (
            json!("scheduled"),
            json!(now + 60_000),
            json!(1),
            json!("c1")
        )
    );
    let (_, j) = a.call("GET", "/v1/topics/leased/jobs/odd", None).await;
    assert_eq!(j["lease_deadline_ms"], Value::Null);
    // A dead letter's error longer than 4096 bytes is cut, as a nack's;
    // a waiting job's died_at_ms is not kept.
    let (s, v) = a
        .call(
            "POST",
            "/v1/topics/leased/jobs:import",
            Some(json!({"jobs": [
                {"id": "long", "state": "dead", "due_at_ms": 1, "priority": 1, "attempts": 1,
                 "died_at_ms": now, "last_error": "é".repeat(3000)},
                {"id": "alive", "state": "ready", "due_at_ms": now, "priority": 1,
                 "attempts": 0, "died_at_ms": 7},
            ]})),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (_, j) = a.call("GET", "/v1/topics/leased/jobs/long", None).await;
    assert_eq!(j["last_error"].as_str().unwrap().len(), 4096);
    let (_, j) = a.call("GET", "/v1/topics/leased/jobs/alive", None).await;
    assert_eq!(
        (j["state"].clone(), j["died_at_ms"].clone()),
        (json!("ready"), Value::Null)
    );

    // Bad requests: their own codes, nothing written.
    let good =
        json!({"id": "new", "state": "ready", "due_at_ms": now, "priority": 1, "attempts": 0});
    let bad = |job: Value| json!({"jobs": [good.clone(), job]});
    for (body, code) in [
        (
            bad(
                json!({"id": "r", "state": "dead", "due_at_ms": now, "priority": 1, "attempts": 1}),
            ),
            "invalid_died_at",
        ),
        (
            bad(
                json!({"id": "r", "state": "ready", "due_at_ms": now, "priority": 1, "attempts": 1, "body_base64": "%%"}),
            ),
            "invalid_body",
        ),
        (
            bad(
                json!({"id": "a b", "state": "ready", "due_at_ms": now, "priority": 1, "attempts": 1}),
            ),
            "invalid_id",
        ),
        (
            bad(
                json!({"id": "r", "state": "ready", "due_at_ms": now, "priority": 1, "attempts": 1, "lease_ms": 1}),
            ),
            "invalid_lease",
        ),
        (
            bad(
                json!({"id": "r", "state": "ready", "due_at_ms": now, "priority": 1, "attempts": 5000}),
            ),
            "invalid_attempts",
        ),
        (json!({"jobs": []}), "invalid_batch"),
        (
            bad(
                json!({"id": "r", "state": "scheduled", "due_at_ms": now + 20 * 365 * 86_400_000u64, "priority": 1, "attempts": 0}),
            ),
            "invalid_due_at",
        ),
        (
            bad(
                json!({"id": "r", "state": "dead", "due_at_ms": 1, "priority": 1, "attempts": 0, "died_at_ms": 1u64 << 60}),
            ),
            "invalid_time",
        ),
        (
            bad(
                json!({"id": "r", "state": "ready", "due_at_ms": 1, "priority": 1, "attempts": 0, "retry": {"delays_ms": []}}),
            ),
            "invalid_retry",
        ),
        (
            bad(
                json!({"id": "r", "state": "ready", "due_at_ms": now, "priority": 1, "attempts": 1, "shiny": 1}),
            ),
            "invalid_json",
        ),
    ] {
        let (s, v) = a
            .call("POST", "/v1/topics/dst/jobs:import", Some(body.clone()))
            .await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{body}: {v}");
        assert_eq!(v["error"]["code"], json!(code), "{body}: {v}");
        let (s, _) = a.call("GET", "/v1/topics/dst/jobs/new", None).await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{code}: nothing written");
    }
    for (uri, status, code) in [
        ("/v1/topics/dst/jobs?limit=0", 400, "invalid_limit"),
        ("/v1/topics/dst/jobs?limit=1001", 400, "invalid_limit"),
        ("/v1/topics/dst/jobs?state=gone", 400, "invalid_query"),
        ("/v1/topics/dst/jobs?colour=red", 400, "invalid_query"),
        ("/v1/topics/dst/jobs?cursor=%20", 400, "invalid_cursor"),
        ("/v1/topics/nope/jobs", 404, "topic_not_found"),
    ] {
        let (s, v) = a.call("GET", uri, None).await;
        assert_eq!(s.as_u16(), status, "{uri}: {v}");
        assert_eq!(v["error"]["code"], json!(code), "{uri}: {v}");
    }
}

/// `rate_limit` and `paused` through `PUT /v1/topics/{t}`: bad values are
/// refused with nothing changed; a long-polling reserve that finds only
/// rate-limited jobs sleeps until the next token (not the wait's end, not a
/// busy loop); a paused topic hands nothing out until resumed; the jobs
/// held back show in `dq_topic_rate_limited_total`.
async fn flow_control_through_the_api(fresh: FreshApi) {
    let a = Arc::new(fresh.api());
    for bad in [
        json!({"limit": 0, "per_ms": 1000}),
        json!({"limit": 5, "per_ms": 0}),
        json!({"limit": 5, "per_ms": 1000, "burst": 0}),
        json!({"limit": 5, "per_ms": 86_400_001u64}),
    ] {
        a.expect_error(
            "PUT",
            "/v1/topics/fc",
            Some(json!({"rate_limit": bad, "max_attempts": 3})),
            400,
            "invalid_rate_limit",
        )
        .await;
    }
    let (s, _) = a.call("GET", "/v1/topics/fc", None).await;
    assert_eq!(s, StatusCode::NOT_FOUND, "a refused PUT created nothing");
    let (s, v) = a
        .call(
            "PUT",
            "/v1/topics/fc",
            Some(json!({"rate_limit": {"limit": 5, "per_ms": 1000}})),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        v["config"]["rate_limit"],
        json!({"limit": 5, "per_ms": 1000, "burst": 5})
    );
    assert_eq!(v["config"]["paused"], json!(false));
    let jobs: Vec<Value> = (0..8).map(|i| json!({"id": format!("j{i}")})).collect();
    a.call(
        "POST",
        "/v1/topics/fc/jobs:batch",
        Some(json!({ "jobs": jobs })),
    )
    .await;
    let reserve = json!({"topics": ["fc"], "max": 10, "wait_ms": 5000});
    let (_, v) = a.call("POST", "/v1/reserve", Some(reserve.clone())).await;
    assert_eq!(v["jobs"].as_array().unwrap().len(), 5, "the burst");
    let t0 = std::time::Instant::now();
    let (_, v) = a.call("POST", "/v1/reserve", Some(reserve.clone())).await;
    let took = t0.elapsed();
    assert_eq!(v["jobs"].as_array().unwrap().len(), 1, "one token later");
    assert!(
        took.as_millis() >= 150,
        "not before the next token: {took:?}"
    );
    assert!(
        took.as_millis() < 2000,
        "woke at the token, not the wait's end: {took:?}"
    );

    let (_, v) = a
        .call("PUT", "/v1/topics/fc", Some(json!({"paused": true})))
        .await;
    assert_eq!(v["config"]["paused"], json!(true));
    assert_eq!(v["config"]["rate_limit"]["limit"], json!(5), "kept");
    let held = {
        let a = a.clone();
        let reserve = reserve.clone();
        tokio::spawn(async move {
            let t0 = std::time::Instant::now();
            let (_, v) = a.call("POST", "/v1/reserve", Some(reserve)).await;
            (v, t0.elapsed())
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    let (_, v) = a
        .call("PUT", "/v1/topics/fc", Some(json!({"paused": false})))
        .await;
    assert_eq!(v["config"]["paused"], json!(false));
    let (v, took) = held.await.unwrap();
    assert!(took.as_millis() >= 550, "held while paused: {took:?}");
    assert!(
        took.as_millis() < 3000,
        "the resume woke the waiter: {took:?}"
    );
    assert!(!v["jobs"].as_array().unwrap().is_empty(), "{v}");
    let (_, v) = a
        .call("PUT", "/v1/topics/fc", Some(json!({"rate_limit": null})))
        .await;
    assert!(v["config"].get("rate_limit").is_none(), "{v}");
    let res = a
        .send(
            Request::builder()
                .uri("/metrics")
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    let m = parse_metrics(&res.text);
    assert!(
        m["dq_topic_rate_limited_total{topic=\"fc\"}"] >= 3.0,
        "{}",
        res.text
    );
}

/// `GET /v1/topics?limit=&cursor=&prefix=`: pages of at most `limit`
/// topics in name order with their counts, `next_cursor` null on the last;
/// a prefix filters exactly; bad parameters are refused with their codes.
async fn topics_page_by_cursor_and_prefix(fresh: FreshApi) {
    let a = fresh.api();
    let mut names: Vec<String> = (0..250).map(|i| format!("n{i:03}")).collect();
    names.push("m_x".into());
    for n in &names {
        let (s, v) = a
            .call(
                "POST",
                &format!("/v1/topics/{n}/jobs"),
                Some(json!({"body": 1})),
            )
            .await;
        assert_eq!(s, StatusCode::CREATED, "{v}");
    }
    names.sort();
    let page = |v: &Value| -> Vec<String> {
        v["topics"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect()
    };
    // The default page is 100; the counts come with each topic.
    let (s, v) = a.call("GET", "/v1/topics", None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(page(&v), names[..100]);
    assert_eq!(v["next_cursor"], json!(names[99]));
    assert_eq!(v["topics"][0]["stats"]["ready"], json!(1));
    // Every topic once, page after page.
    for limit in [1, 7, 251, 1000] {
        let (mut all, mut cursor) = (Vec::new(), None::<String>);
        loop {
            let uri = match &cursor {
                None => format!("/v1/topics?limit={limit}"),
                Some(c) => format!("/v1/topics?limit={limit}&cursor={c}"),
            };
            let (s, v) = a.call("GET", &uri, None).await;
            assert_eq!(s, StatusCode::OK, "{uri}: {v}");
            assert!(page(&v).len() <= limit);
            all.extend(page(&v));
            match v["next_cursor"].as_str() {
                Some(c) => cursor = Some(c.to_string()),
                None => break,
            }
            assert!(all.len() <= names.len(), "{uri}");
        }
        assert_eq!(all, names, "limit {limit}");
    }
    let (_, v) = a.call("GET", "/v1/topics?limit=251", None).await;
    assert_eq!(v["next_cursor"], Value::Null, "all of them: no next page");
    let (_, v) = a.call("GET", "/v1/topics?prefix=n24&limit=5", None).await;
    assert_eq!(page(&v), names[241..246]);
    assert_eq!(v["next_cursor"], json!("n244"));
    let (_, v) = a
        .call("GET", "/v1/topics?prefix=n24&limit=5&cursor=n244", None)
        .await;
    assert_eq!(page(&v), names[246..251]);
    assert_eq!(v["next_cursor"], Value::Null);
    let (_, v) = a.call("GET", "/v1/topics?prefix=m_", None).await;
    assert_eq!(page(&v), ["m_x"], "`_` is a character, not a wildcard");
    let (_, v) = a.call("GET", "/v1/topics?prefix=", None).await;
    assert_eq!(page(&v).len(), 100);
    let (_, v) = a.call("GET", "/v1/topics?cursor=zzz", None).await;
    assert_eq!((page(&v).len(), &v["next_cursor"]), (0, &Value::Null));

    for (uri, code) in [
        ("/v1/topics?limit=0", "invalid_limit"),
        ("/v1/topics?limit=1001", "invalid_limit"),
        ("/v1/topics?limit=-1", "invalid_query"),
        ("/v1/topics?limit=ten", "invalid_query"),
        ("/v1/topics?colour=red", "invalid_query"),
        ("/v1/topics?cursor=", "invalid_cursor"),
        ("/v1/topics?cursor=a%20b", "invalid_cursor"),
        ("/v1/topics?cursor=a%23b", "invalid_cursor"),
        ("/v1/topics?prefix=n%25", "invalid_prefix"),
        ("/v1/topics?prefix=%7B", "invalid_prefix"),
    ] {
        let (s, v) = a.call("GET", uri, None).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{uri}: {v}");
        assert_eq!(v["error"]["code"], json!(code), "{uri}: {v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
    }
    let long = "a".repeat(201);
    let (s, v) = a
        .call("GET", &format!("/v1/topics?prefix={long}"), None)
        .await;
    assert_eq!(
        (s, v["error"]["code"].clone()),
        (StatusCode::BAD_REQUEST, json!("invalid_prefix"))
    );
}

/// Consumers woken together by one due job ask the store once between them
/// (the topic's gate, `reserve.rs`): eight long-polls wait on one topic,
/// one job falls due; one of them gets it, and from the due time until the
/// others' waits end the Redis reserve script runs at most a few times (one
/// call per wake-up; without the gate every woken waiter asks: eight).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumers_woken_together_ask_the_store_once() {
    let redis = RedisServer::start();
    let mut conn = redis.connection();
    let store: std::sync::Arc<dyn dq_core::Store> = Arc::new(sharded_redis_at(&redis.url()));
    let a = Arc::new(api_over((store, ()), Arc::new(SystemClock)));
    let (s, v) = a
        .call(
            "POST",
            "/v1/topics/herd/jobs",
            Some(json!({"id": "j", "delay_ms": 600})),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let mut waiters = futures::stream::FuturesUnordered::new();
    for _ in 0..8 {
        let a = a.clone();
        waiters.push(tokio::spawn(async move {
            a.call(
                "POST",
                "/v1/reserve",
                Some(json!({"topics": ["herd"], "wait_ms": 3000})),
            )
            .await
        }));
    }
    // Every waiter made its first look and sleeps until the due time.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let _: () = ::redis::cmd("CONFIG")
        .arg("SET")
        .arg("slowlog-log-slower-than")
        .arg(0)
        .query(&mut conn)
        .unwrap();
    let _: () = ::redis::cmd("SLOWLOG")
        .arg("RESET")
        .query(&mut conn)
        .unwrap();
    use futures::StreamExt;
    let (s, v) = waiters.next().await.unwrap().unwrap();
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        v["jobs"][0]["id"],
        json!("j"),
        "the first answer has the job"
    );
    // The others' wake-ups at the due time are over well before their waits end.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    // Each entry's arguments (an entry is id, time, duration, arguments, …).
    let calls: Vec<Vec<Vec<u8>>> = ::redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(-1)
        .query::<Vec<::redis::Value>>(&mut conn)
        .unwrap()
        .into_iter()
        .map(|e| {
            let ::redis::Value::Array(mut f) = e else {
                panic!("slowlog entry {e:?}")
            };
            ::redis::from_redis_value(f.swap_remove(3)).unwrap()
        })
        .collect();
    // A reserve call is the EVALSHA whose last argument is its token
    // prefix: 16 hex digits and a dot.
    let reserves = calls
        .iter()
        .filter(|args| {
            args.first()
                .is_some_and(|c| c.eq_ignore_ascii_case(b"evalsha"))
                && args.last().is_some_and(|p| {
                    p.len() == 17
                        && p.ends_with(b".")
                        && p[..16].iter().all(|b| b.is_ascii_hexdigit())
                })
        })
        .count();
    assert!(
        (1..=3).contains(&reserves),
        "{reserves} reserve calls for 8 waiters woken by one due job"
    );
    for w in waiters.collect::<Vec<_>>().await {
        let (s, v) = w.unwrap();
        assert_eq!((s, v["jobs"].clone()), (StatusCode::OK, json!([])));
    }
}

/// Job expiry through the API (issue #51), on the embedded store: the
/// fields are checked (both, negative, not after the due time, nothing
/// written), GET shows `expires_at_ms`, a topic's `expires_ms` and
/// `on_expiry` are kept, and a job past its expiry is not handed out but
/// dead with `last_error` `expired`, counted in `expired_unhandled` apart
/// from `expired`. On Redis (which does not keep expiry yet) an expiry is
/// refused, not silently dropped.
#[tokio::test]
async fn expiry_through_the_api() {
    let clock = ManualClock::new(1_700_000_000_000);
    let t0 = clock.now_ms();
    let a = api_over(embedded_store(), Arc::new(clock.clone()));
    let job = |extra: Value| {
        let mut j = json!({"id": "x", "body": 1});
        j.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        Some(j)
    };
    let at = |ms: u64| t0 + ms;
    a.expect_errors(&[
        (
            "POST",
            "/v1/topics/exp/jobs",
            job(json!({"expires_in_ms": 10, "expires_at_ms": at(10)})),
            400,
            "invalid_expiry",
        ),
        (
            "POST",
            "/v1/topics/exp/jobs",
            job(json!({"expires_in_ms": -1})),
            400,
            "invalid_expiry",
        ),
        (
            "POST",
            "/v1/topics/exp/jobs",
            job(json!({"expires_in_ms": 1000, "delay_ms": 1000})),
            400,
            "invalid_expiry",
        ),
        (
            "POST",
            "/v1/topics/exp/jobs",
            job(json!({"expires_at_ms": at(0)})),
            400,
            "invalid_expiry",
        ),
        (
            "POST",
            "/v1/topics/exp/jobs",
            job(json!({"expires_at_ms": at(500), "due_at_ms": at(600)})),
            400,
            "invalid_expiry",
        ),
        (
            "PUT",
            "/v1/topics/exp",
            Some(json!({"expires_ms": 3_650u64 * 86_400_000 + 1})),
            400,
            "invalid_expiry",
        ),
        (
            "PUT",
            "/v1/topics/exp",
            Some(json!({"on_expiry": "later"})),
            400,
            "invalid_json",
        ),
    ])
    .await;
    let (s, _) = a.call("GET", "/v1/topics/exp/jobs/x", None).await;
    assert_eq!(s, StatusCode::NOT_FOUND, "nothing written");

    let (s, v) = a
        .call(
            "POST",
            "/v1/topics/exp/jobs:batch",
            Some(json!({"jobs": [
                {"id": "soon", "body": 1, "expires_in_ms": 60_000},
                {"id": "bad", "body": 1, "expires_in_ms": 0},
                {"id": "late", "body": 1, "delay_ms": 120_000, "expires_at_ms": at(180_000)},
                {"id": "plain", "body": 1}
            ]})),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["results"][1]["error"]["code"], "invalid_expiry", "{v}");
    let (_, v) = a.call("GET", "/v1/topics/exp/jobs/soon", None).await;
    assert_eq!(v["expires_at_ms"], json!(at(60_000)), "{v}");
    let (_, v) = a.call("GET", "/v1/topics/exp/jobs/plain", None).await;
    assert!(v.get("expires_at_ms").is_none(), "{v}");

    let (s, v) = a
        .call(
            "PUT",
            "/v1/topics/exp",
            Some(json!({"expires_ms": 30_000, "on_expiry": "dead"})),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        (&v["config"]["expires_ms"], &v["config"]["on_expiry"]),
        (&json!(30_000), &json!("dead"))
    );
    let (_, v) = a
        .call("POST", "/v1/topics/exp/jobs", job(json!({"id": "dflt"})))
        .await;
    assert_eq!(v["created"], json!(true), "{v}");
    let (_, v) = a.call("GET", "/v1/topics/exp/jobs/dflt", None).await;
    assert_eq!(v["expires_at_ms"], json!(at(30_000)), "{v}");

    // A minute on: "soon" and "dflt" have expired, "plain" goes.
    clock.advance(60_000);
    let (_, v) = a
        .call(
            "POST",
            "/v1/reserve",
            Some(json!({"topics": ["exp"], "max": 10})),
        )
        .await;
    let got: Vec<&str> = v["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect();
    assert_eq!(got, ["plain"], "{v}");
    let (_, v) = a.call("GET", "/v1/topics/exp/jobs/soon", None).await;
    assert_eq!(
        (&v["state"], &v["last_error"]),
        (&json!("dead"), &json!("expired"))
    );
    let st = a.stats("exp").await;
    assert_eq!(st["counters"]["expired_unhandled"], json!(2), "{st}");
    assert_eq!(st["counters"]["expired"], json!(0), "{st}");
    // Three minutes on, "late" (due at 2 min) expired at 3 min.
    clock.advance(120_000);
    let (_, v) = a
        .call("POST", "/v1/reserve", Some(json!({"topics": ["exp"]})))
        .await;
    assert_eq!(v["jobs"], json!([]), "{v}");
    let (_, v) = a.call("GET", "/v1/topics/exp/dead", None).await;
    let dead: Vec<&str> = v["jobs"]
        .as_array()
        .unwrap_or_else(|| v.as_array().unwrap())
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect();
    assert_eq!(dead.len(), 3, "{v}");
    let text = a.metrics_text().await;
    let m = parse_metrics(&text);
    assert_eq!(
        m.get("dq_topic_expired_unhandled_total{topic=\"exp\"}"),
        Some(&3.0),
        "{text}"
    );
    assert_eq!(
        m.get("dq_topic_expired_total{topic=\"exp\"}"),
        Some(&0.0),
        "leases apart"
    );

    // Redis refuses what it would not keep.
    let r = redis_api();
    r.expect_errors(&[
        (
            "POST",
            "/v1/topics/exp/jobs",
            job(json!({"expires_in_ms": 1000})),
            400,
            "expiry_unsupported",
        ),
        (
            "PUT",
            "/v1/topics/exp",
            Some(json!({"on_expiry": "drop"})),
            400,
            "expiry_unsupported",
        ),
    ])
    .await;
}

/// Single enqueues into one topic that arrive together share store calls
/// (the service's combiner): each still gets the answer it would get alone
/// — 40 new ids all created, 8 of one id created once and found 7 times
/// (in order of writing: the created one is first), and a job the store
/// refuses (an expiry, on a store that keeps none) refused alone.
async fn single_enqueues_at_once_each_get_their_own_answer(fresh: FreshApi) {
    let a = fresh.api();
    let calls = (0..40)
        .map(|i| json!({"id": format!("c{i}"), "body": i, "delay_ms": 60_000}))
        .chain((0..8).map(|i| json!({"id": "same", "body": i, "delay_ms": 60_000})))
        .chain(std::iter::once(
            json!({"id": "expiring", "body": 0, "delay_ms": 60_000, "expires_in_ms": 120_000}),
        ));
    let answers = futures::future::join_all(
        calls.map(|body| a.call("POST", "/v1/topics/together/jobs", Some(body))),
    )
    .await;
    for (i, (s, v)) in answers[..40].iter().enumerate() {
        assert_eq!(*s, StatusCode::CREATED, "c{i}: {v}");
        assert_eq!(v["id"], json!(format!("c{i}")), "{v}");
    }
    let same: Vec<_> = answers[40..48]
        .iter()
        .map(|(s, v)| (*s, v["created"].clone()))
        .collect();
    assert_eq!(
        same.iter()
            .filter(|(s, c)| *s == StatusCode::CREATED && *c == json!(true))
            .count(),
        1,
        "{same:?}"
    );
    assert_eq!(
        same.iter()
            .filter(|(s, c)| *s == StatusCode::OK && *c == json!(false))
            .count(),
        7,
        "{same:?}"
    );
    let (s, v) = &answers[48];
    let expiring_kept = match (*s, v["error"]["code"].as_str()) {
        (StatusCode::CREATED, _) => 1,
        (StatusCode::BAD_REQUEST, Some("expiry_unsupported")) => 0,
        other => panic!("the expiring job: {other:?} {v}"),
    };
    assert_eq!(
        a.stats("together").await["scheduled"],
        json!(41 + expiring_kept)
    );
}

/// A job's W3C trace context: taken from the request's headers (one
/// enqueue, or the default of a batch's items) or an item's own fields,
/// handed back by reserve, GET and the export; a malformed one is dropped
/// and the job written all the same.
async fn trace_context_goes_from_the_enqueue_to_the_consumer(fresh: FreshApi) {
    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const OWN: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";
    let a = fresh.api();
    let send = |uri: &str, headers: &[(&str, &str)], body: Value| {
        let mut b = Request::builder()
            .method("POST")
            .uri(uri)
            .header(header::CONTENT_TYPE, "application/json");
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(Body::from(body.to_string())).unwrap()
    };
    let (s, v) = a
        .raw(send(
            "/v1/topics/traced/jobs",
            &[
                ("traceparent", TP),
                ("tracestate", "rojo=1"),
                ("tracestate", "congo=2"),
            ],
            json!({"id": "one"}),
        ))
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let (s, v) = a
        .raw(send(
            "/v1/topics/traced/jobs:batch",
            &[("traceparent", TP)],
            json!({"jobs": [
                {"id": "default"},
                {"id": "own", "traceparent": OWN, "tracestate": "x=y"},
                {"id": "bad", "traceparent": "00-nonsense"},
                {"id": "bad-state", "traceparent": OWN, "tracestate": "Not Valid"}
            ]}),
        ))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert!(
        v["results"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["created"] == json!(true)),
        "a malformed trace context refuses nothing: {v}"
    );
    let (s, v) = a
        .raw(send(
            "/v1/topics/traced/jobs",
            &[("traceparent", "garbage")],
            json!({"id": "garbage"}),
        ))
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let (_, v) = a
        .call(
            "POST",
            "/v1/reserve",
            Some(json!({"topics": ["traced"], "max": 10})),
        )
        .await;
    let got: Vec<(String, Value, Value)> = v["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| {
            (
                j["id"].as_str().unwrap().to_string(),
                j["traceparent"].clone(),
                j["tracestate"].clone(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("one".to_string(), json!(TP), json!("rojo=1,congo=2")),
            ("default".to_string(), json!(TP), Value::Null),
            ("own".to_string(), json!(OWN), json!("x=y")),
            ("bad".to_string(), Value::Null, Value::Null),
            ("bad-state".to_string(), json!(OWN), Value::Null),
            ("garbage".to_string(), Value::Null, Value::Null),
        ]
    );
    let (s, v) = a.call("GET", "/v1/topics/traced/jobs/own", None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        (v["traceparent"].clone(), v["tracestate"].clone()),
        (json!(OWN), json!("x=y"))
    );
    let (_, v) = a.call("GET", "/v1/topics/traced/jobs/garbage", None).await;
    assert!(v.get("traceparent").is_none(), "none is left out: {v}");
    // The export carries it, and an import into another topic keeps it.
    let (_, page) = a.call("GET", "/v1/topics/traced/jobs?limit=10", None).await;
    let own = page["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["id"] == "own")
        .unwrap()
        .clone();
    assert_eq!(own["traceparent"], json!(OWN));
    let mut moved = own.clone();
    moved["state"] = json!("ready");
    moved.as_object_mut().unwrap().remove("lease_deadline_ms");
    let (s, v) = a
        .call(
            "POST",
            "/v1/topics/traced-copy/jobs:import",
            Some(json!({"jobs": [moved]})),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (_, v) = a.call("GET", "/v1/topics/traced-copy/jobs/own", None).await;
    assert_eq!(
        (v["traceparent"].clone(), v["tracestate"].clone()),
        (json!(OWN), json!("x=y"))
    );
}
