//! beanstalkd client libraries' own test suites, unmodified, against the
//! reference (Debian's beanstalkd 1.12) and against `dq serve --beanstalkd`
//! on both stores; dq must give every test the outcome the reference gives
//! it:
//!
//! - fivebeans 1.5.0 (npm): its `test/` directory, run with the mocha and
//!   must its package.json names, once per server. One of its tests fails
//!   on any server under today's Node (it expects an error code by name).
//!   It connects to 127.0.0.1:11300 (its client's default port, which it
//!   also asserts), so the servers take that port in turn.
//! - nodestalker 0.1.22 (npm): each `tests/test_*.js` on a fresh server, as
//!   its README runs them against a real one (`BEANSTALKD=1`, the port in
//!   `BEANSTALK_PORT`). They are written for the mock server they bring;
//!   those that wait for a reply only the mock sends do not finish on the
//!   reference either (stopped after a few seconds) and are not run on dq.
//!
//! The packages and test tools are fetched from npm once, into
//! `~/.cache/dq-client-suites/` (outside the clone, like CI's target
//! directory).

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use dq_testkit::{RedisServer, free_port};
use support::Dq;

/// The port fivebeans's suite connects to.
const PORT: u16 = 11300;
/// fivebeans's devDependencies that its suite runs with (the others lint
/// and measure coverage).
const FIVEBEANS_TOOLS: &[&str] = &["mocha@3.0.2", "must@0.13.2"];

