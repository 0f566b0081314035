//! The client packages in other languages (`clients/{php,python,node,go}`),
//! each tested by its own runner — phpunit, pytest, `node --test`,
//! `go test` — against the `dq serve` binary built here, on the embedded
//! store and on a private `redis-server` (each suite starts and stops its
//! own `dq serve` processes from `DQ_BIN`, on both stores when
//! `DQ_TEST_REDIS_URL` is set; see each `clients/<lang>/README.md`).
//!
//! The runners are installed when missing, as the rest of the suite does:
//! Debian's `phpunit`, `php-curl` and `golang-go` with apt-get (as root),
//! pytest from PyPI into a venv under the target directory, the TypeScript
//! compiler from the npm registry (`npm ci`). One suite runs at a time,
//! also when a runner starts each test in its own process (nextest): a lock
//! on a file in the temp directory. Each is timing-heavy (jobs due over 2 s,
//! leases, a server restart) and the machine may have two cores.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use dq_testkit::{RedisServer, ensure_package, ensure_package_for};

static ONE_SUITE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// This process's turn among the processes running these suites: an
/// exclusive lock on one file, held until the value is dropped.
fn turn_among_processes() -> std::fs::File {
    let path = std::env::temp_dir().join("dq-client-suites.lock");
    let file =
        std::fs::File::create(&path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    file.lock()
        .unwrap_or_else(|e| panic!("lock {}: {e}", path.display()));
    file
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs `cmd` (a language's test runner) with the binary and a private
/// Redis, and fails with everything it printed unless it succeeds.
fn run_suite(name: &str, mut cmd: Command) {
    let _turn = ONE_SUITE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let _process_turn = turn_among_processes();
    let redis = RedisServer::start();
    let out = cmd
        .env("DQ_BIN", env!("CARGO_BIN_EXE_dq"))
        .env("DQ_TEST_REDIS_URL", redis.url())
        .output()
        .unwrap_or_else(|e| panic!("{name}: cannot start the runner: {e}"));
    let said = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{name} suite failed:\n{said}");
    // The last lines carry the runner's totals: shown with --nocapture.
    let tail: Vec<&str> = said.trim_end().lines().rev().take(4).collect();
    eprintln!(
        "{name}: {}",
        tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
    );
}

fn succeeds(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn php_client_and_prefork_worker() {
    ensure_package("/usr/bin/phpunit", &["phpunit", "php-cli"]);
    ensure_package_for(
        "PHP's curl extension",
        || succeeds("php", &["-r", "exit(extension_loaded('curl') ? 0 : 1);"]),
        &["php-curl"],
    );
    let mut cmd = Command::new("phpunit");
    cmd.args(["--configuration", "clients/php/phpunit.xml"])
        .current_dir(repo_root());
    run_suite("php", cmd);
}

#[test]
fn python_client_and_worker() {
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("clients-python-venv");
    let python = venv.join("bin/python");
    if !python.exists() {
        assert!(
            succeeds("python3", &["-m", "venv", venv.to_str().unwrap()]),
            "python3 -m venv failed (Debian: apt-get install python3-venv)"
        );
    }
    // The package as a user installs it, fresh each run; pytest and mypy
    // (its test checks the package's types with --strict) once.
    let pip = |args: &[&str]| {
        let ok = Command::new(&python)
            .args(["-m", "pip", "install", "-q", "--disable-pip-version-check"])
            .args(args)
            .current_dir(repo_root())
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "pip install {args:?} failed");
    };
    pip(&["pytest", "mypy"]);
    pip(&["--force-reinstall", "--no-deps", "./clients/python"]);
    let mut cmd = Command::new(&python);
    cmd.args([
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "clients/python/tests",
    ])
    .current_dir(repo_root());
    run_suite("python", cmd);
}

#[test]
fn typescript_client_and_worker() {
    let dir = repo_root().join("clients/node");
    let ok = Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
        .current_dir(&dir)
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "npm ci in clients/node failed");
    let mut cmd = Command::new("npm");
    cmd.args(["test"]).current_dir(&dir);
    run_suite("node", cmd);
}

#[test]
fn go_client_and_worker() {
    ensure_package("/usr/bin/go", &["golang-go"]);
    let mut cmd = Command::new("go");
    cmd.args(["test", "-count=1", "./..."])
        .current_dir(repo_root().join("clients/go"));
    run_suite("go", cmd);
}
