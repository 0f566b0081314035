//! The admin page through the real router, on both stores: every action of
//! the page (register, settings, lookup, cancel, reschedule, run now, replay
//! one/selected/all, purge with confirmation), HTML checked with a parser;
//! and the rules of `dq_server::auth` (loopback only without a token, token
//! sessions, CSRF, cross-site refusals, Bearer for API changes).
//!
//! Requests go through `dq_testkit::http::send`; the router is built anew
//! for each, from the state the test may have changed (the auth settings).

mod support;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::connect_info::MockConnectInfo;
use axum::http::{Request, StatusCode, header};
use dq_core::{Clock, Store, SystemClock};
use dq_server::{AppState, app, auth::AdminAuth};
use dq_testkit::http::{Guard, Reply};
use serde_json::{Value, json};

const LOOPBACK: ([u8; 4], u16) = ([127, 0, 0, 1], 50000);
const REMOTE: ([u8; 4], u16) = ([10, 1, 2, 3], 50000);

struct Admin {
    state: AppState,
    peer: SocketAddr,
    cookie: Option<String>,
    _guard: Guard,
}

/// What the admin tests read of a reply besides its status and text.
trait Page {
    fn doc(&self) -> scraper::Html;
    fn location(&self) -> &str;
    fn set_cookie(&self) -> &str;
}

impl Page for Reply {
    fn doc(&self) -> scraper::Html {
        scraper::Html::parse_document(&self.text)
    }
    fn location(&self) -> &str {
        self.header(header::LOCATION)
    }
    fn set_cookie(&self) -> &str {
        self.header(header::SET_COOKIE)
    }
}

fn embedded() -> Admin {
    let (store, dir) = support::embedded_store();
    admin_over(store, Box::new(dir))
}

fn sharded_redis() -> Admin {
    let (store, redis) = support::sharded_redis_store();
    admin_over(store, Box::new(redis))
}

fn postgres() -> Admin {
    let (store, guard) = support::postgres_store();
    admin_over(store, Box::new(guard))
}

fn admin_over(store: Arc<dyn Store>, guard: Guard) -> Admin {
    Admin {
        state: AppState::new(store, Arc::new(SystemClock), dq_core::Limits::default()),
        peer: SocketAddr::from(LOOPBACK),
        cookie: None,
        _guard: guard,
    }
}

impl Admin {
    fn router(&self) -> Router {
        app(self.state.clone(), 1 << 20).layer(MockConnectInfo(self.peer))
    }

    async fn send(&self, req: axum::http::request::Builder, body: Body) -> Reply {
        let mut req = req;
        if let Some(c) = &self.cookie {
            req = req.header(header::COOKIE, c);
        }
        dq_testkit::http::send(self.router(), req.body(body).unwrap()).await
    }

    async fn get(&self, uri: &str) -> Reply {
        self.send(Request::builder().uri(uri), Body::empty()).await
    }

    async fn form(&self, uri: &str, fields: &[(&str, &str)]) -> Reply {
        let body: String = form_urlencoded::Serializer::new(String::new())
            .extend_pairs(fields)
            .finish();
        self.send(
            Request::builder()
                .method("POST")
                .uri(uri)
                .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded"),
            Body::from(body),
        )
        .await
    }

    /// Posts a form with the CSRF token the page at `page` carries.
    async fn submit(&self, page: &str, uri: &str, fields: &[(&str, &str)]) -> Reply {
        let csrf = csrf_of(&self.get(page).await.doc());
        let mut all = vec![("csrf", csrf.as_str())];
        all.extend_from_slice(fields);
        self.form(uri, &all).await
    }

    async fn api(&self, method: &str, uri: &str, body: Option<Value>) -> Reply {
        let req = Request::builder()
            .method(method)
            .uri(uri)
            .header(header::CONTENT_TYPE, "application/json");
        let body = body.map_or_else(Body::empty, |b| Body::from(b.to_string()));
        self.send(req, body).await
    }

    async fn job(&self, id: &str) -> Value {
        self.api("GET", &format!("/v1/topics/shop/jobs/{id}"), None)
            .await
            .json()
    }

    async fn stats(&self) -> Value {
        self.api("GET", "/v1/topics/shop", None).await.json()["stats"].clone()
    }

    /// Reserves the next job of "shop" and buries it; returns its id.
    async fn kill(&self) -> String {
        let v = self
            .api("POST", "/v1/reserve", Some(json!({"topics": ["shop"]})))
            .await
            .json();
        let id = v["jobs"][0]["id"]
            .as_str()
            .expect("a job to kill")
            .to_string();
        let r = self
            .api(
                "POST",
                &format!("/v1/topics/shop/jobs/{}/nack", enc(&id)),
                Some(json!({"token": v["jobs"][0]["token"], "error": "<script>alert(1)</script>", "dead": true})),
            )
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.text);
        id
    }
}

fn enc(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}

fn csrf_of(doc: &scraper::Html) -> String {
    let sel = scraper::Selector::parse("input[name=csrf]").unwrap();
    doc.select(&sel)
        .next()
        .expect("the page has a form")
        .value()
        .attr("value")
        .unwrap()
        .to_string()
}

fn cells(doc: &scraper::Html, table: &str) -> Vec<Vec<String>> {
    let row = scraper::Selector::parse(&format!("table#{table} tbody tr")).unwrap();
    let cell = scraper::Selector::parse("th, td").unwrap();
    doc.select(&row)
        .map(|r| {
            r.select(&cell)
                .map(|c| c.text().collect::<String>().trim().to_string())
                .collect()
        })
        .collect()
}

fn text_of(doc: &scraper::Html, css: &str) -> Option<String> {
    let sel = scraper::Selector::parse(css).unwrap();
    doc.select(&sel).next().map(|e| e.text().collect())
}