/// Runs `program args` in `dir`; panics with its output when it fails.
fn run(dir: &Path, program: &str, args: &[&str]) {
    let out = Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("run {program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An npm package (`name@version`) unpacked with its dependencies and the
/// test tools `tools`: fetched once, then kept.
fn npm_package(name: &str, version: &str, tools: &[&str]) -> PathBuf {
    let home = std::env::var("HOME").expect("HOME");
    let root = PathBuf::from(home).join(format!(".cache/dq-client-suites/{name}-{version}"));
    let pkg = root.join("package");
    let done = pkg.join(".dq-ready");
    if done.exists() {
        return pkg;
    }
    eprintln!("fetching {name}@{version} and its test tools from npm (once)");
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    run(&root, "npm", &["pack", "-q", &format!("{name}@{version}")]);
    run(&root, "tar", &["xzf", &format!("{name}-{version}.tgz")]);
    let quiet = ["--no-audit", "--no-fund", "--loglevel", "error"];
    let mut deps = vec!["install", "--omit=dev"];
    deps.extend(quiet);
    run(&pkg, "npm", &deps);
    if !tools.is_empty() {
        let mut more = vec!["install", "--no-save"];
        more.extend(quiet);
        more.extend(tools);
        run(&pkg, "npm", &more);
    }
    std::fs::write(&done, "").unwrap();
    pkg
}

/// Each test's full title and its outcome (`passed`, `failed`, `pending`).
type Outcomes = BTreeMap<String, &'static str>;

/// Runs fivebeans's suite against whatever listens on [`PORT`].
fn run_mocha(pkg: &Path) -> Outcomes {
    let out = Command::new(pkg.join("node_modules/.bin/mocha"))
        .args(["-t", "8000", "-R", "json", "test/"])
        .current_dir(pkg)
        .stdin(Stdio::null())
        .output()
        .expect("run mocha");
    let stdout = String::from_utf8_lossy(&out.stdout);
    // The report is the JSON document mocha prints last.
    let start = stdout.find("{\n").unwrap_or_else(|| {
        panic!(
            "no report from mocha:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let report: serde_json::Value = serde_json::from_str(&stdout[start..])
        .unwrap_or_else(|e| panic!("mocha's report: {e}\n{stdout}"));
    let mut outcomes = Outcomes::new();
    for (list, outcome) in [
        ("passes", "passed"),
        ("failures", "failed"),
        ("pending", "pending"),
    ] {
        for t in report[list].as_array().expect("a list of tests") {
            let title = t["fullTitle"].as_str().expect("a title").to_string();
            outcomes.insert(title, outcome);
        }
    }
    outcomes
}

/// A server under test, stopped when dropped.
enum Server {
    Reference(Child),
    Dq(#[allow(dead_code)] Dq),
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Server::Reference(child) = self {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// What a suite runs against: the reference, or `dq serve` on a store.
enum Target<'a> {
    Reference,
    Embedded(&'a Path),
    Redis(&'a RedisServer),
}

impl Target<'_> {
    fn name(&self) -> &'static str {
        match self {
            Target::Reference => "beanstalkd",
            Target::Embedded(_) => "dq (embedded)",
            Target::Redis(_) => "dq (redis)",
        }
    }

    /// A fresh server listening on `port` (an empty data directory, the
    /// Redis flushed).
    async fn start(&self, port: u16) -> Server {
        let mut server = match self {
            Target::Reference => {
                support::ensure_package("/usr/bin/beanstalkd", &["beanstalkd"]);
                Server::Reference(
                    Command::new("/usr/bin/beanstalkd")
                        .args(["-l", "127.0.0.1", "-p", &port.to_string()])
                        .stdin(Stdio::null())
                        .spawn()
                        .expect("spawn beanstalkd"),
                )
            }
            Target::Embedded(dir) => {
                let data = tempfile::tempdir_in(dir).unwrap().keep();
                self.dq(port, &["--data-dir", data.to_str().unwrap()]).await
            }
            Target::Redis(redis) => {
                let ok = Command::new("redis-cli")
                    .args(["-p", &redis.port().to_string(), "flushall"])
                    .stdout(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success());
                assert!(ok, "redis-cli flushall");
                self.dq(port, &["--redis", &redis.url()]).await
            }
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let child = match &mut server {
                Server::Reference(child) => child,
                Server::Dq(dq) => &mut dq.child,
            };
            assert!(
                child.try_wait().unwrap().is_none(),
                "{} exited: is 127.0.0.1:{port} taken by another process?",
                self.name()
            );
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return server;
            }
            assert!(Instant::now() < deadline, "nothing listens on {port}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn dq(&self, port: u16, store_args: &[&str]) -> Server {
        let listen = format!("127.0.0.1:{port}");
        let mut args = store_args.to_vec();
        args.extend(["--beanstalkd", listen.as_str()]);
        let dq = Dq::try_start_env(&[], &args)
            .await
            .unwrap_or_else(|| panic!("dq serve could not start: is {listen} taken?"));
        Server::Dq(dq)
    }
}

/// Where `got` gives a test another outcome than `want`, a line each.
fn differences(want: &Outcomes, got: &Outcomes) -> Vec<String> {
    let mut titles: Vec<&String> = want.keys().chain(got.keys()).collect();
    titles.sort();
    titles.dedup();
    titles
        .into_iter()
        .filter_map(|t| {
            let (w, g) = (want.get(t), got.get(t));
            (w != g).then(|| {
                let or_none = |o: Option<&&'static str>| o.copied().unwrap_or("not run");
                format!("{t}: beanstalkd {}, dq {}", or_none(w), or_none(g))
            })
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fivebeans_own_suite_gives_the_same_outcomes_on_dq_as_on_beanstalkd() {
    let pkg = tokio::task::block_in_place(|| npm_package("fivebeans", "1.5.0", FIVEBEANS_TOOLS));
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start();
    let targets = [
        Target::Reference,
        Target::Embedded(dir.path()),
        Target::Redis(&redis),
    ];
    let mut runs = Vec::new();
    for target in &targets {
        let _server = target.start(PORT).await;
        runs.push(tokio::task::block_in_place(|| run_mocha(&pkg)));
    }
    let want = &runs[0];
    let passed = want.values().filter(|o| **o == "passed").count();
    assert!(
        passed >= 50,
        "the suite passes only {passed} tests on the reference: {want:?}"
    );
    let mut failures = Vec::new();
    for (target, got) in targets.iter().zip(&runs).skip(1) {
        let diff = differences(want, got);
        eprintln!(
            "fivebeans on {}: {} of {} tests as on beanstalkd ({passed} pass there)",
            target.name(),
            want.len() - diff.len(),
            want.len()
        );
        failures.extend(diff.into_iter().map(|d| format!("{}: {d}", target.name())));
    }
    assert!(
        failures.is_empty(),
        "fivebeans's suite differs:\n{}",
        failures.join("\n")
    );
}

/// How long a nodestalker test may run: those that pass finish in well
/// under a second.
const NODESTALKER_WAIT: Duration = Duration::from_secs(4);

/// Runs one of nodestalker's test files against a server on `port`:
/// passed when it exits 0 having printed "test passed", else failed
/// (stopped after [`NODESTALKER_WAIT`]).
fn run_node_test(pkg: &Path, file: &str, port: u16) -> &'static str {
    let mut child = Command::new("node")
        .arg(format!("tests/{file}"))
        .current_dir(pkg)
        .env("BEANSTALKD", "1")
        .env("BEANSTALK_PORT", port.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("run node");
    let deadline = Instant::now() + NODESTALKER_WAIT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut out = String::new();
    let _ = std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut out);
    match status {
        Some(s) if s.success() && out.lines().any(|l| l.trim() == "test passed") => "passed",
        _ => "failed",
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodestalker_own_tests_pass_on_dq_as_on_beanstalkd() {
    let pkg = tokio::task::block_in_place(|| npm_package("nodestalker", "0.1.22", &[]));
    let mut files: Vec<String> = std::fs::read_dir(pkg.join("tests"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|f| f.starts_with("test_") && f.ends_with(".js"))
        .collect();
    files.sort();
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start();
    let mut want = Outcomes::new();
    for file in &files {
        let port = free_port();
        let _server = Target::Reference.start(port).await;
        let outcome = tokio::task::block_in_place(|| run_node_test(&pkg, file, port));
        want.insert(file.clone(), outcome);
    }
    let passing: Vec<&String> = files.iter().filter(|f| want[*f] == "passed").collect();
    assert!(
        passing.len() >= 15,
        "only {} of nodestalker's tests pass on the reference: {want:?}",
        passing.len()
    );
    eprintln!(
        "nodestalker: {} of {} tests pass on beanstalkd; not run on dq (they wait for the mock): {:?}",
        passing.len(),
        files.len(),
        files
            .iter()
            .filter(|f| want[*f] != "passed")
            .collect::<Vec<_>>()
    );
    let mut failures = Vec::new();
    for target in [Target::Embedded(dir.path()), Target::Redis(&redis)] {
        for file in &passing {
            let port = free_port();
            let _server = target.start(port).await;
            let outcome = tokio::task::block_in_place(|| run_node_test(&pkg, file, port));
            if outcome != "passed" {
                failures.push(format!("{}: {file} {outcome}", target.name()));
            }
        }
        eprintln!(
            "nodestalker on {}: ran {} tests",
            target.name(),
            passing.len()
        );
    }
    assert!(
        failures.is_empty(),
        "nodestalker's tests that pass on beanstalkd do not on dq:\n{}",
        failures.join("\n")
    );
}
