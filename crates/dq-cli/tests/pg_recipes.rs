//! The order-timeout recipes of docs/postgres.md (`examples/postgres/`,
//! shown verbatim in the doc — checked here), run as an application would
//! against `dq serve --postgres` on a private PostgreSQL, connected as a
//! login role granted `dq_enqueue` (the doc's grants, run as written):
//!
//! - `place` (the order and its timeout in one committed transaction): the
//!   timeout is handed out by dq's HTTP `reserve` at its due time, never in
//!   a reply that came back before it;
//! - `place-and-fail` (rolled back after the enqueue): neither the order nor
//!   the timeout exists, and nothing is ever handed out for it;
//! - `place` then `pay` (paid and cancelled in one transaction): the order
//!   is paid and its timeout never handed out.
//!
//! The PHP (PDO, pdo_pgsql), Python (psycopg 3) and Node (pg) recipes each
//! run. Missing pieces are installed: Debian's `php-cli` and `php-pgsql`
//! (as root), psycopg from PyPI into a venv under the target directory, and
//! pg from the npm registry into a directory under the target directory
//! (never into the clone).

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use dq_testkit::{PgServer, ensure_package, ensure_package_for};
use serde_json::json;
use support::Dq;

const RECIPES: [&str; 3] = ["order_timeout.php", "order_timeout.py", "order_timeout.mjs"];

/// The grants docs/postgres.md gives for the application's role, as
/// written there ("A role that may only enqueue").
const ROLE_SQL: &str = "CREATE ROLE dq_enqueue NOLOGIN;
GRANT USAGE ON SCHEMA dq TO dq_enqueue;
GRANT EXECUTE ON FUNCTION
  dq.enqueue(text, text, jsonb, interval, timestamptz, bigint, text, interval),
  dq.cancel(text, text),
  dq.reschedule(text, text, timestamptz)
  TO dq_enqueue;
GRANT dq_enqueue TO app;     -- the application's login role";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn recipe(name: &str) -> (PathBuf, String) {
    let path = repo_root().join("examples/postgres").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
    (path, text)
}

fn doc() -> String {
    std::fs::read_to_string(repo_root().join("docs/postgres.md")).unwrap()
}

#[test]
fn the_doc_shows_the_recipes_and_the_grants_as_they_are() {
    let doc = doc();
    for name in RECIPES {
        let (_, text) = recipe(name);
        assert!(
            doc.contains(&text),
            "docs/postgres.md does not show examples/postgres/{name} as it is"
        );
    }
    assert!(
        doc.contains(ROLE_SQL),
        "docs/postgres.md's grants are not the ones this test runs"
    );
}

fn succeeds(program: &Path, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
}

