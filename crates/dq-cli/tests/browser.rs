//! The admin page in a real browser: headless Chromium driven over WebDriver
//! (Debian's `chromium` + `chromium-driver`; `.ci/run` installs them, and
//! this test installs them itself with apt-get when run as root without
//! them). It registers a topic and edits its settings through the page (in
//! the CLI's units, read back as typed), enqueues jobs through the API, sees
//! the counts change, checks that the overview and the topic page fit 1280
//! px and a 390 px phone without the page scrolling sideways, lists the
//! scheduled, ready and reserved jobs (a reserved one with its attempt and
//! lease deadline), opens a job's details (its body indented), finds the
//! chart, opens a dead letter and replays it, and saves screenshots of the
//! overview, the topic page, a job and the overview on a phone (into
//! `$DQ_SCREENSHOTS` when set, e.g. `docs/img`, else into the test's temp
//! dir).

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};

mod support;
use support::Dq;

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// The W3C WebDriver key of an element reference.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A chromedriver process and one browser session.
struct Browser {
    driver: Child,
    http: reqwest::Client,
    session: String,
}

impl Drop for Browser {
    fn drop(&mut self) {
        // chromedriver's Chromium processes share its process group: end
        // them all, or every run leaves a browser behind.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.driver.id())])
            .status();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

impl Browser {
    async fn start(profile: &Path) -> Browser {
        let port = dq_testkit::free_port();
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let http = reqwest::Client::new();
        let base = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(r) = http.get(format!("{base}/status")).send().await
                && r.status().is_success()
            {
                break;
            }
            assert!(Instant::now() < deadline, "chromedriver did not start");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": CHROMIUM,
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                    "--disable-gpu", "--window-size=1280,1000",
                    format!("--user-data-dir={}", profile.display()),
                ]
            }
        }}});
        let v: Value = http
            .post(format!("{base}/session"))
            .json(&caps)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let session = v["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no WebDriver session: {v}"))
            .to_string();
        Browser {
            driver,
            http,
            session: format!("{base}/session/{session}"),
        }
    }

    async fn cmd(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let mut req = self.http.request(method, format!("{}{path}", self.session));
        if let Some(b) = body {
            req = req.json(&b);
        }
        let v: Value = req.send().await.unwrap().json().await.unwrap();
        assert!(v["value"]["error"].is_null(), "WebDriver {path}: {v}");
        v["value"].clone()
    }

    async fn go(&self, url: &str) {
        self.cmd(reqwest::Method::POST, "/url", Some(json!({ "url": url })))
            .await;
    }

    async fn url(&self) -> String {
        self.cmd(reqwest::Method::GET, "/url", None)
            .await
            .as_str()
            .unwrap()
            .to_string()
    }

    async fn find(&self, css: &str) -> String {
        let v = self
            .cmd(
                reqwest::Method::POST,
                "/element",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await;
        v[ELEMENT].as_str().unwrap().to_string()
    }

    async fn script(&self, script: &str) -> Value {
        self.cmd(
            reqwest::Method::POST,
            "/execute/sync",
            Some(json!({"script": script, "args": []})),
        )
        .await
    }

    /// Clicks something that loads a new page, and waits for that page.
    async fn click(&self, css: &str) {
        self.script("window.dqOldPage = true").await;
        let e = self.find(css).await;
        self.cmd(
            reqwest::Method::POST,
            &format!("/element/{e}/click"),
            Some(json!({})),
        )
        .await;
        let deadline = Instant::now() + Duration::from_secs(10);
        while self
            .script("return window.dqOldPage === true || document.readyState !== 'complete'")
            .await
            != json!(false)
        {
            assert!(
                Instant::now() < deadline,
                "no new page after clicking {css}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn clear_and_type(&self, css: &str, text: &str) {
        let e = self.find(css).await;
        self.cmd(
            reqwest::Method::POST,
            &format!("/element/{e}/clear"),
            Some(json!({})),
        )
        .await;
        self.cmd(
            reqwest::Method::POST,
            &format!("/element/{e}/value"),
            Some(json!({ "text": text })),
        )
        .await;
    }

    async fn text(&self, css: &str) -> String {
        let e = self.find(css).await;
        self.cmd(reqwest::Method::GET, &format!("/element/{e}/text"), None)
            .await
            .as_str()
            .unwrap()
            .to_string()
    }

    /// The cells of a table's body rows.
    async fn rows(&self, table: &str) -> Vec<Vec<String>> {
        let script = format!(
            "return [...document.querySelectorAll('table#{table} tbody tr')].map(r => [...r.children].map(c => c.textContent.trim()))"
        );
        serde_json::from_value(self.script(&script).await).unwrap()
    }

    /// Sets the window's size (headless: the viewport's).
    async fn resize(&self, width: u32, height: u32) {
        self.cmd(
            reqwest::Method::POST,
            "/window/rect",
            Some(json!({"width": width, "height": height})),
        )
        .await;
    }

    /// The page's width and the viewport's (the page scrolls sideways when
    /// the first is larger).
    async fn widths(&self) -> (u64, u64) {
        let v = self
            .script("const e = document.documentElement; return [e.scrollWidth, e.clientWidth]")
            .await;
        (v[0].as_u64().unwrap(), v[1].as_u64().unwrap())
    }

    /// Asserts the page at hand does not scroll sideways at `width` px.
    async fn fits(&self, width: u64, what: &str) {
        let (page, viewport) = self.widths().await;
        assert!(
            viewport <= width && viewport + 40 >= width,
            "{what}: the viewport is {viewport} px, not about {width}"
        );
        if page > viewport {
            let wide = self
                .script(
                    "const w = document.documentElement.clientWidth; return [...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > w + 1 && !e.closest('.scroll')).slice(0, 8).map(e => e.tagName + (e.id ? '#' + e.id : '') + ' ' + Math.round(e.getBoundingClientRect().right))",
                )
                .await;
            panic!(
                "{what}: the page is {page} px wide in a {viewport} px viewport; too wide: {wide}"
            );
        }
    }

    async fn value(&self, css: &str) -> String {
        let v = self
            .script(&format!("return document.querySelector('{css}').value"))
            .await;
        v.as_str().unwrap().to_string()
    }

    /// The pictures are for the docs: the store's line names the test's
    /// temp dir, which would mean nothing there (and go stale); show a
    /// typical data dir instead.
    async fn hide_temp_paths(&self) {
        self.script(
            "for (const td of document.querySelectorAll('#stores td')) td.textContent = td.textContent.replace(/data in \\S+/, 'data in /var/lib/dq')",
        )
        .await;
    }

    async fn screenshot(&self, to: &Path) {
        let v = self.cmd(reqwest::Method::GET, "/screenshot", None).await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(v.as_str().unwrap())
            .unwrap();
        assert!(png.starts_with(b"\x89PNG"));
        std::fs::write(to, png).unwrap();
    }
}

fn screenshot_dir(tmp: &Path) -> PathBuf {
    match std::env::var_os("DQ_SCREENSHOTS") {
        Some(d) => {
            // Relative to the workspace root, where `cargo test` is run.
            let d = PathBuf::from(d);
            let d = if d.is_relative() {
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(d)
            } else {
                d
            };
            std::fs::create_dir_all(&d).unwrap();
            d
        }
        None => tmp.to_path_buf(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_page_in_headless_chromium() {
    support::ensure_package(CHROMEDRIVER, &["chromium", "chromium-driver"]);
    support::ensure_package(CHROMIUM, &["chromium", "chromium-driver"]);
    let tmp = tempfile::tempdir().unwrap();
    let dq = Dq::start_embedded(&tmp.path().join("data")).await;
    let b = Browser::start(&tmp.path().join("profile")).await;
    let shots = screenshot_dir(tmp.path());

    // Register a topic from the page.
    b.go(&format!("{}/", dq.base)).await;
    assert!(b.text("#auth-notice").await.contains("loopback"));
    b.clear_and_type("#register #name", "orders").await;
    b.click("#register button").await;
    assert!(
        b.url().await.ends_with("/admin/topics/orders?done=created"),
        "{}",
        b.url().await
    );
    assert_eq!(b.text("#flash").await, "Topic registered.");

    // Edit its settings: one attempt, so a failure is a dead letter; the
    // lease and the retry waits in the CLI's units, read back as typed.
    b.resize(1280, 1000).await;
    b.clear_and_type("#settings #max_attempts", "1").await;
    b.clear_and_type("#settings #lease", "45s").await;
    b.clear_and_type("#settings #retry", "1m,3m,5m").await;
    b.click("#settings button").await;
    assert_eq!(b.text("#flash").await, "Settings saved.");
    let (_, v, _) = dq
        .call(reqwest::Method::GET, "/v1/topics/orders", None)
        .await;
    assert_eq!(v["config"]["max_attempts"], json!(1));
    assert_eq!(v["config"]["lease_ms"], json!(45_000));
    assert_eq!(
        v["config"]["retry"],
        json!({"delays_ms": [60_000, 180_000, 300_000]})
    );
    assert_eq!(b.value("#settings #retry").await, "1m,3m,5m");
    assert_eq!(b.value("#settings #lease").await, "45s");

    // Jobs come in through the API; the overview's counts follow.
    let mut jobs = Vec::new();
    for i in 1..=6 {
        jobs.push(
            json!({"id": format!("order-{i}"), "body": {"order": i, "action": "close-unpaid"}}),
        );
    }
    for i in 7..=9 {
        jobs.push(json!({"id": format!("order-{i}"), "body": {"order": i}, "delay_ms": 1_800_000}));
    }
    let (s, v) = dq
        .post("/v1/topics/orders/jobs:batch", json!({ "jobs": jobs }))
        .await;
    assert_eq!(s, 200, "{v}");
    dq.post(
        "/v1/topics/reminders/jobs",
        json!({"id": "member-42", "delay_ms": 3 * 86_400_000u64}),
    )
    .await;
    b.go(&format!("{}/", dq.base)).await;
    let rows = b.rows("topics").await;
    let orders = rows.iter().find(|r| r[0] == "orders").expect("orders row");
    assert_eq!(orders[1..6], ["pull", "3", "6", "0", "0"].map(String::from));

    // A consumer takes one and gives up on it: a dead letter.
    let (_, v) = dq
        .post("/v1/reserve", json!({"topics": ["orders"], "max": 2}))
        .await;
    let dead_id = v["jobs"][0]["id"].as_str().unwrap().to_string();
    dq.post(
        &format!("/v1/topics/orders/jobs/{dead_id}/nack"),
        json!({"token": v["jobs"][0]["token"], "error": "payment gateway timed out after 30 s"}),
    )
    .await;
    b.go(&format!("{}/", dq.base)).await;
    let rows = b.rows("topics").await;
    let orders = rows.iter().find(|r| r[0] == "orders").unwrap();
    assert_eq!(orders[1..6], ["pull", "3", "4", "1", "1"].map(String::from));
    b.fits(1280, "the overview").await;
    b.hide_temp_paths().await;
    b.screenshot(&shots.join("admin-overview.png")).await;

    // The figures refresh every 5 s, not the page: a name half typed into
    // the register form stays while a new job shows in the counts.
    b.clear_and_type("#register #name", "half-typ").await;
    b.script("window.dqOldPage = true").await;
    dq.post(
        "/v1/topics/reminders/jobs",
        json!({"id": "member-43", "delay_ms": 3 * 86_400_000u64}),
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let rows = b.rows("topics").await;
        let reminders = rows.iter().find(|r| r[0] == "reminders").unwrap();
        if reminders[2] == "2" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the counts never refreshed: {reminders:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        b.script("return window.dqOldPage === true").await,
        json!(true),
        "the page reloaded"
    );
    assert_eq!(b.value("#register #name").await, "half-typ");

    // Open the dead letter from the topic page and replay it.
    b.click("table#topics a[href='/admin/topics/orders']").await;
    let dead = b.rows("dead").await;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0][1], dead_id);
    assert_eq!(dead[0][4], "payment gateway timed out after 30 s");
    assert_eq!(b.rows("jobs").await.len(), 3, "the three delayed jobs");
    b.fits(1280, "the topic page").await;
    let chart = b
        .script("const c = document.querySelector('svg#chart'); return c !== null && c.getBoundingClientRect().width > 100")
        .await;
    assert_eq!(chart, json!(true), "the chart is drawn");

    // The state lists: the job still held, with its attempt and lease
    // deadline; the ready ones.
    b.click("#tab-reserved").await;
    let reserved = b.rows("jobs").await;
    assert_eq!(reserved.len(), 1, "{reserved:?}");
    assert_ne!(reserved[0][0], dead_id);
    assert_eq!(reserved[0][2], "1 of 1", "attempt of max attempts");
    assert!(
        reserved[0][1].starts_with("in "),
        "lease deadline: {reserved:?}"
    );
    b.click("#tab-ready").await;
    let ready = b.rows("jobs").await;
    assert_eq!(ready.len(), 4, "{ready:?}");
    assert!(ready.iter().all(|r| r[2] == "0 of 1"), "{ready:?}");
    b.resize(1280, 2000).await;
    b.screenshot(&shots.join("admin-topic.png")).await;
    b.resize(1280, 1000).await;

    // A job's details: its body indented, the limits in the CLI's units.
    let first = ready[0][0].clone();
    b.click(&format!("table#jobs a[href*='job={first}#']"))
        .await;
    let body = b.text("#job-body").await;
    let n: u32 = first.trim_start_matches("order-").parse().unwrap();
    assert_eq!(
        body,
        format!("{{\n  \"action\": \"close-unpaid\",\n  \"order\": {n}\n}}"),
        "indented, keys in the order sent (serde_json's map sorts them)"
    );
    let limits = b.text("#job-limits").await;
    assert!(
        limits.starts_with("max attempts 1 · lease 45s · retry 1m,3m,5m"),
        "{limits}"
    );
    b.fits(1280, "a job's page").await;
    b.screenshot(&shots.join("admin-job.png")).await;

    // A phone: nothing scrolls sideways but the tables, in their own box.
    b.resize(390, 844).await;
    b.go(&format!("{}/", dq.base)).await;
    b.fits(390, "the overview on a phone").await;
    b.hide_temp_paths().await;
    b.screenshot(&shots.join("admin-phone.png")).await;
    b.go(&format!("{}/admin/topics/orders", dq.base)).await;
    b.fits(390, "the topic page on a phone").await;
    b.resize(1280, 1000).await;

    b.go(&format!("{}/admin/topics/orders", dq.base)).await;
    b.click("table#dead a").await;
    assert_eq!(
        b.rows("job").await[1],
        ["state", "dead"].map(String::from),
        "the lookup shows the dead letter"
    );
    b.click("#replay-one button").await;
    assert!(b.text("#question").await.contains(&dead_id));
    b.click("#confirm button").await;
    assert!(
        b.text("#flash")
            .await
            .starts_with("1 dead letter(s) replayed")
    );
    assert!(b.rows("dead").await.is_empty());
    let (_, v, _) = dq
        .call(
            reqwest::Method::GET,
            &format!("/v1/topics/orders/jobs/{dead_id}"),
            None,
        )
        .await;
    assert_eq!(v["state"], json!("ready"), "{v}");
    assert_eq!(v["attempts"], json!(0));

    // With API keys the page asks for one; a read-only key sees its topics
    // and no form that changes anything.
    let (st, admin) = dq
        .post("/v1/keys", json!({"name": "root", "scopes": ["admin"]}))
        .await;
    assert_eq!(st, 201, "{admin}");
    let r = dq
        .http
        .post(format!("{}/v1/keys", dq.base))
        .bearer_auth(admin["secret"].as_str().unwrap())
        .json(&json!({"name": "dashboard", "scopes": ["read:orders"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let reader: Value = r.json().await.unwrap();
    b.go(&format!("{}/admin/topics/orders", dq.base)).await;
    assert!(b.url().await.contains("/admin/login"), "{}", b.url().await);
    b.clear_and_type("#token", reader["secret"].as_str().unwrap())
        .await;
    b.click("#login button").await;
    assert!(
        b.url().await.ends_with("/admin/topics/orders"),
        "{}",
        b.url().await
    );
    for page in ["/admin/topics/orders", "/", "/admin/schedules"] {
        b.go(&format!("{}{page}", dq.base)).await;
        let changing = b
            .script(
                "return [...document.querySelectorAll('form')].filter(f => f.method === 'post' && !f.action.endsWith('/admin/logout')).length",
            )
            .await;
        assert_eq!(
            changing,
            json!(0),
            "{page} offers a change to a read-only key"
        );
    }
    b.go(&format!("{}/", dq.base)).await;
    let rows = b.rows("topics").await;
    assert_eq!(rows.len(), 1, "only the topic it may read: {rows:?}");
    assert_eq!(rows[0][0], "orders");
}
