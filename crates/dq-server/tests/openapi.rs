//! The OpenAPI document against the wire types of `dq-api`, field by field:
//! each request and response body of each route is a sample of its type with
//! every field filled in, and the schema the document gives there must name
//! exactly those fields (nested objects and array items too). A field added
//! to a type and not to the document fails here — the samples are struct
//! literals, so a new field does not compile until it is given a value.

use dq_api::*;
use dq_core::{
    AttemptError, Delivery, JobState, OnExpiry, PushConfig, PushMethod, RateLimit, RetryPolicy,
    TopicConfig, TopicConfigPatch, TopicCounters, TopicStats,
};
use serde_json::{Value, json};

const DOC: &str = include_str!("../src/openapi.json");

fn raw(v: Value) -> RawJson {
    RawJson::from_value(&v).unwrap()
}

fn error() -> ErrorBody {
    ErrorBody {
        error: ErrorDetail {
            code: "invalid_id".into(),
            message: "m".into(),
        },
    }
}

fn key_info() -> KeyInfo {
    KeyInfo {
        name: "w".into(),
        scopes: vec!["read:*".into()],
        created_ms: 1,
        last_used_ms: Some(2),
        rate_limit: Some(dq_core::RateLimit {
            limit: 5,
            per_ms: 1000,
            burst: 5,
        }),
    }
}

fn key_created() -> KeyCreated {
    KeyCreated {
        name: "w".into(),
        scopes: vec!["read:*".into()],
        created_ms: 1,
        secret: format!("dqk_{}", "0".repeat(64)),
        rate_limit: Some(dq_core::RateLimit {
            limit: 5,
            per_ms: 1000,
            burst: 5,
        }),
    }
}

fn enqueue_request() -> EnqueueRequest {
    EnqueueRequest {
        id: Some("a".into()),
        body: Some(raw(json!({"x": 1}))),
        body_base64: Some("AA==".into()),
        delay_ms: Some(1),
        due_at_ms: Some(1),
        priority: Some(1),
        max_attempts: Some(1),
        lease_ms: Some(1000),
        retry: Some(RetryPolicy::FixedMs(1)),
        replace: true,
        dedup_ms: Some(1),
        key: Some("customer-17".into()),
        expires_in_ms: Some(1),
        expires_at_ms: Some(1),
        traceparent: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()),
        tracestate: Some("rojo=1".into()),
    }
}

fn enqueued() -> Enqueued {
    Enqueued {
        id: "a".into(),
        created: true,
        replaced: false,
        deduplicated: true,
        due_at_ms: Some(1),
        state: Some(JobState::Scheduled),
    }
}

fn job() -> Job {
    Job {
        topic: "t".into(),
        id: "a".into(),
        state: JobState::Dead,
        due_at_ms: 1,
        priority: 1,
        attempts: 1,
        max_attempts: 1,
        lease_ms: 1,
        last_error: Some("e".into()),
        errors: vec![AttemptError {
            attempt: 1,
            at_ms: 1,
            error: "e".into(),
        }],
        created_at_ms: 1,
        lease_deadline_ms: Some(1),
        died_at_ms: Some(1),
        key: Some("customer-17".into()),
        expires_at_ms: Some(1),
        traceparent: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()),
        tracestate: Some("rojo=1".into()),
        body: Some(raw(json!(1))),
        body_base64: Some("AA==".into()),
    }
}

fn job_record() -> JobRecord {
    JobRecord {
        id: "a".into(),
        state: JobState::Dead,
        due_at_ms: 1,
        priority: 1,
        attempts: 1,
        max_attempts: Some(1),
        lease_ms: Some(1000),
        retry: Some(RetryPolicy::FixedMs(1)),
        dedup_ms: Some(1),
        last_error: Some("e".into()),
        errors: vec![AttemptError {
            attempt: 1,
            at_ms: 1,
            error: "e".into(),
        }],
        created_at_ms: Some(1),
        lease_deadline_ms: Some(1),
        died_at_ms: Some(1),
        key: Some("customer-17".into()),
        traceparent: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()),
        tracestate: Some("rojo=1".into()),
        body: Some(raw(json!(1))),
        body_base64: Some("AA==".into()),
    }
}

