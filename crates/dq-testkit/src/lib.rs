//! dq-testkit: what dq's tests stand on.
//!
//! - [`redis`]: starts private `redis-server` processes on free loopback ports
//!   (never the shared 6379), stops them on drop.
//! - [`postgres`]: private PostgreSQL servers (`initdb` into a temp dir,
//!   `postgres` on a free loopback port), one shared per test process with a
//!   fresh database per test; never the machine's cluster on 5432.
//! - [`cluster`]: a Redis Cluster of such servers (`redis-cli --cluster create`).
//! - [`proxy`]: a loopback TCP proxy a test can partition ([`TcpProxy`]:
//!   `blackhole()` silences it without closing a socket, `resume()`).
//! - [`conformance`]: the Store contract as `pub async fn` scenarios, and the
//!   [`conformance_tests!`] macro that instantiates all of them for a store.
//! - [`http`]: the harness of the router tests (requests through an
//!   `axum::Router`, replies as JSON or text, error bodies checked, metrics
//!   parsed), and the [`router_tests!`] macro that runs each such test on the
//!   embedded store and on the sharded Redis store.

pub mod cluster;
pub mod conformance;
pub mod http;
pub mod otlp;
pub mod postgres;
pub mod proxy;
pub mod redis;

pub use cluster::RedisCluster;
pub use postgres::PgServer;
pub use proxy::TcpProxy;
pub use redis::RedisServer;

/// Installs Debian `packages` with apt-get when `bin` is missing (as
/// `.ci/run` does), so that `cargo test` alone works on a fresh machine when
/// run as root. Tests of one binary that need it at once install it once
/// (the others wait); another process's apt-get is waited for (dpkg's
/// lock); package lists never fetched (a fresh image) are fetched and the
/// install tried again. Panics, naming the command, when `bin` is still
/// missing.
pub fn ensure_package(bin: &str, packages: &[&str]) {
    ensure_package_for(bin, || std::path::Path::new(bin).exists(), packages);
}

/// [`ensure_package`] for what is not a file: installs `packages` when
/// `present()` says no; `what` names it in the panic.
pub fn ensure_package_for(what: &str, present: impl Fn() -> bool, packages: &[&str]) {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    if present() {
        return;
    }
    let _turn = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if present() {
        return;
    }
    let apt = |args: &[&str]| {
        std::process::Command::new("apt-get")
            .args(["-q", "-o", "DPkg::Lock::Timeout=600"])
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
            .is_ok_and(|s| s.success())
    };
    eprintln!("installing {packages:?} with apt-get (once)");
    let mut install = vec!["install", "-y"];
    install.extend_from_slice(packages);
    if !apt(&install) && !present() {
        apt(&["update"]);
        apt(&install);
    }
    assert!(
        present(),
        "this test needs {what}: apt-get install {} (as root)",
        packages.join(" ")
    );
}

/// A free TCP port on 127.0.0.1 (bound, read, released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("cannot bind a loopback port")
}

/// A free port `p` on 127.0.0.1 with `p + offset` free too (a Redis Cluster
/// node's bus listens on port + 10000, so `p` stays below 65536 - offset).
pub fn free_port_pair(offset: u16) -> u16 {
    loop {
        let p = free_port();
        if let Some(q) = p.checked_add(offset)
            && std::net::TcpListener::bind(("127.0.0.1", q)).is_ok()
        {
            return p;
        }
    }
}