/// The whole page, one action after another, each checked through the API.
async fn every_action(a: Admin) {
    let home = a.get("/").await;
    assert_eq!(home.status, StatusCode::OK);
    let doc = home.doc();
    assert!(text_of(&doc, "#auth-notice").unwrap().contains("loopback"));
    assert!(cells(&doc, "topics").is_empty());
    assert!(cells(&doc, "stores")[0][1].contains("answering"));

    // Register a topic; without the CSRF token nothing happens.
    let r = a.form("/admin/topics", &[("name", "sneaky")]).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert!(r.text.contains("csrf_mismatch"));
    let r = a
        .form("/admin/topics", &[("name", "sneaky"), ("csrf", "00")])
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(
        a.api("GET", "/v1/topics/sneaky", None).await.status,
        StatusCode::NOT_FOUND
    );
    let r = a
        .submit("/", "/admin/topics", &[("name", "shop"), ("mode", "pull")])
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text);
    assert_eq!(r.location(), "/admin/topics/shop?done=created");
    let r = a.submit("/", "/admin/topics", &[("name", "shop")]).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "registering twice");
    let r = a
        .submit("/", "/admin/topics", &[("name", "bad name")])
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(
        text_of(&r.doc(), "#error")
            .unwrap()
            .contains("invalid_topic")
    );

    // Settings.
    let page = "/admin/topics/shop";
    let r = a
        .submit(
            page,
            "/admin/topics/shop/settings",
            &[
                ("max_attempts", "2"),
                ("lease", "15s"),
                ("dead_cap", "50"),
                ("default_delay", "0s"),
                ("retry", "fixed:5s"),
                ("mode", "pull"),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text);
    let cfg = a.api("GET", "/v1/topics/shop", None).await.json()["config"].clone();
    assert_eq!(cfg["max_attempts"], json!(2));
    assert_eq!(cfg["lease_ms"], json!(15000));
    assert_eq!(cfg["retry"], json!({"fixed_ms": 5000}));
    let r = a
        .form(
            "/admin/topics/shop/settings",
            &[("max_attempts", "9"), ("lease", "1h"), ("mode", "pull")],
        )
        .await;
    assert_eq!(
        r.status,
        StatusCode::FORBIDDEN,
        "settings need the CSRF token"
    );
    assert!(r.text.contains("csrf_mismatch"));
    let doc = a.get(&format!("{page}?done=saved")).await.doc();
    assert_eq!(text_of(&doc, "#flash").unwrap(), "Settings saved.");
    let value = |doc: &scraper::Html, id: &str| {
        doc.select(&scraper::Selector::parse(&format!("#settings #{id}")).unwrap())
            .next()
            .and_then(|e| e.value().attr("value").map(str::to_string))
    };
    assert_eq!(
        value(&doc, "lease").as_deref(),
        Some("15s"),
        "the CLI's units"
    );
    assert_eq!(value(&doc, "retry").as_deref(), Some("fixed:5s"));
    // A list of waits, as `dq topics put --retry` takes it, reads back as
    // it was typed.
    let r = a
        .submit(
            page,
            "/admin/topics/shop/settings",
            &[("retry", "1m,3m,5m"), ("lease", "1m30s"), ("mode", "pull")],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text);
    let cfg = a.api("GET", "/v1/topics/shop", None).await.json()["config"].clone();
    assert_eq!(cfg["retry"], json!({"delays_ms": [60000, 180000, 300000]}));
    assert_eq!(cfg["lease_ms"], json!(90000));
    let doc = a.get(page).await.doc();
    assert_eq!(value(&doc, "retry").as_deref(), Some("1m,3m,5m"));
    assert_eq!(value(&doc, "lease").as_deref(), Some("1m30s"));
    for (bad_field, bad_value, code) in [
        ("retry", "{oops", "invalid_config"),
        ("retry", "exp:1s", "invalid_config"),
        ("retry", "0.5m,soon", "invalid_config"),
        ("lease", "15000", "invalid_config"),
        ("lease", "a while", "invalid_config"),
        ("max_attempts", "lots", "invalid_config"),
        ("max_attempts", "0", "invalid_max_attempts"),
    ] {
        let r = a
            .submit(
                page,
                "/admin/topics/shop/settings",
                &[(bad_field, bad_value), ("mode", "pull")],
            )
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad_field}={bad_value}");
        assert!(r.text.contains(code), "{}", r.text);
    }
    let r = a
        .submit(
            page,
            "/admin/topics/shop/settings",
            &[("mode", "push"), ("url", "http://169.254.169.254/latest")],
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(r.text.contains("invalid_callback"));
    let cfg = a.api("GET", "/v1/topics/shop", None).await.json()["config"].clone();
    assert_eq!(
        cfg["max_attempts"],
        json!(2),
        "refused forms change nothing"
    );
    assert_eq!(
        cfg["lease_ms"],
        json!(90000),
        "refused forms change nothing"
    );
    assert_eq!(cfg["retry"], json!({"delays_ms": [60000, 180000, 300000]}));
    assert_eq!(cfg["delivery"]["mode"], json!("pull"));

    // Jobs, as the next-due list and lookup show them.
    let r = a
        .api(
            "POST",
            "/v1/topics/shop/jobs:batch",
            Some(json!({"jobs": [
                {"id": "<b>x</b>", "body": {"order": "<i>1</i>"}},
                {"id": "far", "delay_ms": 3 * 86_400_000u64},
                {"id": "later", "delay_ms": 60_000},
            ]})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let doc = a.get(page).await.doc();
    let scheduled = cells(&doc, "jobs");
    let mut ids: Vec<&str> = scheduled.iter().map(|r| r[0].as_str()).collect();
    ids.sort_unstable();
    assert_eq!(ids, ["far", "later"], "scheduled jobs by default");
    assert!(scheduled[0][1].starts_with("in "), "{:?}", scheduled[0]);
    assert_eq!(scheduled[0][2], "0 of 2", "attempts of max_attempts");
    let counts = cells(&doc, "counts");
    assert_eq!(
        counts[0][..4],
        ["2", "1", "0", "0"],
        "scheduled ready reserved dead"
    );

    let doc = a.get("/admin/topics/shop?job=later").await.doc();
    let job = cells(&doc, "job");
    assert_eq!(job[1], ["state", "scheduled"]);
    let doc = a.get("/admin/topics/shop?job=nope").await.doc();
    assert!(text_of(&doc, "#job-missing").is_some());
    // An unknown topic's page: 404, as HTML (what openapi.json says).
    let r = a.get("/admin/topics/no-such-topic").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert!(
        r.text.contains("<html") || r.text.contains("<!doctype"),
        "{}",
        r.text
    );

    // Run now, reschedule, cancel.
    let lookup = "/admin/topics/shop?job=later";
    let r = a
        .submit(lookup, "/admin/topics/shop/jobs/later/run", &[])
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text);
    assert_eq!(r.location(), "/admin/topics/shop?job=later&done=run");
    assert_eq!(a.job("later").await["state"], json!("ready"));
    let before = a.job("far").await["due_at_ms"].clone();
    let r = a
        .submit(
            "/admin/topics/shop?job=far",
            "/admin/topics/shop/jobs/far/reschedule",
            &[("delay", "soon")],
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(r.text.contains("invalid_delay"));
    assert_eq!(a.job("far").await["due_at_ms"], before, "unchanged");
    let now = SystemClock.now_ms();
    let r = a
        .submit(
            "/admin/topics/shop?job=far",
            "/admin/topics/shop/jobs/far/reschedule",
            &[("delay", "2h")],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text);
    let due = a.job("far").await["due_at_ms"].as_u64().unwrap();
    assert!(
        due >= now + 7_200_000 && due < now + 7_260_000,
        "{due} vs {now}"
    );
    let r = a
        .submit(
            "/admin/topics/shop?job=far",
            "/admin/topics/shop/jobs/far/cancel",
            &[],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert_eq!(
        a.api("GET", "/v1/topics/shop/jobs/far", None).await.status,
        StatusCode::NOT_FOUND
    );
    let r = a
        .submit(
            "/admin/topics/shop?job=far",
            "/admin/topics/shop/jobs/far/cancel",
            &[],
        )
        .await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "cancelling twice");

    // Dead letters: shown escaped, replayed one / selected / all, purged,
    // each after a confirmation page.
    assert_eq!(a.kill().await, "<b>x</b>", "due first");
    assert_eq!(a.kill().await, "later");
    let doc = a.get(page).await.doc();
    let dead = cells(&doc, "dead");
    assert_eq!(dead.len(), 2);
    assert_eq!(dead[0][1], "later", "newest first");
    assert_eq!(dead[1][1], "<b>x</b>", "ids are text, not markup");
    assert_eq!(dead[1][4], "<script>alert(1)</script>");
    assert_eq!(dead[1][5], r#"{"order":"<i>1</i>"}"#, "the body, as text");
    let details = cells(&a.get("/admin/topics/shop?job=later").await.doc(), "job");
    assert!(
        details
            .iter()
            .any(|r| r.first().map(String::as_str) == Some("history")
                && r.get(1).map(String::as_str) == Some("handed out once: dead once; now dead")),
        "the history in words: {details:?}"
    );
    let errors = details
        .iter()
        .find(|r| r.first().map(String::as_str) == Some("errors"))
        .and_then(|r| r.get(1).cloned())
        .unwrap_or_default();
    assert!(
        errors.starts_with("attempt 1, ") && errors.ends_with("): <script>alert(1)</script>"),
        "each failed attempt: {details:?}"
    );
    let script = scraper::Selector::parse("script").unwrap();
    assert!(
        doc.select(&script).next().is_none(),
        "nothing sent becomes markup"
    );
    let filtered = cells(&a.get("/admin/topics/shop?died=1h").await.doc(), "dead");
    assert_eq!(filtered.len(), 2, "both died in the last hour");

    let r = a
        .submit(
            page,
            "/admin/topics/shop/dead/replay",
            &[("ids", "<b>x</b>")],
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "a confirmation page first");
    let doc = r.doc();
    assert!(text_of(&doc, "#question").unwrap().contains("<b>x</b>"));
    assert_eq!(a.stats().await["dead"], json!(2), "nothing replayed yet");
    // The confirmation form re-posts the same fields plus confirm=yes.
    let sel = scraper::Selector::parse("form#confirm input[type=hidden]").unwrap();
    let mut fields: Vec<(String, String)> = doc
        .select(&sel)
        .map(|i| {
            (
                i.value().attr("name").unwrap().to_string(),
                i.value().attr("value").unwrap().to_string(),
            )
        })
        .collect();
    fields.push(("confirm".into(), "yes".into()));
    let refs: Vec<(&str, &str)> = fields
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let r = a.form("/admin/topics/shop/dead/replay", &refs).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text);
    assert_eq!(r.location(), "/admin/topics/shop?done=replayed&n=1");
    assert_eq!(a.job("%3Cb%3Ex%3C%2Fb%3E").await["state"], json!("ready"));
    assert_eq!(a.job("%3Cb%3Ex%3C%2Fb%3E").await["attempts"], json!(0));
    let r = a.submit(page, "/admin/topics/shop/dead/replay", &[]).await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "nothing selected");
    let r = a
        .submit(
            page,
            "/admin/topics/shop/dead/replay",
            &[("scope", "all"), ("confirm", "yes")],
        )
        .await;
    assert_eq!(r.location(), "/admin/topics/shop?done=replayed&n=1");
    assert_eq!(a.stats().await["dead"], json!(0));

    a.kill().await;
    let r = a.submit(page, "/admin/topics/shop/dead/purge", &[]).await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(
        text_of(&r.doc(), "#question")
            .unwrap()
            .contains("Delete all 1")
    );
    assert_eq!(a.stats().await["dead"], json!(1));
    let r = a
        .submit(page, "/admin/topics/shop/dead/purge", &[("confirm", "yes")])
        .await;
    assert_eq!(r.location(), "/admin/topics/shop?done=purged&n=1");
    assert_eq!(a.stats().await["dead"], json!(0));

    // The overview shows the topic with its counts.
    let doc = a.get("/").await.doc();
    let rows = cells(&doc, "topics");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0][..6], ["shop", "pull", "0", "1", "0", "0"]);

    // A page of another site cannot post through the operator's browser.
    let csrf = csrf_of(&a.get(page).await.doc());
    let r = a
        .send(
            Request::builder()
                .method("POST")
                .uri("/admin/topics/shop/dead/purge")
                .header(header::ORIGIN, "http://evil.example")
                .header(header::HOST, "127.0.0.1:7070")
                .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded"),
            Body::from(format!("csrf={csrf}&confirm=yes")),
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    assert_eq!(r.json()["error"]["code"], json!("cross_origin"));
    let r = a
        .send(
            Request::builder()
                .method("POST")
                .uri("/v1/topics/shop/dead/replay")
                .header("sec-fetch-site", "cross-site")
                .header(header::CONTENT_TYPE, "text/plain"),
            Body::empty(),
        )
        .await;
    assert_eq!(r.json()["error"]["code"], json!("cross_origin"));
    let r = a.get("/admin/topics/nope").await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
}

