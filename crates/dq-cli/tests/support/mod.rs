//! Shared by the binary's test files: a `dq serve` child process.

#![allow(dead_code)]

pub(crate) mod beanstalk;
pub(crate) mod load;
pub(crate) mod pg;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use dq_testkit::free_port;
use serde_json::{Value, json};

/// Kills the process with this pid when dropped, so a test that fails
/// half-way leaves no `dq serve` behind.
pub(crate) struct KillOnDrop(pub(crate) u32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", &self.0.to_string()])
            .stderr(Stdio::null())
            .status();
    }
}

/// Waits (up to 20 s) until the `dq serve` at `base` answers `/readyz` with 200.
pub(crate) async fn wait_ready(http: &reqwest::Client, base: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ready(http, base).await {
        assert!(Instant::now() < deadline, "dq serve did not become ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Whether the `dq serve` at `base` answers `/readyz` with 200 now.
async fn ready(http: &reqwest::Client, base: &str) -> bool {
    http.get(format!("{base}/readyz"))
        .send()
        .await
        .is_ok_and(|r| r.status().is_success())
}

#[allow(unused_imports)] // not every test file installs a package
pub(crate) use dq_testkit::ensure_package;

/// Installs a Python package from PyPI when `python3` cannot import it
/// (as the machine's pip allows: root, or a user site).
pub(crate) fn ensure_python_module(module: &str, package: &str) {
    let importable = || {
        Command::new("python3")
            .args(["-c", &format!("import {module}")])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if importable() {
        return;
    }
    eprintln!("installing {package} with pip (once)");
    let _ = Command::new("python3")
        .args(["-m", "pip", "install", "-q", package])
        .status();
    assert!(
        importable(),
        "this test needs the Python package {package}: python3 -m pip install {package}"
    );
}

/// A `dq serve` child process.
pub(crate) struct Dq {
    pub(crate) child: Child,
    pub(crate) base: String,
    pub(crate) http: reqwest::Client,
    port: u16,
    store_args: Vec<String>,
    env: Vec<(String, String)>,
}

impl Dq {
    pub(crate) async fn start(redis_url: &str) -> Dq {
        Self::start_with(&["--redis", redis_url, "--redis-timeout", "1s"]).await
    }

    pub(crate) async fn start_embedded(dir: &std::path::Path) -> Dq {
        Self::start_with(&["--data-dir", dir.to_str().unwrap()]).await
    }

    pub(crate) async fn start_with(store_args: &[&str]) -> Dq {
        Self::start_env(&[], store_args).await
    }

    /// As [`Dq::start_with`], with extra environment variables (e.g.
    /// libfaketime's).
    pub(crate) async fn start_env(env: &[(&str, &str)], store_args: &[&str]) -> Dq {
        for _ in 0..5 {
            if let Some(dq) = Self::try_start_env(env, store_args).await {
                return dq;
            }
        }
        panic!("dq serve exited before it was ready, five times");
    }

    /// As [`Dq::start_env`], once: `None` when the process exits before it
    /// is ready. A port from [`free_port`] is free when picked, but another
    /// process may bind it before `dq serve` does (the test then picks
    /// again, with any port of its own in `store_args` picked again too).
    pub(crate) async fn try_start_env(env: &[(&str, &str)], store_args: &[&str]) -> Option<Dq> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let port = free_port();
        let store_args: Vec<String> = store_args.iter().map(|a| a.to_string()).collect();
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let dq = Dq {
            child: Self::spawn(port, &store_args, &env),
            base: format!("http://127.0.0.1:{port}"),
            http: reqwest::Client::builder()
                .pool_max_idle_per_host(64)
                .build()
                .unwrap(),
            port,
            store_args,
            env,
        };
        let mut dq = dq;
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if dq.child.try_wait().expect("dq serve's status").is_some() {
                eprintln!("dq serve on port {port} exited before it was ready");
                return None;
            }
            if ready(&dq.http, &dq.base).await {
                return Some(dq);
            }
            assert!(Instant::now() < deadline, "dq serve did not become ready");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn spawn(port: u16, store_args: &[String], env: &[(String, String)]) -> Child {
        Command::new(env!("CARGO_BIN_EXE_dq"))
            .envs(env.iter().map(|(k, v)| (k, v)))
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .args(store_args)
            .args(["--shutdown-grace", "3s", "--log-level", "warn"])
            .args(["--config", "/dev/null"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn dq")
    }

    /// Starts the process again (same port, same store) after [`Dq::kill9`],
    /// and waits until it is ready.
    pub(crate) async fn restart(&mut self) {
        self.kill9();
        self.child = Self::spawn(self.port, &self.store_args, &self.env);
        wait_ready(&self.http, &self.base).await;
    }

    /// The process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(crate) async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value, Option<String>) {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some(b) = body {
            req = req.json(&b);
        }
        match req.send().await {
            Ok(res) => {
                let status = res.status().as_u16();
                let retry_after = res
                    .headers()
                    .get("retry-after")
                    .map(|v| v.to_str().unwrap_or("").to_string());
                let v = res.json::<Value>().await.unwrap_or(Value::Null);
                (status, v, retry_after)
            }
            Err(e) => (0, json!({"transport": e.to_string()}), None),
        }
    }

    pub(crate) async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let (s, v, _) = self.call(reqwest::Method::POST, path, Some(body)).await;
        (s, v)
    }

    /// GET of `path`: status and JSON body.
    pub(crate) async fn get(&self, path: &str) -> (u16, Value) {
        let (s, v, _) = self.call(reqwest::Method::GET, path, None).await;
        (s, v)
    }

    /// DELETE of `path`: status and JSON body.
    pub(crate) async fn delete(&self, path: &str) -> (u16, Value) {
        let (s, v, _) = self.call(reqwest::Method::DELETE, path, None).await;
        (s, v)
    }

    /// Acks `job` (as a reserve handed it out) on `topic`.
    pub(crate) async fn ack(&self, topic: &str, job: &Value) -> (u16, Value) {
        let id = job["id"].as_str().expect("a job with an id");
        self.post(
            &format!("/v1/topics/{topic}/jobs/{id}/ack"),
            json!({"token": job["token"]}),
        )
        .await
    }

    /// GET of `path`, its body as text (not parsed).
    pub(crate) async fn get_text(&self, path: &str) -> String {
        self.http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    pub(crate) fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub(crate) fn sigterm(&self) {
        let ok = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok);
    }
}

impl Drop for Dq {
    fn drop(&mut self) {
        self.kill9();
    }
}
