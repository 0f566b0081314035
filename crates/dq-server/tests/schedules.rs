//! Schedules through the router and the scheduler's pass, on both stores,
//! with a manual clock: exact slot times for cron and intervals, DST in
//! Europe/Berlin and America/New_York, catch-up modes, pause/resume,
//! end_at, two instances on one store, and every refusal writing nothing.
//! (Through the real binary: dq-cli's `tests/schedules.rs`.)

mod support;

use std::sync::Arc;

use axum::http::StatusCode;
use dq_core::{Clock, ManualClock, Store, Topic};
use dq_server::schedule::LEAD_MS;
use dq_server::scheduler::pass;
use dq_server::{AppState, app};
use dq_testkit::http::Api;
use serde_json::{Value, json};
use support::*;

type Fresh = fn() -> (Arc<dyn Store>, Box<dyn std::any::Any + Send + Sync>);

fn embedded() -> (Arc<dyn Store>, Box<dyn std::any::Any + Send + Sync>) {
    let (s, g) = embedded_store();
    (s, Box::new(g))
}

fn redis() -> (Arc<dyn Store>, Box<dyn std::any::Any + Send + Sync>) {
    let (s, g) = sharded_redis_store();
    (s, Box::new(g))
}

fn postgres() -> (Arc<dyn Store>, Box<dyn std::any::Any + Send + Sync>) {
    let (s, g) = postgres_store();
    (s, Box::new(g))
}

dq_testkit::router_tests! {
    embedded: embedded as Fresh,
    sharded_redis: redis as Fresh,
    postgres: postgres as Fresh,
    tests: [
        put_get_list_delete_and_refusals,
        interval_and_cron_slots_fire_exactly_never_early,
        catch_up_after_downtime,
        pause_resume_end_at,
        two_instances_give_one_job_per_slot,
        dst_transitions_fire_each_day_once,
    ],
}

struct World {
    api: Api,
    state: AppState,
    store: Arc<dyn Store>,
    clock: ManualClock,
}

fn world(fresh: Fresh, now: u64) -> World {
    let (store, guard) = fresh();
    let clock = ManualClock::new(now);
    let state = AppState::new(store.clone(), Arc::new(clock.clone()), limits());
    let api = Api::new(app(state.clone(), MAX_REQUEST_BYTES), guard);
    World {
        api,
        state,
        store,
        clock,
    }
}

/// Unix ms of an RFC 3339 time.
fn ms(t: &str) -> u64 {
    chrono::DateTime::parse_from_rfc3339(t)
        .unwrap()
        .timestamp_millis() as u64
}

impl World {
    async fn put(&self, name: &str, spec: Value) -> (StatusCode, Value) {
        self.api
            .call("PUT", &format!("/v1/schedules/{name}"), Some(spec))
            .await
    }

    /// A pass at the clock's time; returns the jobs it created.
    async fn pass(&self) -> u64 {
        pass(&self.state.service, self.clock.now_ms())
            .await
            .unwrap()
            .created
    }

    /// Moves the clock to `t` and runs a pass.
    async fn pass_at(&self, t: u64) -> u64 {
        self.clock.set(t);
        self.pass().await
    }

    /// Every job of `topic` as (id, due ms), by due time: all of them
    /// reserved at a moment after every due time, then cancelled.
    async fn jobs(&self, topic: &str) -> Vec<(String, u64)> {
        let t = Topic::new(topic).unwrap();
        let mut out = Vec::new();
        loop {
            let r = self
                .store
                .reserve(&t, 1000, None, 4_000_000_000_000)
                .await
                .unwrap();
            if r.leases.is_empty() {
                break;
            }
            for l in r.leases {
                out.push((l.id.to_string(), l.due_at_ms));
                self.store.cancel(&t, &l.id, 0).await.unwrap();
            }
        }
        out.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
        out
    }
}

fn slot_ids(name: &str, slots: &[u64]) -> Vec<(String, u64)> {
    slots.iter().map(|s| (format!("{name}@{s}"), *s)).collect()
}