fn stats() -> TopicStats {
    TopicStats {
        scheduled: 1,
        ready: 1,
        reserved: 1,
        dead: 1,
        oldest_overdue_ms: 1,
        counters: TopicCounters {
            enqueued: 1,
            acked: 1,
            failed: 1,
            expired: 1,
            dead: 1,
            cancelled: 1,
            dead_dropped: 1,
            replayed: 1,
            rate_limited: 1,
            expired_unhandled: 1,
        },
        partial: true,
        missing: vec!["shard 0 redis://a".into()],
        paused_until_ms: 1,
    }
}

fn push() -> Delivery {
    Delivery::Push(PushConfig {
        url: "https://example.com/h".into(),
        method: PushMethod::Post,
        timeout_ms: 1000,
        headers: [("X-A".to_string(), "…".to_string())].into(),
        concurrency: 1,
        secrets: vec!["whsec_…".into()],
    })
}

fn config() -> TopicConfig {
    TopicConfig {
        max_attempts: 1,
        lease_ms: 1000,
        dead_cap: 1,
        default_delay_ms: 1,
        retry: RetryPolicy::FixedMs(1),
        delivery: push(),
        partitions: 1,
        dedup_ms: 1,
        paused: true,
        rate_limit: Some(rate_limit()),
        key_concurrency: Some(1),
        key_rate_limit: Some(rate_limit()),
        expires_ms: 1,
        on_expiry: OnExpiry::Drop,
    }
}

fn rate_limit() -> RateLimit {
    RateLimit {
        limit: 1,
        per_ms: 1,
        burst: 1,
    }
}

fn patch() -> TopicConfigPatch {
    TopicConfigPatch {
        max_attempts: Some(1),
        lease_ms: Some(1000),
        dead_cap: Some(1),
        default_delay_ms: Some(1),
        retry: Some(RetryPolicy::FixedMs(1)),
        delivery: Some(push()),
        partitions: Some(1),
        dedup_ms: Some(1),
        paused: Some(true),
        rate_limit: Some(Some(rate_limit())),
        key_concurrency: Some(Some(1)),
        key_rate_limit: Some(Some(rate_limit())),
        expires_ms: Some(1),
        on_expiry: Some(OnExpiry::Drop),
    }
}

fn leased() -> Leased {
    Leased {
        topic: "t".into(),
        id: "a".into(),
        token: "k".into(),
        attempt: 1,
        due_at_ms: 1,
        lease_deadline_ms: 1,
        priority: 1,
        traceparent: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()),
        tracestate: Some("rojo=1".into()),
        body: Some(raw(json!(1))),
        body_base64: Some("AA==".into()),
    }
}

fn schedule_spec() -> ScheduleSpec {
    ScheduleSpec {
        topic: "t".into(),
        cron: Some("0 9 * * *".into()),
        every: Some("1m".into()),
        timezone: Some("Europe/Berlin".into()),
        body: Some(raw(json!({"x": 1}))),
        priority: Some(1),
        catch_up: Some(CatchUp::All),
        paused: true,
        start_at: Some("2026-12-01T00:00:00Z".into()),
        end_at: Some("2026-12-02T00:00:00+01:00".into()),
    }
}

fn schedule_info() -> ScheduleInfo {
    let slot = || Slot {
        at: "2026-12-01T09:00:00+01:00".into(),
        at_ms: 1,
    };
    ScheduleInfo {
        name: "n".into(),
        spec: schedule_spec(),
        rule: "At 09:00".into(),
        last: Some(slot()),
        last_job: Some(LastJob {
            id: "n@1".into(),
            state: Some(JobState::Ready),
        }),
        next: vec![slot()],
    }
}

fn to<T: serde::Serialize>(v: T) -> Value {
    serde_json::to_value(v).unwrap()
}