/// The topic page's job lists: a tab per state with its count, the reserved
/// list with each job's lease deadline and attempt, hostile ids and bodies
/// shown as text; pages follow the store's cursor to the end with every job
/// once; a bad state or cursor is refused with a page saying so.
async fn job_lists_by_state(a: Admin) {
    let hostile = "<script>alert(1)</script>";
    let r = a
        .api(
            "POST",
            "/v1/topics/shop/jobs:batch",
            Some(json!({"jobs": [
                {"id": hostile, "body": {"x": "</code><script>alert(2)</script>"}, "priority": 0},
                {"id": "r1", "body": {"n": 1}, "priority": 5},
                {"id": "s1", "delay_ms": 3_600_000},
            ]})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let v = a
        .api(
            "POST",
            "/v1/reserve",
            Some(json!({"topics": ["shop"], "lease_ms": 60_000})),
        )
        .await
        .json();
    assert_eq!(v["jobs"][0]["id"], json!(hostile), "{v}");

    let page = "/admin/topics/shop";
    let doc = a.get(page).await.doc();
    let tab = |doc: &scraper::Html, name: &str| text_of(doc, &format!("#tab-{name}")).unwrap();
    assert_eq!(tab(&doc, "scheduled"), "scheduled (1)");
    assert_eq!(tab(&doc, "ready"), "ready (1)");
    assert_eq!(tab(&doc, "reserved"), "reserved (1)");
    assert_eq!(tab(&doc, "dead"), "dead (0)");
    assert_eq!(cells(&doc, "jobs").len(), 1, "scheduled by default");
    assert_eq!(cells(&doc, "jobs")[0][0], "s1");

    let doc = a.get(&format!("{page}?state=ready")).await.doc();
    let ready = cells(&doc, "jobs");
    assert_eq!(ready.len(), 1);
    assert_eq!(ready[0][0], "r1");
    assert!(
        ready[0][1].ends_with(" ago") || ready[0][1].starts_with("in "),
        "{ready:?}"
    );
    assert_eq!(ready[0][3], "5", "priority");
    assert_eq!(ready[0][4], r#"{"n":1}"#);

    let r = a.get(&format!("{page}?state=reserved")).await;
    assert_eq!(r.status, StatusCode::OK);
    let doc = r.doc();
    let reserved = cells(&doc, "jobs");
    assert_eq!(reserved.len(), 1);
    assert_eq!(reserved[0][0], hostile, "ids are text");
    assert!(
        reserved[0][1].starts_with("in "),
        "lease deadline ahead: {reserved:?}"
    );
    assert_eq!(
        reserved[0][2].split(' ').next(),
        Some("1"),
        "first attempt: {reserved:?}"
    );
    assert!(reserved[0][4].contains("</code><script>"), "{reserved:?}");
    let script = scraper::Selector::parse("script").unwrap();
    assert!(
        doc.select(&script).next().is_none(),
        "nothing sent becomes markup"
    );
    assert!(
        r.text
            .contains(&format!("?state=reserved&amp;job={}#found", enc(hostile)))
            || r.text
                .contains(&format!("?state=reserved&#38;job={}#found", enc(hostile))),
        "the row links to the job, its id encoded"
    );
    assert_eq!(
        text_of(&doc, "table#jobs th:nth-child(2)").unwrap(),
        "lease ends"
    );
    // The chart: drawn on the server, empty until a minute has two samples.
    let svg = scraper::Selector::parse("svg#chart").unwrap();
    let chart = doc.select(&svg).next().expect("the chart");
    assert!(
        chart.text().any(|t| t.contains("no samples yet")),
        "fresh: nothing to draw"
    );

    // The job's details: its body in full, indented, keys in the order
    // sent; the lease deadline; the limits in the CLI's units.
    let r = a.get(&format!("{page}?job={}", enc(hostile))).await;
    let doc = r.doc();
    assert_eq!(
        text_of(&doc, "#job-body").unwrap(),
        "{\n  \"x\": \"</code><script>alert(2)</script>\"\n}"
    );
    assert!(
        doc.select(&script).next().is_none(),
        "nothing sent becomes markup"
    );
    let job = cells(&doc, "job");
    let row = |name: &str| {
        job.iter()
            .find(|r| r[0] == name)
            .unwrap_or_else(|| panic!("no {name} in {job:?}"))[1]
            .clone()
    };
    assert_eq!(row("state"), "reserved");
    assert!(row("lease deadline").contains("(in "), "{job:?}");
    assert!(row("attempts").starts_with("1 of "), "{job:?}");
    assert!(
        row("limits").starts_with("max attempts 5 · lease 30s · retry exp:1s,2,1h"),
        "the topic's defaults: {job:?}"
    );
    let r = a
        .api(
            "POST",
            "/v1/topics/shop/jobs",
            Some(json!({"id": "raw", "body_base64": "PHNjcmlwdD4=", "delay_ms": 60_000, "max_attempts": 7})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    let doc = a.get(&format!("{page}?job=raw")).await.doc();
    assert_eq!(
        text_of(&doc, "#job-body").unwrap(),
        "PHNjcmlwdD4=",
        "bytes as base64"
    );
    let job = cells(&doc, "job");
    assert!(
        job.iter().any(|r| r[1] == "binary, 8 bytes, as base64"),
        "{job:?}"
    );
    assert!(
        job.iter().any(|r| r[1].starts_with("max attempts 7 ·")),
        "the job's own override: {job:?}"
    );

    for (uri, status, code) in [
        (
            format!("{page}?state=bogus"),
            StatusCode::BAD_REQUEST,
            "invalid_state",
        ),
        (
            format!("{page}?state=ready&cursor={}", "x".repeat(2000)),
            StatusCode::BAD_REQUEST,
            "invalid_cursor",
        ),
        (
            "/admin/topics/nope?state=ready".to_string(),
            StatusCode::NOT_FOUND,
            "topic_not_found",
        ),
    ] {
        let r = a.get(&uri).await;
        assert_eq!(r.status, status, "{uri}: {}", r.text);
        assert!(r.text.contains(code), "{uri}: {}", r.text);
        if status == StatusCode::BAD_REQUEST {
            let back = scraper::Selector::parse("a[href='/admin/topics/shop']").unwrap();
            assert!(
                r.doc().select(&back).next().is_some(),
                "back to the topic: {}",
                r.text
            );
        }
    }

    // Enough jobs for several pages: following "next" lists each once,
    // ready ones in hand-out order (priority, then enqueue order).
    let priority = |i: usize| (i * 7) % 5;
    let jobs: Vec<Value> = (0..600)
        .map(|i| json!({"id": format!("m{i:03}"), "priority": priority(i)}))
        .collect();
    let r = a
        .api(
            "POST",
            "/v1/topics/many/jobs:batch",
            Some(json!({ "jobs": jobs })),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let mut expected: Vec<usize> = (0..600).collect();
    expected.sort_by_key(|&i| (priority(i), i));
    let expected: Vec<String> = expected.iter().map(|i| format!("m{i:03}")).collect();
    let listed = every_page(&a, "/admin/topics/many?state=ready").await;
    assert_eq!(
        listed, expected,
        "ready jobs page after page in hand-out order"
    );

    // Scheduled jobs soonest first, whatever their ids (later-10 after
    // later-9), page after page.
    let jobs: Vec<Value> = (1..=120)
        .map(|i| json!({"id": format!("later-{i}"), "delay_ms": i * 60_000}))
        .collect();
    let r = a
        .api(
            "POST",
            "/v1/topics/soon/jobs:batch",
            Some(json!({ "jobs": jobs })),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let expected: Vec<String> = (1..=120).map(|i| format!("later-{i}")).collect();
    assert_eq!(
        every_page(&a, "/admin/topics/soon?state=scheduled").await,
        expected,
        "scheduled jobs page after page in due order"
    );
    let r = a
        .get("/admin/topics/soon?state=scheduled&cursor=10001")
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text);
    assert!(r.text.contains("invalid_offset"), "{}", r.text);
}

/// Follows a topic page's job list from `uri` by its "next" links; the ids
/// listed, in order (each once).
async fn every_page(a: &Admin, uri: &str) -> Vec<String> {
    let mut seen = std::collections::BTreeSet::new();
    let mut listed = Vec::new();
    let mut uri = uri.to_string();
    let mut pages = 0;
    loop {
        let doc = a.get(&uri).await.doc();
        pages += 1;
        for row in cells(&doc, "jobs") {
            assert!(seen.insert(row[0].clone()), "{} listed twice", row[0]);
            listed.push(row[0].clone());
        }
        if pages > 1 {
            assert!(
                text_of(&doc, "#jobs-first").is_some(),
                "a way back to the first page"
            );
        }
        let next = scraper::Selector::parse("a#jobs-next").unwrap();
        match doc.select(&next).next() {
            Some(link) => {
                let href = link.value().attr("href").unwrap();
                uri = href.split('#').next().unwrap().to_string();
                assert!(uri.contains("cursor="), "{uri}");
            }
            None => break,
        }
        assert!(pages < 30, "the pages end");
    }
    assert!(pages > 1, "more than one page");
    listed
}

/// The names in the overview's topics table, and its previous and next
/// links.
fn overview_page(doc: &scraper::Html) -> (Vec<String>, Option<String>, Option<String>) {
    let href = |css: &str| {
        let sel = scraper::Selector::parse(css).unwrap();
        doc.select(&sel)
            .next()
            .map(|e| e.value().attr("href").unwrap().to_string())
    };
    let names = cells(doc, "topics")
        .into_iter()
        .map(|r| r[0].clone())
        .collect();
    (names, href("a#prev"), href("a#next"))
}

/// The overview shows 100 topics a page in name order, with next and
/// previous links that carry the cursor (and the search); the search box
/// lists the topics starting with a prefix; a bad search is refused with
/// a message, the box kept.
async fn overview_pages_and_searches(a: Admin) {
    let mut names: Vec<String> = (0..230).map(|i| format!("t{i:03}")).collect();
    names.extend(["other.a".to_string(), "other_b".to_string()]);
    for n in &names {
        let t = dq_core::Topic::new(n.as_str()).unwrap();
        a.state
            .service
            .configure_topic(&t, Default::default())
            .await
            .unwrap();
    }
    names.sort();
    let names_of = |r: std::ops::Range<usize>| names[r].to_vec();

    let home = a.get("/").await;
    assert_eq!(home.status, StatusCode::OK);
    let (first, prev, next) = overview_page(&home.doc());
    assert_eq!(first, names_of(0..100));
    assert_eq!(prev, None, "the first page has no previous one");
    assert_eq!(next.as_deref(), Some("/?cursor=t097"));

    let (second, prev, next) = overview_page(&a.get(&next.unwrap()).await.doc());
    assert_eq!(second, names_of(100..200));
    assert_eq!(prev.as_deref(), Some("/?before=t098"));
    assert_eq!(next.as_deref(), Some("/?cursor=t197"));

    let (third, prev, next) = overview_page(&a.get(&next.unwrap()).await.doc());
    assert_eq!(third, names_of(200..232));
    assert_eq!(next, None, "the last page has no next one");
    assert_eq!(prev.as_deref(), Some("/?before=t198"));

    // Back again, page by page.
    let (back, prev, next) = overview_page(&a.get(&prev.unwrap()).await.doc());
    assert_eq!(back, names_of(100..200));
    assert_eq!(next.as_deref(), Some("/?cursor=t197"));
    let (back, prev, next) = overview_page(&a.get(&prev.unwrap()).await.doc());
    assert_eq!(back, names_of(0..100));
    assert_eq!(prev, None, "back at the start");
    assert_eq!(next.as_deref(), Some("/?cursor=t097"));

    // The search: a plain prefix (`_` is no wildcard), kept in the box and
    // in the links.
    let r = a.get("/?prefix=t1").await;
    let doc = r.doc();
    let (found, prev, next) = overview_page(&doc);
    assert_eq!(
        found,
        (100..200).map(|i| format!("t{i:03}")).collect::<Vec<_>>()
    );
    assert_eq!((prev, next), (None, None), "exactly one page");
    let sel = scraper::Selector::parse("form#search input#prefix").unwrap();
    let input = doc.select(&sel).next().expect("the search box");
    assert_eq!(input.value().attr("value"), Some("t1"));
    let (found, _, next) = overview_page(&a.get("/?prefix=t&cursor=t150").await.doc());
    assert_eq!(found.first().map(String::as_str), Some("t151"));
    assert_eq!(found.len(), 79);
    assert_eq!(next, None);
    let (found, _, _) = overview_page(&a.get("/?prefix=other_").await.doc());
    assert_eq!(found, vec!["other_b"]);
    let r = a.get("/?prefix=nothing").await;
    assert_eq!(r.status, StatusCode::OK);
    assert!(overview_page(&r.doc()).0.is_empty());
    assert!(r.text.contains("No topic here starts with"), "{}", r.text);

    // A search no topic name can match, a cursor that is no name: refused,
    // saying why, the search box still there.
    for (uri, says) in [
        ("/?prefix=a%20b", "prefix may hold only"),
        ("/?cursor=a%23b", "cursor is not one"),
    ] {
        let r = a.get(uri).await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{uri}");
        let doc = r.doc();
        let e = text_of(&doc, "#search-error").unwrap_or_default();
        assert!(e.contains(says), "{uri}: {e}");
        assert!(cells(&doc, "topics").is_empty());
        assert!(text_of(&doc, "form#search").is_some());
    }
}

dq_testkit::router_tests! {
    embedded: embedded(),
    sharded_redis: sharded_redis(),
    postgres: postgres(),
    tests: [every_action, overview_pages_and_searches, job_lists_by_state],
}

#[tokio::test]
async fn without_a_token_the_page_answers_on_loopback_only() {
    let mut a = embedded();
    a.peer = SocketAddr::from(REMOTE);
    for uri in ["/", "/admin/topics/x", "/admin/login"] {
        let r = a.get(uri).await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{uri}");
        assert!(r.text.contains("admin_token"));
    }
    let r = a.form("/admin/topics", &[("name", "x")]).await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    // The API is open, as it always was.
    let r = a
        .api("POST", "/v1/topics/x/jobs", Some(json!({"id": "1"})))
        .await;
    assert_eq!(r.status, StatusCode::CREATED);
    a.peer = SocketAddr::from(([0, 0, 0, 0, 0, 0, 0, 1], 1));
    assert_eq!(a.get("/").await.status, StatusCode::OK, "::1 is loopback");
}

#[tokio::test]
async fn with_a_token_sign_in_and_bearer_are_required() {
    let mut a = embedded();
    a.state.admin = Arc::new(AdminAuth::new(Some("correct-horse-battery".into())));
    a.peer = SocketAddr::from(REMOTE);

    // The page sends strangers to the login form, and back afterwards.
    let r = a.get("/admin/topics/shop?job=1").await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    assert_eq!(
        r.location(),
        "/admin/login?next=%2Fadmin%2Ftopics%2Fshop%3Fjob%3D1"
    );
    let r = a.form("/admin/topics", &[("name", "x")]).await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);

    // Changes through the API need the token; reads do not.
    let r = a
        .api("POST", "/v1/topics/shop/jobs", Some(json!({"id": "1"})))
        .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED);
    assert_eq!(r.json()["error"]["code"], json!("unauthorized"));
    assert_eq!(
        a.api("GET", "/v1/topics/shop", None).await.status,
        StatusCode::NOT_FOUND,
        "refused: nothing written"
    );
    // An import is a change like any other.
    let r = a
        .api(
            "POST",
            "/v1/topics/shop/jobs:import",
            Some(json!({"jobs": [{"id": "1", "state": "ready", "due_at_ms": 1, "priority": 1, "attempts": 0}]})),
        )
        .await;
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{}", r.text);
    assert_eq!(
        a.api("GET", "/v1/topics/shop", None).await.status,
        StatusCode::NOT_FOUND,
        "refused: nothing imported"
    );
    for bearer in [
        "Bearer wrong-token-entirely",
        "Basic abc",
        "correct-horse-battery",
    ] {
        let r = a
            .send(
                Request::builder()
                    .method("POST")
                    .uri("/v1/topics/shop/jobs")
                    .header(header::AUTHORIZATION, bearer)
                    .header(header::CONTENT_TYPE, "application/json"),
                Body::from(r#"{"id":"1"}"#),
            )
            .await;
        assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{bearer}");
    }
    let r = a
        .send(
            Request::builder()
                .method("POST")
                .uri("/v1/topics/shop/jobs")
                .header(header::AUTHORIZATION, "Bearer correct-horse-battery")
                .header(header::CONTENT_TYPE, "application/json"),
            Body::from(r#"{"id":"1"}"#),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    assert_eq!(a.get("/metrics").await.status, StatusCode::OK);
    assert_eq!(a.get("/healthz").await.status, StatusCode::OK);

    // Sign in: a wrong token is refused, the right one sets a session.
    let login = a.get("/admin/login?next=%2Fadmin%2Ftopics%2Fshop").await;
    assert_eq!(login.status, StatusCode::OK);
    let csrf = csrf_of(&login.doc());
    let r = a
        .form(
            "/admin/login",
            &[
                ("csrf", &csrf),
                ("token", "guess"),
                ("next", "/admin/topics/shop"),
            ],
        )
        .await;
    assert!(
        r.location().starts_with("/admin/login?failed=1"),
        "{}",
        r.location()
    );
    assert!(r.set_cookie().is_empty());
    let r = a
        .form(
            "/admin/login",
            &[
                ("csrf", &csrf),
                ("token", "correct-horse-battery"),
                ("next", "https://evil.example/"),
            ],
        )
        .await;
    assert_eq!(
        r.location(),
        "/",
        "only a path of this site follows a login"
    );
    assert!(r.set_cookie().contains("HttpOnly") && r.set_cookie().contains("SameSite=Strict"));
    let session = r.set_cookie().split(';').next().unwrap().to_string();

    // A forged or stale cookie is not a session.
    a.cookie = Some(session.replace("dq_session=", "dq_session=1"));
    assert_eq!(a.get("/").await.status, StatusCode::SEE_OTHER);
    a.cookie = Some(session.clone());
    let home = a.get("/").await;
    assert_eq!(home.status, StatusCode::OK);
    assert!(text_of(&home.doc(), "#auth-notice").is_none());
    // The session's CSRF token works; one of another session does not.
    let other = AdminAuth::new(Some("correct-horse-battery".into()));
    let foreign = other.csrf(&other.new_session(1));
    let r = a
        .form("/admin/topics", &[("csrf", &foreign), ("name", "x")])
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    let r = a.submit("/", "/admin/topics", &[("name", "x")]).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text);
    // A new token ends every session.
    a.state.admin = Arc::new(AdminAuth::new(Some("another-token-0123".into())));
    assert_eq!(a.get("/").await.status, StatusCode::SEE_OTHER);
}

/// A forwarding topic on the page: its target in words with the password
/// redacted, kept when the settings form is saved (the form cannot change
/// it, and must not turn the topic back to pull).
#[tokio::test]
async fn a_forwarding_topic_keeps_its_target_and_never_shows_the_password() {
    let a = embedded();
    let delivery = json!({"mode": "redis_stream", "url": "redis://app:hunter2hunter2@127.0.0.1:6390/0", "stream": "due"});
    let r = a
        .api(
            "PUT",
            "/v1/topics/shop",
            Some(json!({ "delivery": delivery })),
        )
        .await;
    assert!(r.status.is_success(), "{}", r.text);
    let page = a.get("/admin/topics/shop").await;
    assert!(!page.text.contains("hunter2"), "no password on the page");
    assert!(
        page.text
            .contains("Redis stream due at redis://app:…@127.0.0.1:6390/0"),
        "{}",
        page.text
    );
    let home = a.get("/").await;
    assert!(home.text.contains("redis_stream"));
    let r = a
        .submit(
            "/admin/topics/shop",
            "/admin/topics/shop/settings",
            &[("max_attempts", "3"), ("mode", "keep")],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text);
    let cfg = a.api("GET", "/v1/topics/shop", None).await.json()["config"].clone();
    assert_eq!(cfg["max_attempts"], json!(3));
    assert_eq!(cfg["delivery"]["mode"], json!("redis_stream"), "{cfg}");
    assert_eq!(cfg["delivery"]["stream"], json!("due"));
}

/// Pause and resume from the topic page: while paused nothing is handed
/// out (the page says until when), a bad duration is refused and changes
/// nothing, resume hands out again.
#[tokio::test]
async fn pause_and_resume_a_topic_from_its_page() {
    let a = embedded();
    let r = a
        .api(
            "POST",
            "/v1/topics/shop/jobs",
            Some(json!({"id": "j", "body": 1})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    let page = "/admin/topics/shop";
    assert!(
        a.get(page)
            .await
            .doc()
            .select(&scraper::Selector::parse("#pause").unwrap())
            .next()
            .is_some()
    );
    let r = a
        .submit(page, "/admin/topics/shop/pause", &[("for", "soon")])
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(r.text.contains("invalid_delay"), "{}", r.text);
    let paused = |v: serde_json::Value| v["paused_until_ms"].as_u64().unwrap_or(0);
    assert_eq!(paused(a.stats().await), 0, "refused: not paused");
    let r = a
        .submit(page, "/admin/topics/shop/pause", &[("for", "10m")])
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text);
    assert_eq!(r.location(), "/admin/topics/shop?done=paused");
    assert!(paused(a.stats().await) > 0);
    let doc = a.get(&format!("{page}?done=paused")).await.doc();
    assert!(
        text_of(&doc, "#paused").unwrap().contains("Paused until"),
        "paused shown"
    );
    let got = a
        .api("POST", "/v1/reserve", Some(json!({"topics": ["shop"]})))
        .await
        .json();
    assert_eq!(got["jobs"], json!([]), "nothing handed out while paused");
    let r = a
        .submit(page, "/admin/topics/shop/pause", &[("resume", "1")])
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text);
    let doc = a.get(&format!("{page}?done=resumed")).await.doc();
    assert_eq!(text_of(&doc, "#flash").unwrap(), "Topic resumed.");
    assert_eq!(paused(a.stats().await), 0);
    let got = a
        .api("POST", "/v1/reserve", Some(json!({"topics": ["shop"]})))
        .await
        .json();
    assert_eq!(got["jobs"][0]["id"], "j", "handed out again");
}

/// Flow control from the topic page: the pause button with no duration
/// pauses until resumed (the topic's `paused`); the settings form sets and
/// removes the rate limit (a bad one refused with nothing changed); the
/// counts show the jobs held back.
#[tokio::test]
async fn pause_until_resumed_and_rate_limit_from_the_page() {
    let a = embedded();
    let r = a
        .api(
            "POST",
            "/v1/topics/shop/jobs:batch",
            Some(json!({"jobs": [{"id": "a"}, {"id": "b"}, {"id": "c"}]})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let page = "/admin/topics/shop";
    let cfg = || async { a.api("GET", "/v1/topics/shop", None).await.json()["config"].clone() };
    let r = a
        .submit(page, "/admin/topics/shop/pause", &[("for", "")])
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text);
    assert_eq!(cfg().await["paused"], json!(true));
    let doc = a.get(page).await.doc();
    assert!(
        text_of(&doc, "#paused").unwrap().contains("until resumed"),
        "paused shown"
    );
    let r = a
        .submit(page, "/admin/topics/shop/pause", &[("resume", "1")])
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text);
    assert_eq!(cfg().await["paused"], json!(false));

    let r = a
        .submit(
            page,
            "/admin/topics/shop/settings",
            &[("rate_limit", "0"), ("mode", "pull")],
        )
        .await;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(r.text.contains("invalid_rate_limit"), "{}", r.text);
    assert!(
        cfg().await.get("rate_limit").is_none(),
        "refused: nothing set"
    );
    let r = a
        .submit(
            page,
            "/admin/topics/shop/settings",
            &[("rate_limit", "2"), ("rate_per", "1m"), ("mode", "pull")],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text);
    assert_eq!(
        cfg().await["rate_limit"],
        json!({"limit": 2, "per_ms": 60000, "burst": 2})
    );
    let got = a
        .api(
            "POST",
            "/v1/reserve",
            Some(json!({"topics": ["shop"], "max": 3})),
        )
        .await
        .json();
    assert_eq!(got["jobs"].as_array().unwrap().len(), 2, "the limit holds");
    let doc = a.get(page).await.doc();
    let counts = cells(&doc, "counts");
    assert!(!counts.is_empty());
    let form = doc
        .select(&scraper::Selector::parse("#rate_limit").unwrap())
        .next()
        .unwrap();
    assert_eq!(form.value().attr("value"), Some("2"));
    let r = a
        .submit(
            page,
            "/admin/topics/shop/settings",
            &[("rate_limit", ""), ("mode", "pull")],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text);
    assert!(cfg().await.get("rate_limit").is_none(), "emptied: removed");
    // The per-key limits: set, shown, refused when out of range, emptied.
    let r = a
        .submit(
            page,
            "/admin/topics/shop/settings",
            &[
                ("key_concurrency", "3"),
                ("key_rate_limit", "5"),
                ("key_rate_per", "1s"),
                ("mode", "pull"),
            ],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text);
    let c = cfg().await;
    assert_eq!(c["key_concurrency"], json!(3));
    assert_eq!(
        c["key_rate_limit"],
        json!({"limit": 5, "per_ms": 1000, "burst": 5})
    );
    let doc = a.get(page).await.doc();
    let value = |sel: &str| {
        doc.select(&scraper::Selector::parse(sel).unwrap())
            .next()
            .unwrap()
            .value()
            .attr("value")
            .map(str::to_string)
    };
    assert_eq!(value("#key_concurrency").as_deref(), Some("3"));
    assert_eq!(value("#key_rate_per").as_deref(), Some("1s"));
    let r = a
        .submit(
            page,
            "/admin/topics/shop/settings",
            &[("key_concurrency", "0"), ("mode", "pull")],
        )
        .await;
    assert!(r.text.contains("invalid_key_concurrency"), "{}", r.text);
    assert_eq!(
        cfg().await["key_concurrency"],
        json!(3),
        "refused: unchanged"
    );
    let r = a
        .submit(page, "/admin/topics/shop/settings", &[("mode", "pull")])
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text);
    let c = cfg().await;
    assert!(
        c.get("key_concurrency").is_none() && c.get("key_rate_limit").is_none(),
        "{c}"
    );
}

/// Deleting a topic from its page asks first (nothing changes until
/// "yes"), then the topic and its jobs are gone and the overview says so.
#[tokio::test]
async fn delete_a_topic_from_its_page_after_confirming() {
    let a = embedded();
    let r = a
        .api(
            "POST",
            "/v1/topics/shop/jobs",
            Some(json!({"id": "j", "delay_ms": 60000})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    let page = "/admin/topics/shop";
    let r = a.submit(page, "/admin/topics/shop/delete", &[]).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let doc = r.doc();
    assert_eq!(
        text_of(&doc, "#question").unwrap(),
        "Delete topic shop and its 1 job(s) for good? Reserved jobs' holders will find them gone."
    );
    assert_eq!(
        a.api("GET", "/v1/topics/shop", None).await.status,
        StatusCode::OK,
        "asked only"
    );
    // The confirm form posts the same fields again with confirm=yes.
    let r = a
        .submit(page, "/admin/topics/shop/delete", &[("confirm", "yes")])
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text);
    assert_eq!(r.location(), "/?done=deleted&n=1");
    assert_eq!(
        a.api("GET", "/v1/topics/shop", None).await.status,
        StatusCode::NOT_FOUND
    );
    let doc = a.get("/?done=deleted&n=1").await.doc();
    assert_eq!(
        text_of(&doc, "#flash").unwrap(),
        "Topic deleted, with its 1 job(s)."
    );
    // An unknown topic: 404, nothing asked.
    let r = a.submit("/", "/admin/topics/nosuch/delete", &[]).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text);
}

#[tokio::test]
async fn schedules_page_lists_pauses_resumes_and_deletes_after_confirming() {
    let a = embedded();
    let r = a
        .api(
            "PUT",
            "/v1/schedules/nightly",
            Some(json!({"topic": "shop", "cron": "30 2 * * *", "timezone": "Europe/Berlin"})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    let page = "/admin/schedules";
    let doc = a.get(page).await.doc();
    let rows = cells(&doc, "schedules");
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0][0], "nightly");
    assert_eq!(rows[0][1], "shop");
    assert_eq!(rows[0][2], "At 02:30 (Europe/Berlin)");
    assert_eq!(rows[0][3], "Europe/Berlin");
    assert!(
        rows[0][4].contains("T02:30:00+0"),
        "next runs in the zone: {rows:?}"
    );
    assert_eq!(rows[0][6], "one");
    let r = a.submit(page, "/admin/schedules/nightly/pause", &[]).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text);
    let doc = a.get(r.location()).await.doc();
    assert!(
        text_of(&doc, "#flash")
            .unwrap()
            .starts_with("Schedule paused")
    );
    assert_eq!(cells(&doc, "schedules")[0][4], "paused");
    let v = a.api("GET", "/v1/schedules/nightly", None).await.json();
    assert_eq!(v["spec"]["paused"], true);
    let r = a.submit(page, "/admin/schedules/nightly/resume", &[]).await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text);
    let v = a.api("GET", "/v1/schedules/nightly", None).await.json();
    assert_eq!(v["spec"]["paused"], Value::Null, "not paused: left out");
    assert_eq!(v["next"].as_array().unwrap().len(), 5);
    // Delete asks first.
    let r = a.submit(page, "/admin/schedules/nightly/delete", &[]).await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    assert!(
        text_of(&r.doc(), "#question")
            .unwrap()
            .starts_with("Delete schedule nightly (At 02:30 (Europe/Berlin) on topic shop)?")
    );
    assert_eq!(
        a.api("GET", "/v1/schedules/nightly", None).await.status,
        StatusCode::OK
    );
    let r = a
        .submit(
            page,
            "/admin/schedules/nightly/delete",
            &[("confirm", "yes")],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text);
    assert_eq!(
        a.api("GET", "/v1/schedules/nightly", None).await.status,
        StatusCode::NOT_FOUND
    );
    let doc = a.get(page).await.doc();
    assert!(cells(&doc, "schedules").is_empty());
    // Unknown schedule or action: 404.
    let r = a.submit("/", "/admin/schedules/nosuch/pause", &[]).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text);
    let r = a.submit("/", "/admin/schedules/nightly/explode", &[]).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND, "{}", r.text);
}

/// Signs in with `secret` (the admin token or a key) and keeps the session.
async fn sign_in(a: &mut Admin, secret: &str) {
    let login = a.get("/admin/login").await;
    assert_eq!(login.status, StatusCode::OK, "{}", login.text);
    let csrf = csrf_of(&login.doc());
    let r = a
        .form(
            "/admin/login",
            &[("csrf", &csrf), ("token", secret), ("next", "/")],
        )
        .await;
    assert_eq!(r.location(), "/", "signed in");
    a.cookie = Some(r.set_cookie().split(';').next().unwrap().to_string());
}

/// With API keys, the page signs in with a key and shows only what its
/// scopes allow: a read-only key sees its topics and no form that changes
/// anything, a topic outside its scopes is refused, a manage key gets the
/// forms of its topic only, and a revoked key's session ends.
#[tokio::test]
async fn keys_sign_in_and_see_only_what_their_scopes_allow() {
    let mut a = embedded();
    a.peer = SocketAddr::from(REMOTE);
    for t in ["billing-eu", "orders"] {
        let r = a
            .api(
                "POST",
                &format!("/v1/topics/{t}/jobs"),
                Some(json!({"id": "j"})),
            )
            .await;
        assert_eq!(r.status, StatusCode::CREATED);
    }
    // The first key, from loopback (no admin_token).
    a.peer = SocketAddr::from(LOOPBACK);
    let admin = a
        .api(
            "POST",
            "/v1/keys",
            Some(json!({"name": "root", "scopes": ["admin"]})),
        )
        .await
        .json()["secret"]
        .as_str()
        .unwrap()
        .to_string();
    let make = |name: &'static str, scopes: Value| {
        let admin = admin.clone();
        let router = a.router();
        async move {
            let req = Request::builder()
                .method("POST")
                .uri("/v1/keys")
                .header(header::CONTENT_TYPE, "application/json")
                .header(header::AUTHORIZATION, format!("Bearer {admin}"))
                .body(Body::from(
                    json!({"name": name, "scopes": scopes}).to_string(),
                ))
                .unwrap();
            let r = dq_testkit::http::send(router, req).await;
            assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
            r.json()["secret"].as_str().unwrap().to_string()
        }
    };
    let reader = make("dash", json!(["read:billing-*"])).await;
    let manager = make("ops-billing", json!(["read:billing-*", "manage:billing-*"])).await;

    // Keys exist: even loopback must sign in now.
    let r = a.get("/").await;
    assert_eq!(r.status, StatusCode::SEE_OTHER);
    a.peer = SocketAddr::from(REMOTE);
    let login = a.get("/admin/login").await;
    let csrf = csrf_of(&login.doc());
    let r = a
        .form(
            "/admin/login",
            &[("csrf", &csrf), ("token", "dqk_wrong"), ("next", "/")],
        )
        .await;
    assert!(
        r.location().starts_with("/admin/login?failed=1"),
        "{}",
        r.location()
    );

    sign_in(&mut a, &reader).await;
    for page in ["/", "/admin/topics/billing-eu", "/admin/schedules"] {
        let r = a.get(page).await;
        assert_eq!(r.status, StatusCode::OK, "{page}: {}", r.text);
        let doc = r.doc();
        let changing: Vec<String> = doc
            .select(&scraper::Selector::parse("form[method=post]").unwrap())
            .filter_map(|f| f.value().attr("action").map(str::to_string))
            .filter(|action| action != "/admin/logout")
            .collect();
        assert!(
            changing.is_empty(),
            "{page} offers {changing:?} to a read-only key"
        );
        assert!(r.text.contains("signed in as dash"), "{page}");
    }
    let overview = a.get("/").await;
    assert!(
        overview.text.contains("billing-eu") && !overview.text.contains("orders"),
        "only readable topics"
    );
    let r = a.get("/admin/topics/orders").await;
    assert_eq!(r.status, StatusCode::FORBIDDEN);
    // Forms posted anyway are refused, and change nothing.
    let csrf = csrf_of(&a.get("/admin/topics/billing-eu").await.doc());
    let r = a
        .form(
            "/admin/topics/billing-eu/delete",
            &[("csrf", &csrf), ("confirm", "yes")],
        )
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.text);
    let r = a
        .form("/admin/topics", &[("csrf", &csrf), ("name", "billing-new")])
        .await;
    assert_eq!(r.status, StatusCode::FORBIDDEN, "{}", r.text);

    // A manage key gets its topic's forms, and they work.
    a.cookie = None;
    sign_in(&mut a, &manager).await;
    let page = a.get("/admin/topics/billing-eu").await;
    assert!(
        page.doc()
            .select(&scraper::Selector::parse("form#settings").unwrap())
            .next()
            .is_some()
    );
    let r = a
        .submit(
            "/admin/topics/billing-eu",
            "/admin/topics/billing-eu/pause",
            &[("for", "10m")],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text);
    let r = a
        .submit(
            "/admin/topics/billing-eu",
            "/admin/topics/orders/pause",
            &[("for", "10m")],
        )
        .await;
    assert_eq!(
        r.status,
        StatusCode::FORBIDDEN,
        "another topic's form is refused"
    );

    // Revoked: the session ends at once on this instance.
    let r = a
        .send(
            Request::builder()
                .method("DELETE")
                .uri("/v1/keys/ops-billing")
                .header(header::AUTHORIZATION, format!("Bearer {admin}")),
            Body::empty(),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let r = a.get("/admin/topics/billing-eu").await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "back to the login form");
}