async fn put_get_list_delete_and_refusals(fresh: Fresh) {
    let w = world(fresh, ms("2026-12-04T09:00:00Z"));
    let spec = json!({"topic": "reports", "cron": "0 9 * * MON-FRI", "timezone": "Europe/Berlin",
                      "body": {"report": "daily"}, "priority": 5});
    let (s, v) = w.put("daily-report", spec.clone()).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    assert_eq!(v["name"], "daily-report");
    assert_eq!(v["spec"]["catch_up"], "one", "the default, shown");
    assert_eq!(
        v["rule"],
        "At 09:00, on Monday, Tuesday, Wednesday, Thursday, and Friday (Europe/Berlin)"
    );
    let next: Vec<&str> = v["next"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["at"].as_str().unwrap())
        .collect();
    assert_eq!(
        next,
        [
            "2026-12-07T09:00:00+01:00",
            "2026-12-08T09:00:00+01:00",
            "2026-12-09T09:00:00+01:00",
            "2026-12-10T09:00:00+01:00",
            "2026-12-11T09:00:00+01:00"
        ]
    );
    assert_eq!(v["next"][0]["at_ms"], ms("2026-12-07T08:00:00Z"));
    let (s, _) = w.put("daily-report", spec).await;
    assert_eq!(s, StatusCode::OK, "replaced");
    let (s, one) = w.api.call("GET", "/v1/schedules/daily-report", None).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(one["spec"]["body"], json!({"report": "daily"}));
    assert_eq!(one["spec"]["priority"], 5);

    // Refusals: a precise code each, nothing written.
    let base = json!({"topic": "t", "every": "1m"});
    let with = |k: &str, v: Value| {
        let mut s = base.clone();
        s[k] = v;
        s
    };
    let cases = [
        ("bad", with("cron", json!("0 9 * * *")), "invalid_schedule"),
        ("bad", json!({"topic": "t"}), "invalid_schedule"),
        (
            "bad",
            json!({"topic": "t", "cron": "0 25 * * *"}),
            "invalid_cron",
        ),
        (
            "bad",
            json!({"topic": "t", "cron": "0 9 * *"}),
            "invalid_cron",
        ),
        ("bad", with("every", json!("500ms")), "invalid_every"),
        ("bad", with("every", json!("often")), "invalid_every"),
        (
            "bad",
            json!({"topic": "t", "cron": "0 0 30 2 *"}),
            "invalid_cron",
        ),
        (
            "bad",
            with("timezone", json!("Europe/Atlantis")),
            "invalid_timezone",
        ),
        (
            "bad",
            with("start_at", json!("yesterday")),
            "invalid_start_at",
        ),
        (
            "bad",
            with("end_at", json!("2026-12-01 00:00")),
            "invalid_end_at",
        ),
        ("bad", with("topic", json!("no spaces")), "invalid_topic"),
        ("bad", with("catch_up", json!("some")), "invalid_json"),
        ("bad", with("colour", json!("red")), "invalid_json"),
        (
            "bad",
            with("body", json!("x".repeat(2000))),
            "body_too_large",
        ),
        ("a%20b", base.clone(), "invalid_schedule_name"),
        (&"n".repeat(201), base.clone(), "invalid_schedule_name"),
    ];
    for (name, spec, code) in cases {
        let (s, v) = w.put(name, spec.clone()).await;
        let status = if code == "body_too_large" {
            StatusCode::PAYLOAD_TOO_LARGE
        } else {
            StatusCode::BAD_REQUEST
        };
        assert_eq!(s, status, "{spec}: {v}");
        assert_eq!(v["error"]["code"], code, "{spec}: {v}");
    }
    let (_, v) = w
        .put("bad", json!({"topic": "t", "cron": "0 25 * * *"}))
        .await;
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("field 2 (hour)"),
        "{v}"
    );
    let (_, list) = w.api.call("GET", "/v1/schedules", None).await;
    let names: Vec<&str> = list["schedules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["daily-report"], "nothing written by the refusals");

    // Ends before it starts: taken (the document cannot compare two
    // fields), without a slot.
    let ended = json!({"topic": "t", "every": "1m", "start_at": "2026-12-02T00:00:00Z", "end_at": "2026-12-01T00:00:00+01:00"});
    let (s, v) = w.put("ended", ended.clone()).await;
    assert_eq!(s, StatusCode::CREATED, "{ended}: {v}");
    assert_eq!(v["next"], json!([]), "{v}");

    let (s, v) = w
        .api
        .call("DELETE", "/v1/schedules/daily-report", None)
        .await;
    assert_eq!(
        (s, v),
        (
            StatusCode::OK,
            json!({"name": "daily-report", "deleted": true})
        )
    );
    for (method, path) in [
        ("GET", "/v1/schedules/daily-report"),
        ("DELETE", "/v1/schedules/daily-report"),
        ("POST", "/v1/schedules/daily-report/pause"),
    ] {
        let (s, v) = w.api.call(method, path, None).await;
        assert_eq!(s, StatusCode::NOT_FOUND, "{method} {path}");
        assert_eq!(v["error"]["code"], "schedule_not_found");
    }
}

