//! Private PostgreSQL servers for tests: `initdb` into a temp dir and
//! `postgres` on a free loopback port (its unix socket in the same dir),
//! never the machine's own cluster on 5432.
//!
//! Debian's binaries live in `/usr/lib/postgresql/<version>/bin`; when none
//! is there, Debian's `postgresql` package is installed (as
//! [`crate::ensure_package`] does for Redis). As root, the server runs as
//! the `postgres` user the package creates (PostgreSQL refuses to run as
//! root), through `setpriv`, which also asks the kernel to kill the server
//! when the thread that started it ends: a test process that dies leaves no
//! server behind.
//!
//! Tests share one server per test process ([`PgServer::shared`]) and each
//! takes a database of its own ([`PgServer::fresh_database`]), so they run
//! in parallel without seeing each other's tables.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// A `postgres` server on a free loopback port with its own data directory,
/// stopped (and its directory removed) when dropped.
#[derive(Debug)]
pub struct PgServer {
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
    bin: PathBuf,
    as_postgres: bool,
}

/// Where each test process keeps its servers' directories: a name with its
/// pid, so a later process can remove the directories of one that died.
const DIR_PREFIX: &str = "dq-pg-";

impl PgServer {
    /// Starts a new server (initdb, then postgres), for a test that stops or
    /// restarts it; tests that only need a database use [`PgServer::shared`].
    pub fn start() -> Self {
        let bin = bin_dir();
        let as_postgres = is_root();
        remove_stale_dirs();
        let dir = new_dir(as_postgres);
        let out = command(&bin, "initdb", as_postgres)
            .args(["-D"])
            .arg(dir.join("data"))
            .args([
                "-U",
                "postgres",
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
            ])
            .current_dir(&dir)
            .stdin(Stdio::null())
            .output()
            .expect("run initdb");
        if !out.status.success() {
            let _ = std::fs::remove_dir_all(&dir);
            panic!(
                "initdb failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let mut last_err = String::new();
        // A free port can be taken by someone else before postgres binds it: retry.
        for _ in 0..5 {
            let mut s = Self {
                port: crate::free_port(),
                dir: dir.clone(),
                child: None,
                bin: bin.clone(),
                as_postgres,
            };
            match s.spawn() {
                Ok(()) => return s,
                Err(e) => {
                    last_err = e;
                    // Forget the child without removing the directory.
                    s.child = None;
                    std::mem::forget(s);
                }
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        panic!("cannot start postgres: {last_err}");
    }

    /// The server every test of this process shares, started at the first
    /// call. It runs until the process ends (the kernel then kills it; the
    /// next test process removes its directory).
    pub fn shared() -> &'static PgServer {
        static SHARED: std::sync::OnceLock<PgServer> = std::sync::OnceLock::new();
        SHARED.get_or_init(|| {
            // Started from a thread that lives as long as the process: the
            // server's death signal follows the thread that spawned it, and a
            // test's thread ends with the test.
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::Builder::new()
                .name("dq-testkit-postgres".into())
                .spawn(move || {
                    let s = PgServer::start();
                    tx.send(s).expect("send the server");
                    loop {
                        std::thread::park();
                    }
                })
                .expect("spawn the postgres thread");
            rx.recv().expect("postgres started")
        })
    }

    fn spawn(&mut self) -> Result<(), String> {
        let data = self.dir.join("data");
        let log = std::fs::File::create(self.dir.join("postgres.log"))
            .map_err(|e| format!("log file: {e}"))?;
        if self.as_postgres {
            chown_postgres(&self.dir.join("postgres.log"));
        }
        let child = command(&self.bin, "postgres", self.as_postgres)
            .arg("-D")
            .arg(&data)
            .args(["-p", &self.port.to_string()])
            .args(["-c", "listen_addresses=127.0.0.1"])
            .arg("-c")
            .arg(format!("unix_socket_directories={}", self.dir.display()))
            // A test server: writes reach the OS but are never fsynced (a
            // restart keeps them, a machine crash would not); many connections (parallel
            // tests each hold a pool).
            .args(["-c", "fsync=off"])
            .args(["-c", "full_page_writes=off"])
            .args(["-c", "max_connections=400"])
            .args(["-c", "shared_buffers=64MB"])
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("postgres not runnable ({e})"))?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                self.child = None;
                let log =
                    std::fs::read_to_string(self.dir.join("postgres.log")).unwrap_or_default();
                return Err(format!("postgres exited at start: {status}: {log}"));
            }
            if self.ready() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        Err("postgres did not accept connections within 30 s".into())
    }

    /// Whether the server accepts connections (`pg_isready`).
    fn ready(&self) -> bool {
        Command::new(self.bin.join("pg_isready"))
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-q"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// The TCP port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The directory holding the unix socket (`.s.PGSQL.<port>`).
    pub fn socket_dir(&self) -> &Path {
        &self.dir
    }

    /// A URL for database `db` as the superuser `postgres`, over TCP.
    pub fn url_for(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// The URL of the `postgres` database.
    pub fn url(&self) -> String {
        self.url_for("postgres")
    }

    /// Runs `sql` with `psql` on database `db`; returns its output
    /// (unaligned, tuples only).
    ///
    /// # Panics
    /// When psql fails.
    pub fn psql(&self, db: &str, sql: &str) -> String {
        let out = Command::new(self.bin.join("psql"))
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"])
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-U", "postgres", "-d", db, "-c", sql])
            .stdin(Stdio::null())
            .output()
            .expect("run psql");
        assert!(
            out.status.success(),
            "psql {sql:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Starts `psql` running `sql` on database `db` in the background (a
    /// session of the test's own, e.g. one that holds a lock while it
    /// sleeps); the caller waits for or kills the child.
    ///
    /// # Panics
    /// When psql cannot be started.
    pub fn psql_spawn(&self, db: &str, sql: &str) -> Child {
        Command::new(self.bin.join("psql"))
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"])
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-U", "postgres", "-d", db, "-c", sql])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("run psql")
    }

    /// Creates a new empty database with a name no other call of this
    /// process gets (`<prefix>_<pid>_<n>`) and returns its URL.
    pub fn fresh_database(&self, prefix: &str) -> String {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let name: String = format!("{prefix}_{}_{n}", std::process::id())
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '_'
                }
            })
            .collect();
        // template0 with no connections: CREATE DATABASE never waits on another test's.
        self.psql(
            "postgres",
            &format!("CREATE DATABASE {name} TEMPLATE template0"),
        );
        self.url_for(&name)
    }

    /// Stops the server at once (`SIGQUIT`: immediate shutdown, as
    /// `pg_ctl stop -m immediate`), keeping its data.
    pub fn stop_immediate(&mut self) {
        if let Some(mut c) = self.child.take() {
            signal(&c, "QUIT");
            wait_or_kill(&mut c);
        }
    }

    /// Starts a stopped server again on the same port and data.
    ///
    /// # Panics
    /// When it cannot start.
    pub fn restart(&mut self) {
        self.stop_immediate();
        if let Err(e) = self.spawn() {
            panic!("cannot restart postgres: {e}");
        }
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // Fast shutdown: clients disconnected, no checkpoint wait.
            signal(&c, "INT");
            wait_or_kill(&mut c);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn signal(c: &Child, sig: &str) {
    let _ = Command::new("kill")
        .args([format!("-{sig}"), c.id().to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

fn wait_or_kill(c: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if c.try_wait().ok().flatten().is_some() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = c.kill();
    let _ = c.wait();
}

/// Debian's binaries of the newest installed PostgreSQL, installing the
/// `postgresql` package when there are none.
fn bin_dir() -> PathBuf {
    crate::ensure_package_for("PostgreSQL", || newest_bin_dir().is_some(), &["postgresql"]);
    newest_bin_dir().expect("PostgreSQL binaries in /usr/lib/postgresql/<version>/bin")
}

fn newest_bin_dir() -> Option<PathBuf> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .filter_map(|e| {
            let v: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("postgres").exists().then_some((v, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, b)| b)
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// `bin/name`, run as the `postgres` user when we are root, killed when
/// the spawning thread ends.
fn command(bin: &Path, name: &str, as_postgres: bool) -> Command {
    let mut c = Command::new("setpriv");
    if as_postgres {
        c.args([
            "--reuid=postgres",
            "--regid=postgres",
            "--init-groups",
            "--reset-env",
        ]);
    }
    c.args(["--pdeathsig", "KILL", "--"]);
    c.arg(bin.join(name));
    c
}

fn chown_postgres(p: &Path) {
    let _ = Command::new("chown")
        .arg("postgres:postgres")
        .arg(p)
        .status();
}

/// A new directory for one server, owned by the user that runs it.
fn new_dir(as_postgres: bool) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("{DIR_PREFIX}{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the server's directory");
    if as_postgres {
        chown_postgres(&dir);
    }
    dir
}

/// Removes the directories of test processes that are gone.
fn remove_stale_dirs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(DIR_PREFIX)) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server answers on its own port, gives each caller a database of its
    /// own, stops when dropped (its port refuses, its directory is gone) and
    /// keeps its data across an immediate stop and restart.
    #[test]
    fn starts_answers_restarts_and_stops() {
        let mut s = PgServer::start();
        assert_ne!(s.port(), 5432);
        assert!(
            s.socket_dir()
                .join(format!(".s.PGSQL.{}", s.port()))
                .exists()
        );
        let a = s.fresh_database("t");
        let b = s.fresh_database("t");
        assert_ne!(a, b);
        let db = a.rsplit('/').next().unwrap().to_string();
        s.psql(
            &db,
            "CREATE TABLE kept (v int); INSERT INTO kept VALUES (7)",
        );
        s.restart();
        assert_eq!(s.psql(&db, "SELECT v FROM kept").trim(), "7");
        let (port, dir) = (s.port(), s.dir.clone());
        drop(s);
        assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
        assert!(!dir.exists());
    }
}
