//! Private `redis-server` processes for tests.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// A `redis-server` on a free loopback port with its own data directory,
/// killed when dropped.
#[derive(Debug)]
pub struct RedisServer {
    port: u16,
    child: Option<Child>,
    dir: TempDir,
    aof: bool,
    extra: Vec<String>,
    password: Option<String>,
}

impl RedisServer {
    /// Starts a server that keeps nothing on disk.
    pub fn start() -> Self {
        Self::start_with(false, None)
    }

    /// Starts a server that requires `password` (`requirepass`).
    pub fn start_with_password(password: &str) -> Self {
        Self::start_with(false, Some(password.to_string()))
    }

    /// Starts a server with an append-only file fsynced on every write
    /// (`appendfsync always`), so a restart keeps every acknowledged write.
    pub fn start_durable() -> Self {
        Self::start_with(true, None)
    }

    /// Starts a server with extra `redis-server` arguments (e.g. cluster mode).
    pub fn start_with_args(args: &[&str]) -> Self {
        Self::start_inner(false, None, args.iter().map(|a| a.to_string()).collect())
    }

    fn start_with(aof: bool, password: Option<String>) -> Self {
        let extra = password
            .iter()
            .flat_map(|p| ["--requirepass".to_string(), p.clone()])
            .collect();
        Self::start_inner(aof, password, extra)
    }

    fn start_inner(aof: bool, password: Option<String>, extra: Vec<String>) -> Self {
        // A fresh machine: the README's test command installs Redis itself.
        if !on_path("redis-server") || !on_path("redis-cli") {
            crate::ensure_package("/usr/bin/redis-cli", &["redis-server", "redis-tools"]);
            crate::ensure_package("/usr/bin/redis-server", &["redis-server", "redis-tools"]);
        }
        let mut last_err = String::new();
        // A free port can be taken by someone else before redis binds it: retry.
        for _ in 0..5 {
            // A cluster node also listens on port + 10000 (its bus).
            let cluster = extra.iter().any(|a| a == "--cluster-enabled");
            let port = if cluster {
                crate::free_port_pair(10_000)
            } else {
                crate::free_port()
            };
            let mut s = Self {
                port,
                child: None,
                dir: tempfile::tempdir().expect("temp dir"),
                aof,
                extra: extra.clone(),
                password: password.clone(),
            };
            match s.spawn() {
                Ok(()) => return s,
                Err(e) => last_err = e,
            }
        }
        panic!("cannot start redis-server: {last_err}");
    }

    fn spawn(&mut self) -> Result<(), String> {
        let mut cmd = Command::new("redis-server");
        cmd.arg("--port")
            .arg(self.port.to_string())
            .arg("--bind")
            .arg("127.0.0.1")
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--save")
            .arg("")
            .arg("--logfile")
            .arg(self.dir.path().join("redis.log"));
        cmd.args(&self.extra);
        if self.aof {
            cmd.args(["--appendonly", "yes", "--appendfsync", "always"]);
        } else {
            cmd.args(["--appendonly", "no"]);
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                format!(
                    "redis-server not runnable ({e}); install it (apt-get install redis-server)"
                )
            })?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                self.child = None;
                return Err(format!("redis-server exited at start: {status}"));
            }
            if self.ping() {
                // Another test's server may hold the port (it took it between
                // free_port and this spawn, and this one failed to bind): the
                // one answering must be this child.
                let pid = self.child.as_ref().map(std::process::Child::id);
                if self.process_id().is_some() && self.process_id() == pid {
                    return Ok(());
                }
                if let Some(mut c) = self.child.take() {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                return Err(format!("port {} is another redis-server's", self.port));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Err("redis-server did not answer PING within 10 s".into())
    }

    /// The `process_id` of the server answering on this port.
    fn process_id(&self) -> Option<u32> {
        let info: String = ::redis::Client::open(self.url())
            .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(200)))
            .and_then(|mut c| ::redis::cmd("INFO").arg("server").query(&mut c))
            .ok()?;
        info.lines()
            .find_map(|l| l.strip_prefix("process_id:"))
            .and_then(|v| v.trim().parse().ok())
    }

    fn ping(&self) -> bool {
        ::redis::Client::open(self.url())
            .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(200)))
            .and_then(|mut c| ::redis::cmd("PING").query::<String>(&mut c))
            .is_ok()
    }

    /// `redis://127.0.0.1:<port>` (with the password, if any).
    pub fn url(&self) -> String {
        match &self.password {
            Some(p) => format!("redis://:{p}@127.0.0.1:{}", self.port),
            None => format!("redis://127.0.0.1:{}", self.port),
        }
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The data directory.
    pub fn dir(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }

    /// Whether the process is running (not stopped).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Freezes the server (SIGSTOP): its sockets stay open and nothing is
    /// answered on any of them, as for a node cut off by the network from
    /// its clients and, in a Cluster, from the other nodes (a proxy in
    /// front of a Cluster node would not do: clients follow the addresses
    /// the Cluster announces, and nodes talk on a port of their own).
    /// [`RedisServer::thaw`] resumes it.
    pub fn freeze(&self) {
        self.signal("-STOP");
    }

    /// Resumes a server [`RedisServer::freeze`] froze (SIGCONT).
    pub fn thaw(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, sig: &str) {
        let pid = self.child.as_ref().expect("a running server").id();
        let ok = std::process::Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill {sig} {pid}");
    }

    /// Kills the server (SIGKILL); its data directory stays.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts the server again on the same port and directory (an AOF server
    /// reloads its data).
    pub fn restart(&mut self) {
        self.stop();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.spawn() {
                Ok(()) => return,
                Err(e) if Instant::now() > deadline => panic!("cannot restart redis-server: {e}"),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// A plain synchronous connection, for tests that inspect the keyspace.
    pub fn connection(&self) -> ::redis::Connection {
        ::redis::Client::open(self.url())
            .and_then(|c| c.get_connection())
            .expect("connect to test redis")
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Whether an executable `name` is in a directory of `PATH`.
fn on_path(name: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(name).is_file()))
}