async fn interval_and_cron_slots_fire_exactly_never_early(fresh: Fresh) {
    let t0 = ms("2026-12-01T08:59:50Z");
    let w = world(fresh, t0);
    w.put(
        "tick",
        json!({"topic": "ticks", "every": "5s", "body": {"k": 1}}),
    )
    .await;
    w.put("nine", json!({"topic": "ticks", "cron": "0 9 * * *"}))
        .await;
    // Slots within the lead (2 s) are enqueued, due at the slot.
    assert_eq!(
        w.pass().await,
        0,
        "08:59:50: the next slot, :55, is 5 s away"
    );
    assert_eq!(
        w.pass_at(t0 + 5_000 - LEAD_MS - 1).await,
        0,
        "a ms too early"
    );
    assert_eq!(w.pass_at(t0 + 5_000 - LEAD_MS).await, 1, ":55 is enqueued");
    assert_eq!(w.pass_at(t0 + 5_000 - LEAD_MS + 400).await, 0, "once");
    let t = Topic::new("ticks").unwrap();
    let early = w.store.reserve(&t, 10, None, t0 + 4_999).await.unwrap();
    assert!(early.leases.is_empty(), "never early: {early:?}");
    let got = w.store.reserve(&t, 10, None, t0 + 5_000).await.unwrap();
    assert_eq!(got.leases.len(), 1);
    assert_eq!(got.leases[0].id.as_str(), format!("tick@{}", t0 + 5_000));
    assert_eq!(got.leases[0].body, dq_core::Body::Json("{\"k\":1}".into()));
    // Acked: the same slot never comes back, whatever passes follow.
    w.store
        .ack(&t, &got.leases[0].id, &got.leases[0].token, t0 + 5_001)
        .await
        .unwrap();
    for dt in [5_001, 6_000, 8_000] {
        w.pass_at(t0 + dt).await;
    }
    // 09:00:00 is both schedules' slot: two jobs, two ids.
    assert_eq!(
        w.jobs("ticks").await,
        [
            slot_ids("nine", &[t0 + 10_000]),
            slot_ids("tick", &[t0 + 10_000])
        ]
        .concat()
    );
    let (_, v) = w.api.call("GET", "/v1/schedules/tick", None).await;
    assert_eq!(v["last"]["at_ms"], t0 + 5_000, "{v}");
    assert_eq!(
        v["last_job"],
        json!({"id": format!("tick@{}", t0 + 5_000)}),
        "acked: gone"
    );
    assert_eq!(v["next"][0]["at_ms"], t0 + 10_000);
}

async fn catch_up_after_downtime(fresh: Fresh) {
    let t0 = ms("2026-12-01T10:00:00.300Z");
    let w = world(fresh, t0);
    for mode in ["skip", "one", "all"] {
        w.put(
            mode,
            json!({"topic": mode, "every": "1s", "catch_up": mode}),
        )
        .await;
    }
    let s = |k: u64| ms("2026-12-01T10:00:00Z") + k * 1000;
    w.pass().await;
    // Down from here for 6.1 s: the last pass enqueued up to t0 + 2 s.
    w.pass_at(t0 + 8_400).await;
    // Slots 1, 2 were enqueued before; 3..8 were missed (their jobs are
    // due now, at the pass); 9, 10 are coming.
    let back = t0 + 8_400;
    for (name, caught) in [
        ("skip", vec![]),
        ("one", vec![8]),
        ("all", vec![3, 4, 5, 6, 7, 8]),
    ] {
        let missed: Vec<(String, u64)> = caught
            .iter()
            .map(|k| (format!("{name}@{}", s(*k)), back))
            .collect();
        let want = [
            slot_ids(name, &[s(1), s(2)]),
            missed,
            slot_ids(name, &[s(9), s(10)]),
        ]
        .concat();
        assert_eq!(w.jobs(name).await, want, "catch_up {name}");
    }
}