/// `(method, path, request sample, [(status, response sample)])`.
type Route = (
    &'static str,
    &'static str,
    Option<Value>,
    Vec<(&'static str, Value)>,
);

/// A [`Route`] for every route of `/v1` and the health routes.
fn routes() -> Vec<Route> {
    let e = || ("400", to(error()));
    vec![
        (
            "get",
            "/v1/schedules",
            None,
            vec![(
                "200",
                to(ScheduleList {
                    schedules: vec![schedule_info()],
                }),
            )],
        ),
        (
            "post",
            "/v1/keys",
            Some(to(CreateKeyRequest {
                name: "w".into(),
                scopes: vec!["read:*".into()],
                rate_limit: Some(dq_core::RateLimit {
                    limit: 5,
                    per_ms: 1000,
                    burst: 5,
                }),
            })),
            vec![("201", to(key_created())), e()],
        ),
        (
            "get",
            "/v1/keys",
            None,
            vec![(
                "200",
                to(KeyList {
                    keys: vec![key_info()],
                }),
            )],
        ),
        (
            "get",
            "/v1/keys/{name}",
            None,
            vec![("200", to(key_info())), ("404", to(error()))],
        ),
        (
            "delete",
            "/v1/keys/{name}",
            None,
            vec![(
                "200",
                to(KeyRevoked {
                    name: "w".into(),
                    revoked: true,
                }),
            )],
        ),
        (
            "post",
            "/v1/keys/{name}/rotate",
            None,
            vec![("200", to(key_created())), ("401", to(error()))],
        ),
        (
            "put",
            "/v1/schedules/{name}",
            Some(to(schedule_spec())),
            vec![
                ("201", to(schedule_info())),
                ("200", to(schedule_info())),
                e(),
            ],
        ),
        (
            "get",
            "/v1/schedules/{name}",
            None,
            vec![("200", to(schedule_info())), ("404", to(error()))],
        ),
        (
            "delete",
            "/v1/schedules/{name}",
            None,
            vec![(
                "200",
                to(ScheduleDeleted {
                    name: "n".into(),
                    deleted: true,
                }),
            )],
        ),
        (
            "post",
            "/v1/schedules/{name}/pause",
            None,
            vec![("200", to(schedule_info()))],
        ),
        (
            "post",
            "/v1/schedules/{name}/resume",
            None,
            vec![("200", to(schedule_info()))],
        ),
        (
            "post",
            "/v1/topics/{topic}/jobs",
            Some(to(enqueue_request())),
            vec![("201", to(enqueued())), ("200", to(enqueued())), e()],
        ),
        (
            "post",
            "/v1/topics/{topic}/jobs:batch",
            Some(to(BatchRequest {
                jobs: vec![enqueue_request()],
            })),
            vec![
                (
                    "200",
                    to(BatchResponse {
                        results: vec![
                            BatchResult::Enqueued(enqueued()),
                            BatchResult::Error(error()),
                        ],
                    }),
                ),
                e(),
            ],
        ),
        (
            "get",
            "/v1/topics/{topic}/jobs",
            None,
            vec![
                (
                    "200",
                    to(JobPage {
                        jobs: vec![job_record()],
                        cursor: Some("c".into()),
                    }),
                ),
                e(),
                ("404", to(error())),
            ],
        ),
        (
            "post",
            "/v1/topics/{topic}/jobs:import",
            Some(to(ImportRequest {
                jobs: vec![job_record()],
            })),
            vec![
                (
                    "200",
                    to(ImportResponse {
                        results: vec![ImportResult {
                            id: "a".into(),
                            created: true,
                            deduplicated: true,
                            state: Some(JobState::Ready),
                        }],
                    }),
                ),
                e(),
            ],
        ),
        (
            "get",
            "/v1/topics/{topic}/jobs/{id}",
            None,
            vec![("200", to(job())), ("404", to(error()))],
        ),
        (
            "delete",
            "/v1/topics/{topic}/jobs/{id}",
            None,
            vec![(
                "200",
                to(Cancelled {
                    id: "a".into(),
                    cancelled: true,
                    state: JobState::Ready,
                }),
            )],
        ),
        (
            "patch",
            "/v1/topics/{topic}/jobs/{id}",
            Some(to(RescheduleRequest {
                delay_ms: Some(1),
                due_at_ms: Some(1),
            })),
            vec![(
                "200",
                to(Rescheduled {
                    id: "a".into(),
                    due_at_ms: 1,
                }),
            )],
        ),
        (
            "post",
            "/v1/topics/{topic}/jobs/{id}/ack",
            Some(to(AckRequest { token: "k".into() })),
            vec![(
                "200",
                to(Acked {
                    id: "a".into(),
                    acked: true,
                }),
            )],
        ),
        (
            "post",
            "/v1/topics/{topic}/jobs/{id}/nack",
            Some(to(NackRequest {
                token: "k".into(),
                error: Some("e".into()),
                retry_in_ms: Some(1),
                dead: true,
            })),
            vec![(
                "200",
                to(Nacked {
                    id: "a".into(),
                    state: JobState::Scheduled,
                    due_at_ms: Some(1),
                }),
            )],
        ),
        (
            "post",
            "/v1/topics/{topic}/jobs/{id}/release",
            Some(to(ReleaseRequest {
                token: "k".into(),
                delay_ms: Some(1),
            })),
            vec![(
                "200",
                to(Released {
                    id: "a".into(),
                    state: JobState::Ready,
                    due_at_ms: 1,
                }),
            )],
        ),
        (
            "post",
            "/v1/topics/{topic}/jobs/{id}/touch",
            Some(to(TouchRequest {
                token: "k".into(),
                lease_ms: Some(1000),
            })),
            vec![(
                "200",
                to(Touched {
                    id: "a".into(),
                    lease_deadline_ms: 1,
                }),
            )],
        ),
        (
            "post",
            "/v1/reserve",
            Some(to(ReserveRequest {
                topics: vec!["t".into()],
                max: Some(1),
                lease_ms: Some(1000),
                wait_ms: Some(1),
            })),
            vec![(
                "200",
                to(Reserved {
                    jobs: vec![leased()],
                    unknown_topics: vec!["typo".into()],
                }),
            )],
        ),
        (
            "post",
            "/v1/ack:batch",
            Some(to(AckBatchRequest {
                acks: vec![AckItem {
                    topic: "t".into(),
                    id: "a".into(),
                    token: "k".into(),
                }],
            })),
            vec![(
                "200",
                to(AckBatchResponse {
                    results: vec![AckResult::Acked { acked: true }, AckResult::Error(error())],
                }),
            )],
        ),
        (
            "post",
            "/v1/nack:batch",
            Some(to(NackBatchRequest {
                nacks: vec![NackItem {
                    topic: "t".into(),
                    id: "a".into(),
                    token: "k".into(),
                    error: Some("e".into()),
                    retry_in_ms: Some(1),
                    dead: true,
                    priority: Some(1),
                }],
            })),
            vec![(
                "200",
                to(NackBatchResponse {
                    results: vec![
                        NackResult::Nacked {
                            state: JobState::Scheduled,
                            due_at_ms: Some(1),
                        },
                        NackResult::Error(error()),
                    ],
                }),
            )],
        ),
        (
            "post",
            "/v1/touch:batch",
            Some(to(TouchBatchRequest {
                touches: vec![TouchItem {
                    topic: "t".into(),
                    id: "a".into(),
                    token: "k".into(),
                    lease_ms: Some(1000),
                }],
            })),
            vec![(
                "200",
                to(TouchBatchResponse {
                    results: vec![
                        TouchResult::Touched {
                            lease_deadline_ms: 1,
                        },
                        TouchResult::Error(error()),
                    ],
                }),
            )],
        ),
        (
            "get",
            "/v1/topics",
            None,
            vec![(
                "200",
                to(TopicList {
                    topics: vec![TopicInfo {
                        name: "t".into(),
                        stats: stats(),
                        config: None,
                        config_sources: None,
                    }],
                    next_cursor: Some("t".into()),
                }),
            )],
        ),
        (
            "get",
            "/v1/topics/{topic}",
            None,
            vec![(
                "200",
                to(TopicInfo {
                    name: "t".into(),
                    stats: stats(),
                    config_sources: Some(dq_api::config_sources(&config())),
                    config: Some(config()),
                }),
            )],
        ),
        (
            "put",
            "/v1/topics/{topic}",
            Some(to(patch())),
            vec![(
                "200",
                to(TopicConfigured {
                    name: "t".into(),
                    config_sources: dq_api::config_sources(&config()),
                    config: config(),
                }),
            )],
        ),
        (
            "delete",
            "/v1/topics/{topic}",
            None,
            vec![(
                "200",
                to(TopicDeleted {
                    name: "t".into(),
                    deleted_jobs: 1,
                }),
            )],
        ),
        (
            "get",
            "/v1/topics/{topic}/dead",
            None,
            vec![("200", to(DeadList { jobs: vec![job()] }))],
        ),
        (
            "delete",
            "/v1/topics/{topic}/dead",
            None,
            vec![("200", to(Purged { purged: 1 }))],
        ),
        (
            "post",
            "/v1/topics/{topic}/dead/replay",
            Some(to(ReplayRequest {
                ids: Some(vec!["a".into()]),
            })),
            vec![("200", to(Replayed { replayed: 1 }))],
        ),
        (
            "post",
            "/v1/admin/backup",
            Some(to(BackupRequest {
                path: "/var/backups/dq/1.db".into(),
            })),
            vec![
                (
                    "200",
                    to(BackupDone {
                        path: "/var/backups/dq/1.db".into(),
                        bytes: 1,
                        pages: 1,
                        schema_version: 2,
                        took_ms: 1,
                    }),
                ),
                e(),
                ("409", to(error())),
                ("500", to(error())),
            ],
        ),
        (
            "post",
            "/v1/admin/drain",
            Some(to(DrainRequest { wait_ms: Some(1) })),
            vec![
                (
                    "200",
                    to(DrainStatus {
                        draining: true,
                        in_flight: 1,
                        drained: false,
                    }),
                ),
                e(),
            ],
        ),
        (
            "get",
            "/healthz",
            None,
            vec![(
                "200",
                to(Health {
                    status: "ok".into(),
                    stores: vec![],
                    clock_offset_ms: None,
                }),
            )],
        ),
        (
            "get",
            "/readyz",
            None,
            vec![
                (
                    "200",
                    to(Health {
                        status: "ready".into(),
                        stores: vec![StoreHealth {
                            name: "s".into(),
                            up: false,
                            error: Some("e".into()),
                        }],
                        clock_offset_ms: Some(-3),
                    }),
                ),
                (
                    "503",
                    to(NotReady {
                        status: "unavailable".into(),
                        stores: vec![StoreHealth {
                            name: "s".into(),
                            up: false,
                            error: Some("e".into()),
                        }],
                        clock_offset_ms: Some(3),
                        error: error().error,
                    }),
                ),
            ],
        ),
    ]
}

fn resolve<'a>(doc: &'a Value, mut schema: &'a Value) -> &'a Value {
    while let Some(r) = schema.get("$ref").and_then(Value::as_str) {
        let mut at = doc;
        for part in r.trim_start_matches("#/").split('/') {
            at = &at[part];
        }
        schema = at;
    }
    schema
}

/// Whether `sample` has exactly the fields `schema` names, all the way down.
fn matches(doc: &Value, schema: &Value, sample: &Value, at: &str) -> Result<(), String> {
    let schema = resolve(doc, schema);
    if let Some(branches) = schema.get("oneOf").or_else(|| schema.get("anyOf")) {
        let tried: Vec<String> = branches
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|b| matches(doc, b, sample, at).err())
            .collect();
        return if tried.len() < branches.as_array().unwrap().len() {
            Ok(())
        } else {
            Err(format!("{at}: no branch fits: {}", tried.join(" | ")))
        };
    }
    match sample {
        Value::Object(fields) => {
            let Some(props) = schema.get("properties").and_then(Value::as_object) else {
                // A map of free keys (headers) and any value (a body) are
                // fine; an object whose fields the document does not give is not.
                let map = schema
                    .get("additionalProperties")
                    .is_some_and(Value::is_object);
                let typed_object = schema.get("type") == Some(&json!("object"));
                return if typed_object && !map {
                    Err(format!(
                        "{at}: the document gives no fields for {:?}",
                        fields.keys().collect::<Vec<_>>()
                    ))
                } else {
                    Ok(())
                };
            };
            let want: Vec<&String> = fields.keys().collect();
            let have: Vec<&String> = props.keys().collect();
            let mut missing: Vec<&&String> =
                want.iter().filter(|k| !props.contains_key(**k)).collect();
            let mut extra: Vec<&&String> =
                have.iter().filter(|k| !fields.contains_key(**k)).collect();
            missing.sort();
            extra.sort();
            if !missing.is_empty() || !extra.is_empty() {
                return Err(format!(
                    "{at}: fields in the type but not the document {missing:?}; in the document but not the type {extra:?}"
                ));
            }
            for (k, v) in fields {
                matches(doc, &props[k], v, &format!("{at}.{k}"))?;
            }
            Ok(())
        }
        Value::Array(items) => {
            if let Some(item) = schema.get("items") {
                for (i, v) in items.iter().enumerate() {
                    matches(doc, item, v, &format!("{at}[{i}]"))?;
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

#[test]
fn the_document_names_exactly_the_fields_of_the_wire_types() {
    let doc: Value = serde_json::from_str(DOC).unwrap();
    let mut failures = Vec::new();
    for (method, path, request, responses) in routes() {
        let op = &doc["paths"][path][method];
        assert!(op.is_object(), "{method} {path} is not in the document");
        if let Some(req) = request {
            let schema = &op["requestBody"]["content"]["application/json"]["schema"];
            if let Err(e) = matches(&doc, schema, &req, &format!("{method} {path} request")) {
                failures.push(e);
            }
        }
        for (status, res) in responses {
            let mut r = &op["responses"][status];
            r = resolve(&doc, r);
            let schema = &r["content"]["application/json"]["schema"];
            if schema.is_null() {
                failures.push(format!("{method} {path} {status}: no JSON schema"));
                continue;
            }
            if let Err(e) = matches(&doc, schema, &res, &format!("{method} {path} {status}")) {
                failures.push(e);
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_check_fails_on_a_field_the_document_lacks() {
    let doc: Value = serde_json::from_str(DOC).unwrap();
    let schema = json!({"$ref": "#/components/schemas/Enqueued"});
    let mut sample = to(enqueued());
    assert!(matches(&doc, &schema, &sample, "x").is_ok());
    sample["shiny_new_field"] = json!(1);
    let e = matches(&doc, &schema, &sample, "x").unwrap_err();
    assert!(e.contains("shiny_new_field"), "{e}");
}

/// Every delivery mode, each field filled in, fits the document's
/// `Delivery` schema (the match is exhaustive: a new mode does not compile
/// until it has a sample here).
#[test]
fn every_delivery_mode_is_in_the_document() {
    use dq_core::forward::{ListPayload, ListSide, ListTarget, StreamFields, StreamTarget};
    let doc: Value = serde_json::from_str(DOC).unwrap();
    let schema = &doc["components"]["schemas"]["Delivery"];
    let samples = [
        Delivery::Pull {},
        push(),
        Delivery::RedisStream(StreamTarget {
            url: "redis://u:…@h:6379/0".into(),
            stream: "s".into(),
            maxlen: Some(10),
            fields: StreamFields::Json,
        }),
        Delivery::RedisList(ListTarget {
            url: "redis://h".into(),
            list: "l".into(),
            side: ListSide::Right,
            payload: ListPayload::Envelope,
        }),
    ];
    for d in samples {
        match &d {
            Delivery::Pull {}
            | Delivery::Push(_)
            | Delivery::RedisStream(_)
            | Delivery::RedisList(_) => {}
        }
        let v = serde_json::to_value(&d).unwrap();
        matches(&doc, schema, &v, d.mode()).unwrap();
    }
}