/// How to run each recipe: the program and the file it is given.
fn runners() -> Vec<(&'static str, PathBuf, PathBuf)> {
    ensure_package("/usr/bin/php", &["php-cli"]);
    ensure_package_for(
        "PHP's pdo_pgsql extension",
        || {
            succeeds(
                Path::new("php"),
                &["-r", "exit(extension_loaded('pdo_pgsql') ? 0 : 1);"],
            )
        },
        &["php-pgsql"],
    );
    ensure_package("/usr/bin/node", &["nodejs", "npm"]);
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));

    // psycopg 3 in a venv of its own (it uses the libpq of the PostgreSQL
    // the test server needs).
    let venv = tmp.join("pg-recipes-venv");
    let python = venv.join("bin/python");
    if !succeeds(&python, &["-c", "import psycopg"]) {
        if !python.exists() {
            assert!(
                succeeds(
                    Path::new("python3"),
                    &["-m", "venv", venv.to_str().unwrap()]
                ),
                "python3 -m venv failed (Debian: apt-get install python3-venv)"
            );
        }
        assert!(
            succeeds(
                &python,
                &[
                    "-m",
                    "pip",
                    "install",
                    "-q",
                    "--disable-pip-version-check",
                    "psycopg"
                ]
            ),
            "pip install psycopg failed"
        );
    }

    // pg beside a copy of the Node recipe: an ES module finds its imports
    // in the node_modules of its own directory (NODE_PATH does not apply).
    let node_dir = tmp.join("pg-recipes-node");
    if !node_dir.join("node_modules/pg/package.json").exists() {
        std::fs::create_dir_all(&node_dir).unwrap();
        let ok = Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--loglevel=error"])
            .args(["--prefix", node_dir.to_str().unwrap(), "pg@8"])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "npm install pg failed");
    }
    let (_, mjs) = recipe("order_timeout.mjs");
    let node_copy = node_dir.join("order_timeout.mjs");
    std::fs::write(&node_copy, mjs).unwrap();

    vec![
        ("php", "php".into(), recipe("order_timeout.php").0),
        ("python", python, recipe("order_timeout.py").0),
        ("node", "node".into(), node_copy),
    ]
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Runs one recipe verb as the application; its standard output.
fn run(lang: &str, program: &Path, file: &Path, database_url: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .arg(file)
        .args(args)
        .env("DATABASE_URL", database_url)
        .output()
        .unwrap_or_else(|e| panic!("{lang}: cannot run {}: {e}", program.display()));
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(
        out.status.success(),
        "{lang} {args:?} failed: {stdout}{stderr}"
    );
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recipes_commit_roll_back_and_cancel_the_timeout_with_the_order() {
    let runners = runners();
    let pg = PgServer::shared();
    let url = pg.fresh_database("recipes");
    let db = url.rsplit('/').next().unwrap().to_string();
    // dq creates its schema at start; the application's role then gets the
    // doc's grants, and a place for its own orders table.
    let dq = Dq::start_with(&["--postgres", &url]).await;
    // Roles belong to the whole server, which this process's tests share.
    pg.psql(
        &db,
        "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'app') THEN CREATE ROLE app LOGIN; END IF; END $$",
    );
    pg.psql(&db, ROLE_SQL);
    pg.psql(&db, "GRANT CREATE ON SCHEMA public TO app");
    let app_url = format!("postgres://app@127.0.0.1:{}/{db}", pg.port());

    for (n, (lang, program, file)) in runners.iter().enumerate() {
        let base = 100 * (n + 1);
        let (placed, paid, failed) = (base + 1, base + 2, base + 3);
        let run = |args: &[&str]| run(lang, program, file, &app_url, args);
        let started_ms = now_ms();
        // The two that must never come are due first: had either been
        // written, a reserve would hand it out before the placed one.
        let said = run(&["place", &paid.to_string(), "1"]);
        assert!(
            said.contains(&format!("placed order {paid}")),
            "{lang}: {said}"
        );
        let said = run(&["place-and-fail", &failed.to_string(), "1"]);
        assert!(
            said.contains(&format!("order {failed} not placed")),
            "{lang}: {said}"
        );
        let said = run(&["pay", &paid.to_string()]);
        // Scheduled, or ready when the machine took over a second to get
        // here; never handed out yet (nothing reserved so far).
        assert!(
            ["scheduled", "ready"]
                .iter()
                .any(|state| said.contains(&format!(
                    "paid order {paid}; close-order-{paid} cancelled (it was {state})"
                ))),
            "{lang}: {said}"
        );
        let said = run(&["pay", &paid.to_string()]);
        assert!(
            said.contains("is not unpaid"),
            "{lang}: paying twice: {said}"
        );
        let said = run(&["place", &placed.to_string(), "2"]);
        assert!(
            said.contains(&format!(
                "placed order {placed}; close-order-{placed} due at"
            )),
            "{lang}: {said}"
        );

        // Take what dq hands out until the placed order's timeout comes.
        let deadline = Instant::now() + Duration::from_secs(60);
        let (job, handed_ms) = loop {
            assert!(
                Instant::now() < deadline,
                "{lang}: close-order-{placed} not handed out within 60 s"
            );
            let (s, v) = dq
                .post(
                    "/v1/reserve",
                    json!({"topics": ["orders"], "max": 10, "wait_ms": 500, "lease_ms": 60_000}),
                )
                .await;
            let replied_ms = now_ms();
            assert_eq!(s, 200, "{lang}: {v}");
            let jobs = v["jobs"].as_array().unwrap();
            if jobs.is_empty() {
                continue;
            }
            assert_eq!(
                jobs.len(),
                1,
                "{lang}: only the committed order's timeout is handed out: {v}"
            );
            break (jobs[0].clone(), replied_ms);
        };
        assert_eq!(job["id"], format!("close-order-{placed}"), "{lang}: {job}");
        assert_eq!(job["body"], json!({"order": placed}), "{lang}: {job}");
        let due = job["due_at_ms"].as_u64().unwrap();
        assert!(
            due >= started_ms + 2000,
            "{lang}: due {due}, at least 2 s after {started_ms}"
        );
        // Never early: dq decides by the database's clock, this machine's.
        assert!(
            handed_ms >= due,
            "{lang}: handed out by {handed_ms}, before its due time {due}"
        );
        let (s, v) = dq.ack("orders", &job).await;
        assert!((200..300).contains(&s), "{lang}: {s} {v}");

        for gone in [paid, failed] {
            let (s, v) = dq
                .get(&format!("/v1/topics/orders/jobs/close-order-{gone}"))
                .await;
            assert_eq!(s, 404, "{lang}: close-order-{gone}: {v}");
        }
        let rows = pg.psql(
            &db,
            &format!(
                "SELECT id || ' ' || status FROM orders WHERE id BETWEEN {base} AND {} ORDER BY id",
                base + 99
            ),
        );
        assert_eq!(
            rows.lines().collect::<Vec<_>>(),
            [format!("{placed} unpaid"), format!("{paid} paid")],
            "{lang}: the order rolled back is not there"
        );
    }

    // Each recipe enqueued two timeouts (the rolled-back one never
    // counted), cancelled one, and dq handed out the third alone.
    let (_, t) = dq.get("/v1/topics/orders").await;
    let c = &t["stats"]["counters"];
    assert_eq!(
        (
            c["enqueued"].as_u64(),
            c["cancelled"].as_u64(),
            c["acked"].as_u64()
        ),
        (Some(6), Some(3), Some(3)),
        "{t}"
    );
    let (s, v) = dq
        .post(
            "/v1/reserve",
            json!({"topics": ["orders"], "max": 10, "wait_ms": 0}),
        )
        .await;
    assert_eq!(
        (s, v["jobs"].as_array().map(Vec::len)),
        (200, Some(0)),
        "{v}"
    );
}