async fn pause_resume_end_at(fresh: Fresh) {
    let t0 = ms("2026-12-01T10:00:00Z");
    let w = world(fresh, t0);
    w.put(
        "p",
        json!({"topic": "p", "every": "1s", "end_at": "2026-12-01T10:00:20Z", "catch_up": "all"}),
    )
    .await;
    w.pass_at(t0 + 500).await;
    // A pause stops what is not enqueued yet; slots 1 and 2 (enqueued
    // ahead, due within the lead) still run.
    let (s, v) = w.api.call("POST", "/v1/schedules/p/pause", None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        (v["spec"]["paused"].clone(), v["next"].clone()),
        (json!(true), json!([]))
    );
    for dt in [1_000, 3_000, 9_000] {
        assert_eq!(w.pass_at(t0 + dt).await, 0, "paused");
    }
    assert_eq!(w.jobs("p").await, slot_ids("p", &[t0 + 1_000, t0 + 2_000]));
    // A start with the config file's settings keeps the pause.
    let spec =
        json!({"topic": "p", "every": "1s", "end_at": "2026-12-01T10:00:20Z", "catch_up": "all"});
    let (created, info) = w
        .state
        .service
        .apply_schedule("p", serde_json::from_value(spec).unwrap())
        .await
        .unwrap();
    assert!(!created && info.spec.paused, "{info:?}");
    // Resumed at +10.2 s: from then on, nothing of the pause caught up.
    w.clock.set(t0 + 10_200);
    let (s, v) = w.api.call("POST", "/v1/schedules/p/resume", None).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["next"][0]["at_ms"], t0 + 11_000);
    w.pass().await;
    assert_eq!(
        w.jobs("p").await,
        slot_ids("p", &[t0 + 11_000, t0 + 12_000])
    );
    // end_at: the last slot is 10:00:20, then nothing.
    for dt in (13_000..40_000).step_by(700) {
        w.pass_at(t0 + dt).await;
    }
    let got = w.jobs("p").await;
    assert_eq!(got.last().unwrap().1, t0 + 20_000, "{got:?}");
    assert_eq!(got.len(), 8, "13..=20: {got:?}");
    let (_, v) = w.api.call("GET", "/v1/schedules/p", None).await;
    assert_eq!(v["next"], json!([]), "over");

    // Pause and resume within the lead, delete and put again: each slot
    // once, none lost.
    let t1 = t0 + 60_000;
    w.clock.set(t1);
    w.put("q", json!({"topic": "q", "every": "1s"})).await;
    w.clock.set(t1 + 200);
    w.api.call("POST", "/v1/schedules/q/pause", None).await;
    w.clock.set(t1 + 400);
    w.api.call("POST", "/v1/schedules/q/resume", None).await;
    w.clock.set(t1 + 600);
    let (_, v) = w.api.call("DELETE", "/v1/schedules/q", None).await;
    assert_eq!(v, json!({"name": "q", "deleted": true}));
    w.put("q", json!({"topic": "q", "every": "1s"})).await;
    w.pass_at(t1 + 1_100).await;
    assert_eq!(
        w.jobs("q").await,
        slot_ids("q", &[t1 + 1_000, t1 + 2_000, t1 + 3_000])
    );
}

async fn two_instances_give_one_job_per_slot(fresh: Fresh) {
    let t0 = ms("2026-12-01T10:00:00Z");
    let w = world(fresh, t0);
    let other = AppState::new(w.store.clone(), Arc::new(w.clock.clone()), limits());
    w.put(
        "both",
        json!({"topic": "both", "every": "1s", "catch_up": "all"}),
    )
    .await;
    let t = Topic::new("both").unwrap();
    let mut created = 0;
    let mut acked = Vec::new();
    for step in 1..=40u64 {
        let now = t0 + step * 250;
        w.clock.set(now);
        let (a, b) = tokio::join!(pass(&w.state.service, now), pass(&other.service, now));
        created += a.unwrap().created + b.unwrap().created;
        // Jobs are done as they come due, so a late pass finds no waiting
        // job to collide with: the dedup window keeps the slot single.
        for l in w.store.reserve(&t, 10, None, now).await.unwrap().leases {
            assert!(l.due_at_ms <= now, "never early");
            w.store.ack(&t, &l.id, &l.token, now).await.unwrap();
            acked.push(l.id.to_string());
        }
    }
    let rest = w.jobs("both").await;
    let mut all: Vec<String> = acked
        .into_iter()
        .chain(rest.into_iter().map(|j| j.0))
        .collect();
    let n = all.len();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), n, "no slot twice");
    // The PUT itself enqueued the slots within the lead (1 and 2).
    assert_eq!(created as usize + 2, n, "each job created once");
    let want: Vec<String> = (1..=12)
        .map(|k| format!("both@{}", t0 + k * 1000))
        .collect();
    let mut want = want;
    want.sort();
    assert_eq!(all, want, "slots 1..=12 (10 s + the 2 s lead), each once");
}