/// The settings form says beside each setting where it comes from: the
/// default for the topic's delivery mode, or set (issue #56).
#[tokio::test]
async fn the_settings_form_says_where_each_setting_comes_from() {
    let a = embedded();
    let page = "/admin/topics/shop";
    let r = a
        .api(
            "PUT",
            "/v1/topics/shop",
            Some(json!({"lease_ms": 45_000, "retry": {"delays_ms": [60_000]}})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let from = |doc: &scraper::Html, name: &str| {
        doc.select(&scraper::Selector::parse(&format!("#settings #from-{name}")).unwrap())
            .next()
            .map(|e| e.text().collect::<String>())
            .unwrap_or_else(|| panic!("no source beside {name}"))
    };
    let doc = a.get(page).await.doc();
    assert_eq!(from(&doc, "lease_ms"), "set");
    assert_eq!(from(&doc, "retry"), "set");
    assert_eq!(from(&doc, "max_attempts"), "default (pull)");
    assert_eq!(from(&doc, "expires_ms"), "default (pull)");

    // Turned to push: the attempts and waits dq gives a delivered topic
    // are that mode's defaults; the waits set before stay set.
    let r = a
        .api(
            "PUT",
            "/v1/topics/shop",
            Some(json!({"delivery": {"mode": "push", "url": "http://127.0.0.1:9/hook"}})),
        )
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text);
    let sources = r.json()["config_sources"].clone();
    assert_eq!(
        (
            &sources["max_attempts"],
            &sources["retry"],
            &sources["delivery"]
        ),
        (&json!("default"), &json!("set"), &json!("set")),
        "{}",
        r.text
    );
    let got = a.api("GET", "/v1/topics/shop", None).await.json();
    assert_eq!(got["config_sources"], sources, "GET answers as PUT did");
    assert_eq!(got["config_sources"]["lease_ms"], json!("set"));
    assert_eq!(got["config"]["max_attempts"], json!(10));
    let doc = a.get(page).await.doc();
    assert_eq!(from(&doc, "max_attempts"), "default (push)");
    assert_eq!(from(&doc, "retry"), "set");
}

/// Expiry on the topic page (issue #51): the settings form sets the
/// topic's `expires_ms` (in the CLI's units) and `on_expiry`, shows them
/// back, and an emptied field removes the expiry; a job's details show
/// when it expires; the counts name leases that expired and jobs that
/// expired apart.
#[tokio::test]
async fn expiry_settings_and_a_jobs_expiry_on_the_topic_page() {
    let a = embedded();
    let page = "/admin/topics/shop";
    let r = a
        .api(
            "POST",
            "/v1/topics/shop/jobs",
            Some(json!({"id": "soon", "body": 1, "expires_in_ms": 3_600_000})),
        )
        .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.text);
    let cfg = || async { a.api("GET", "/v1/topics/shop", None).await.json()["config"].clone() };
    let r = a
        .submit(
            page,
            "/admin/topics/shop/settings",
            &[("expires", "10m"), ("on_expiry", "drop"), ("mode", "pull")],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text);
    let c = cfg().await;
    assert_eq!(
        (&c["expires_ms"], &c["on_expiry"]),
        (&json!(600_000), &json!("drop"))
    );
    let doc = a.get(page).await.doc();
    let value = |id: &str| {
        doc.select(&scraper::Selector::parse(&format!("#settings #{id}")).unwrap())
            .next()
            .and_then(|e| e.value().attr("value").map(str::to_string))
    };
    assert_eq!(value("expires").as_deref(), Some("10m"));
    let selected = doc
        .select(&scraper::Selector::parse("#on_expiry option[selected]").unwrap())
        .next()
        .and_then(|e| e.value().attr("value").map(str::to_string));
    assert_eq!(selected.as_deref(), Some("drop"));
    let heads: Vec<String> = doc
        .select(&scraper::Selector::parse("table#counts th").unwrap())
        .map(|c| c.text().collect::<String>().trim().to_string())
        .collect();
    assert!(
        heads.iter().any(|c| c == "leases expired") && heads.iter().any(|c| c == "jobs expired"),
        "{heads:?}"
    );
    for (bad, code) in [("soon", "invalid_config"), ("3651d", "invalid_expiry")] {
        let r = a
            .submit(
                page,
                "/admin/topics/shop/settings",
                &[("expires", bad), ("on_expiry", "dead"), ("mode", "pull")],
            )
            .await;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{bad}");
        assert!(r.text.contains(code), "{}", r.text);
    }
    assert_eq!(cfg().await["expires_ms"], json!(600_000), "refused: kept");
    let r = a
        .submit(
            page,
            "/admin/topics/shop/settings",
            &[("expires", ""), ("on_expiry", "dead"), ("mode", "pull")],
        )
        .await;
    assert_eq!(r.status, StatusCode::SEE_OTHER, "{}", r.text);
    let c = cfg().await;
    assert_eq!(
        (&c["expires_ms"], &c["on_expiry"]),
        (&json!(0), &json!("dead"))
    );

    let doc = a.get("/admin/topics/shop?job=soon").await.doc();
    let details = cells(&doc, "job");
    assert!(
        details
            .iter()
            .any(|r| r.first().map(String::as_str) == Some("expires")
                && r.get(1)
                    .is_some_and(|v| v.contains("(in ") && v.contains(" min)"))),
        "{details:?}"
    );
}