async fn dst_transitions_fire_each_day_once(fresh: Fresh) {
    // (zone, rule, a window around a transition, the one firing in it)
    let cases = [
        // Berlin spring forward, 2026-03-29 02:00 CET -> 03:00 CEST.
        (
            "Europe/Berlin",
            "30 2 * * *",
            "2026-03-28T23:00:00Z",
            "2026-03-29T01:00:00Z",
        ),
        // Berlin fall back, 2026-10-25 03:00 CEST -> 02:00 CET.
        (
            "Europe/Berlin",
            "30 2 * * *",
            "2026-10-24T23:00:00Z",
            "2026-10-25T00:30:00Z",
        ),
        // New York spring forward, 2026-03-08 02:00 EST -> 03:00 EDT.
        (
            "America/New_York",
            "30 2 * * *",
            "2026-03-08T05:00:00Z",
            "2026-03-08T07:00:00Z",
        ),
        // New York fall back, 2026-11-01 02:00 EDT -> 01:00 EST.
        (
            "America/New_York",
            "30 1 * * *",
            "2026-11-01T04:00:00Z",
            "2026-11-01T05:30:00Z",
        ),
    ];
    for (i, (tz, cron, from, fires)) in cases.into_iter().enumerate() {
        let w = world(fresh, ms(from));
        let topic = format!("dst{i}");
        w.put("d", json!({"topic": topic, "cron": cron, "timezone": tz}))
            .await;
        // Four hours in steps of 20 s: every wall-clock hour of the change.
        let mut t = ms(from);
        while t < ms(from) + 4 * 3_600_000 {
            w.pass_at(t).await;
            t += 20_000;
        }
        assert_eq!(
            w.jobs(&topic).await,
            slot_ids("d", &[ms(fires)]),
            "{tz} {cron} from {from}"
        );
    }
}

/// A schedule's firings take their topic's `expires_ms` (issue #51),
/// counted from each firing's slot: a firing nobody took in time is not
/// handed out late but dead with `last_error` `expired` (embedded store:
/// the one that keeps expiry so far).
#[tokio::test]
async fn a_firing_not_taken_in_time_expires() {
    let t0 = ms("2026-12-01T08:59:50Z");
    let w = world(embedded as Fresh, t0);
    let (s, v) = w
        .api
        .call(
            "PUT",
            "/v1/topics/reminders",
            Some(json!({"expires_ms": 60_000})),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    w.put(
        "remind",
        json!({"topic": "reminders", "every": "10s", "body": {"k": 1}}),
    )
    .await;
    assert_eq!(w.pass_at(t0 + 10_000 - LEAD_MS).await, 1);
    let t = Topic::new("reminders").unwrap();
    let id = dq_core::JobId::new(format!("remind@{}", t0 + 10_000)).unwrap();
    let job = w.store.get(&t, &id).await.unwrap().unwrap();
    assert_eq!(job.expires_at_ms, Some(t0 + 10_000 + 60_000));
    // An outage: nobody reserves until well past the slot's expiry.
    let late = w
        .store
        .reserve(&t, 10, None, t0 + 10_000 + 60_000)
        .await
        .unwrap();
    assert!(late.leases.is_empty(), "not handed out late: {late:?}");
    let job = w.store.get(&t, &id).await.unwrap().unwrap();
    assert_eq!(
        (job.state, job.last_error.as_deref()),
        (dq_core::JobState::Dead, Some("expired"))
    );
}
