//! The client subcommands: each is one or a few calls to the HTTP API of a
//! running `dq serve`, printed as a table (or raw JSON with `--json`).

use std::time::{Duration, UNIX_EPOCH};

use dq_core::Clock;

use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, Subcommand};
use comfy_table::Table;
use serde_json::{Value, json};

/// Where the server is and how to print.
#[derive(Debug, Args)]
pub(crate) struct Conn {
    /// Base URL of a running dq server
    #[arg(
        long,
        env = "DQ_SERVER",
        default_value = "http://127.0.0.1:7070",
        global = true
    )]
    server: String,
    /// The server's admin_token, sent as Authorization: Bearer (needed for changes when the server has one)
    #[arg(long, env = "DQ_TOKEN", hide_env_values = true, global = true)]
    token: Option<String>,
    /// Print the server's JSON instead of a table
    #[arg(long, global = true)]
    json: bool,
}

impl Conn {
    /// The JSON API client for this server and token.
    fn api(&self) -> Result<Api> {
        Api::new(&self.server, self.token.as_deref())
    }
}

#[derive(Debug, Subcommand)]
pub(crate) enum ClientCmd {
    /// Enqueue a job
    Push {
        #[command(flatten)]
        conn: Conn,
        topic: String,
        /// Job body: JSON text; anything that is not JSON is sent as a JSON string
        body: Option<String>,
        /// Job id (idempotency key) [default: generated]
        #[arg(long)]
        id: Option<String>,
        /// Delay, e.g. 30s, 15m, 3d
        #[arg(long, conflicts_with = "at")]
        delay: Option<String>,
        /// Due time, RFC 3339, e.g. 2026-12-01T09:00:00Z
        #[arg(long)]
        at: Option<String>,
        /// Priority, lower first [default: 1024]
        #[arg(long)]
        priority: Option<u32>,
        /// Attempts before the job goes dead [default: the topic's]
        #[arg(long)]
        max_attempts: Option<u32>,
        /// Replace an existing job with this id if it is still waiting
        #[arg(long)]
        replace: bool,
    },
    /// Show a job
    Get {
        #[command(flatten)]
        conn: Conn,
        topic: String,
        id: String,
    },
    /// Cancel a job (any state)
    Cancel {
        #[command(flatten)]
        conn: Conn,
        topic: String,
        id: String,
    },
    /// Move a waiting job to a new due time
    Reschedule {
        #[command(flatten)]
        conn: Conn,
        topic: String,
        id: String,
        /// New delay from now, e.g. 10m
        #[arg(long, conflicts_with = "at", required_unless_present = "at")]
        delay: Option<String>,
        /// New due time, RFC 3339
        #[arg(long)]
        at: Option<String>,
    },
    /// Counts per topic (all topics, or one with its settings)
    Stats {
        #[command(flatten)]
        conn: Conn,
        topic: Option<String>,
    },
    /// List, configure or delete topics
    Topics {
        #[command(flatten)]
        conn: Conn,
        #[command(subcommand)]
        cmd: Option<TopicsCmd>,
    },
    /// Dead letters: list, replay, purge
    Dead {
        #[command(flatten)]
        conn: Conn,
        #[command(subcommand)]
        cmd: DeadCmd,
    },
}

// Parsed once per run: the size of the biggest variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub(crate) enum TopicsCmd {
    /// List topics with their counts
    List,
    /// Create or update a topic's settings; settings not given keep their value
    Put {
        topic: String,
        /// Attempts before a job goes dead
        #[arg(long)]
        max_attempts: Option<u32>,
        /// Default lease, e.g. 30s
        #[arg(long)]
        lease: Option<String>,
        /// Dead letters kept
        #[arg(long)]
        dead_cap: Option<u64>,
        /// Delay of jobs enqueued without one, e.g. 30m
        #[arg(long)]
        default_delay: Option<String>,
        /// Retry waits: a list like 1m,3m,5m,7m; or exp:1s,2,1h (initial, factor, cap); or fixed:30s
        #[arg(long)]
        retry: Option<String>,
        /// Push delivery: dq calls this URL when each job is due
        #[arg(long, conflicts_with = "pull")]
        push_url: Option<String>,
        /// Push: HTTP method, POST or GET
        #[arg(long, requires = "push_url")]
        push_method: Option<String>,
        /// Push: request timeout, e.g. 3s
        #[arg(long, requires = "push_url")]
        push_timeout: Option<String>,
        /// Push: deliveries in flight at once
        #[arg(long, requires = "push_url")]
        push_concurrency: Option<u32>,
        /// Push: Standard Webhooks secret (whsec_…); repeat during a rotation
        #[arg(long, requires = "push_url")]
        push_secret: Vec<String>,
        /// Back to pull delivery (consumers reserve jobs)
        #[arg(long)]
        pull: bool,
        /// Split the topic into this many partitions (Redis; only while it holds no jobs)
        #[arg(long)]
        partitions: Option<u32>,
    },
    /// Delete a topic and all its jobs
    Delete { topic: String },
}

#[derive(Debug, Subcommand)]
pub(crate) enum DeadCmd {
    /// List dead letters, oldest first
    List {
        topic: String,
        #[arg(long, default_value_t = 100)]
        limit: usize,
        #[arg(long, default_value_t = 0)]
        offset: usize,
    },
    /// Make dead letters due now with fresh attempts (all, or the ids given)
    Replay { topic: String, ids: Vec<String> },
    /// Delete all dead letters of a topic
    Purge { topic: String },
}

fn ms(text: &str, what: &str) -> Result<u64> {
    Ok(humantime::parse_duration(text)
        .with_context(|| format!("{what}: {text:?} is not a duration like 30s, 15m, 3d"))?
        .as_millis() as u64)
}

fn at_ms(text: &str) -> Result<u64> {
    let t = humantime::parse_rfc3339_weak(text).with_context(|| {
        format!("--at: {text:?} is not an RFC 3339 time like 2026-12-01T09:00:00Z")
    })?;
    Ok(t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0))
}

fn rfc3339(ms: Option<u64>) -> String {
    match ms {
        Some(ms) if ms > 0 => {
            humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
        }
        _ => "-".into(),
    }
}

fn parse_retry(text: &str) -> Result<Value> {
    if let Some(rest) = text.strip_prefix("fixed:") {
        return Ok(json!({"fixed_ms": ms(rest, "--retry")?}));
    }
    if let Some(rest) = text.strip_prefix("exp:") {
        let parts: Vec<&str> = rest.split(',').collect();
        let [initial, factor, max] = parts.as_slice() else {
            bail!("--retry exp: needs initial,factor,cap like exp:1s,2,1h");
        };
        let factor: f64 = factor
            .parse()
            .context("--retry exp: factor is not a number")?;
        return Ok(json!({"exponential": {
            "initial_ms": ms(initial, "--retry")?, "factor": factor, "max_ms": ms(max, "--retry")?, "jitter": 0.1
        }}));
    }
    let list = text
        .split(',')
        .map(|d| ms(d.trim(), "--retry"))
        .collect::<Result<Vec<u64>>>()?;
    Ok(json!({ "delays_ms": list }))
}

/// A client of the HTTP API that works with raw JSON (the CLI prints what
/// the server says; `dq bench` measures it). Connections are pooled.
#[derive(Clone)]
pub(crate) struct Api {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
}

impl Api {
    pub(crate) fn new(server: &str, token: Option<&str>) -> Result<Self> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .pool_max_idle_per_host(64)
            .build()
            .context("cannot build HTTP client")?;
        Ok(Self {
            http,
            base: server.trim_end_matches('/').to_string(),
            token: token.map(str::to_string),
        })
    }

    /// `base/part/part…`, each part percent-encoded.
    fn url(&self, parts: &[&str]) -> String {
        let mut u = self.base.clone();
        for p in parts {
            u.push('/');
            u.push_str(&dq_client::encode_segment(p));
        }
        u
    }

    /// Sends a request; a non-2xx answer is an error naming its status, code and message.
    pub(crate) async fn call(
        &self,
        method: reqwest::Method,
        url: String,
        body: Option<&Value>,
    ) -> Result<Value> {
        let mut req = self.http.request(method, &url);
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(b);
        }
        let res = req
            .send()
            .await
            .with_context(|| format!("cannot reach dq at {}", self.base))?;
        let status = res.status();
        let text = res.text().await.context("reading the reply")?;
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        if status.is_success() {
            return Ok(v);
        }
        let code = v["error"]["code"].as_str().unwrap_or("http_error");
        let msg = v["error"]["message"].as_str().unwrap_or("");
        Err(anyhow!("{} {code}: {msg}", status.as_u16()))
    }

    /// POST to a path under the base (path segments already safe).
    pub(crate) async fn post(&self, path: &str, body: &Value) -> Result<Value> {
        let url = format!("{}{path}", self.base);
        self.call(reqwest::Method::POST, url, Some(body)).await
    }

    /// PUT to a path under the base.
    pub(crate) async fn put(&self, path: &str, body: &Value) -> Result<Value> {
        let url = format!("{}{path}", self.base);
        self.call(reqwest::Method::PUT, url, Some(body)).await
    }

    /// DELETE a path under the base.
    pub(crate) async fn delete(&self, path: &str) -> Result<Value> {
        let url = format!("{}{path}", self.base);
        self.call(reqwest::Method::DELETE, url, None).await
    }
}

/// `dq topics` and `dq stats`: every topic with its counts (`stamp` adds the time).
async fn print_topics(api: &Api, json: bool, stamp: bool) -> Result<()> {
    let v = api
        .call(reqwest::Method::GET, api.url(&["v1", "topics"]), None)
        .await?;
    if json {
        print_json(&v);
    } else {
        let topics = v["topics"].as_array().cloned().unwrap_or_default();
        println!("{}", stats_table(&topics));
        if stamp {
            println!("at {}", rfc3339(Some(dq_core::SystemClock.now_ms())));
        }
    }
    Ok(())
}

fn print_json(v: &Value) {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
}

fn kv_table(rows: &[(&str, String)]) -> Table {
    let mut t = Table::new();
    t.load_preset(comfy_table::presets::NOTHING);
    for (k, v) in rows {
        t.add_row(vec![k.to_string(), v.clone()]);
    }
    t
}

fn s(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn stats_table(topics: &[Value]) -> Table {
    let mut t = Table::new();
    t.load_preset(comfy_table::presets::UTF8_BORDERS_ONLY);
    t.set_header(vec![
        "topic",
        "scheduled",
        "ready",
        "reserved",
        "dead",
        "overdue",
        "enqueued",
        "acked",
        "failed",
    ]);
    for topic in topics {
        let st = &topic["stats"];
        let c = &st["counters"];
        t.add_row(vec![
            s(&topic["name"]),
            s(&st["scheduled"]),
            s(&st["ready"]),
            s(&st["reserved"]),
            s(&st["dead"]),
            format!("{}ms", s(&st["oldest_overdue_ms"])),
            s(&c["enqueued"]),
            s(&c["acked"]),
            s(&c["failed"]),
        ]);
    }
    t
}

impl ClientCmd {
    pub(crate) async fn run(self) -> Result<()> {
        use reqwest::Method;
        match self {
            ClientCmd::Push {
                conn,
                topic,
                body,
                id,
                delay,
                at,
                priority,
                max_attempts,
                replace,
            } => {
                let api = conn.api()?;
                let mut req = json!({});
                if let Some(b) = body {
                    req["body"] = serde_json::from_str(&b).unwrap_or(Value::String(b));
                }
                if let Some(id) = id {
                    req["id"] = json!(id);
                }
                if let Some(d) = delay {
                    req["delay_ms"] = json!(ms(&d, "--delay")?);
                }
                if let Some(a) = at {
                    req["due_at_ms"] = json!(at_ms(&a)?);
                }
                if let Some(p) = priority {
                    req["priority"] = json!(p);
                }
                if let Some(m) = max_attempts {
                    req["max_attempts"] = json!(m);
                }
                if replace {
                    req["replace"] = json!(true);
                }
                let v = api
                    .call(
                        Method::POST,
                        api.url(&["v1", "topics", &topic, "jobs"]),
                        Some(&req),
                    )
                    .await?;
                if conn.json {
                    print_json(&v);
                } else {
                    let what = if v["created"] == json!(true) {
                        "created"
                    } else if v["replaced"] == json!(true) {
                        "replaced"
                    } else {
                        "exists (unchanged)"
                    };
                    println!(
                        "{} {what}; due {} ({})",
                        s(&v["id"]),
                        rfc3339(v["due_at_ms"].as_u64()),
                        s(&v["state"])
                    );
                }
            }
            ClientCmd::Get { conn, topic, id } => {
                let api = conn.api()?;
                let v = api
                    .call(
                        Method::GET,
                        api.url(&["v1", "topics", &topic, "jobs", &id]),
                        None,
                    )
                    .await?;
                if conn.json {
                    print_json(&v);
                } else {
                    let body = if v.get("body_base64").is_some() {
                        format!("(base64) {}", s(&v["body_base64"]))
                    } else {
                        v["body"].to_string()
                    };
                    let t = kv_table(&[
                        ("topic", s(&v["topic"])),
                        ("id", s(&v["id"])),
                        ("state", s(&v["state"])),
                        ("due", rfc3339(v["due_at_ms"].as_u64())),
                        ("priority", s(&v["priority"])),
                        (
                            "attempts",
                            format!("{}/{}", s(&v["attempts"]), s(&v["max_attempts"])),
                        ),
                        ("last error", s(&v["last_error"])),
                        ("created", rfc3339(v["created_at_ms"].as_u64())),
                        ("lease until", rfc3339(v["lease_deadline_ms"].as_u64())),
                        ("died", rfc3339(v["died_at_ms"].as_u64())),
                        ("body", body),
                    ]);
                    println!("{t}");
                }
            }
            ClientCmd::Cancel { conn, topic, id } => {
                let api = conn.api()?;
                let v = api
                    .call(
                        Method::DELETE,
                        api.url(&["v1", "topics", &topic, "jobs", &id]),
                        None,
                    )
                    .await?;
                if conn.json {
                    print_json(&v);
                } else {
                    println!("{} cancelled (was {})", s(&v["id"]), s(&v["state"]));
                }
            }
            ClientCmd::Reschedule {
                conn,
                topic,
                id,
                delay,
                at,
            } => {
                let api = conn.api()?;
                let req = match (delay, at) {
                    (Some(d), _) => json!({"delay_ms": ms(&d, "--delay")?}),
                    (None, Some(a)) => json!({"due_at_ms": at_ms(&a)?}),
                    (None, None) => bail!("give --delay or --at"),
                };
                let v = api
                    .call(
                        Method::PATCH,
                        api.url(&["v1", "topics", &topic, "jobs", &id]),
                        Some(&req),
                    )
                    .await?;
                if conn.json {
                    print_json(&v);
                } else {
                    println!(
                        "{} now due {}",
                        s(&v["id"]),
                        rfc3339(v["due_at_ms"].as_u64())
                    );
                }
            }
            ClientCmd::Stats { conn, topic } => {
                let api = conn.api()?;
                match topic {
                    Some(t) => {
                        let v = api
                            .call(Method::GET, api.url(&["v1", "topics", &t]), None)
                            .await?;
                        if conn.json {
                            print_json(&v);
                        } else {
                            println!("{}", stats_table(std::slice::from_ref(&v)));
                            println!("config: {}", v["config"]);
                        }
                    }
                    None => print_topics(&api, conn.json, true).await?,
                }
            }
            ClientCmd::Topics { conn, cmd } => {
                let api = conn.api()?;
                match cmd.unwrap_or(TopicsCmd::List) {
                    TopicsCmd::List => print_topics(&api, conn.json, false).await?,
                    TopicsCmd::Put {
                        topic,
                        max_attempts,
                        lease,
                        dead_cap,
                        default_delay,
                        retry,
                        push_url,
                        push_method,
                        push_timeout,
                        push_concurrency,
                        push_secret,
                        pull,
                        partitions,
                    } => {
                        let mut req = json!({});
                        if let Some(n) = partitions {
                            req["partitions"] = json!(n);
                        }
                        if let Some(m) = max_attempts {
                            req["max_attempts"] = json!(m);
                        }
                        if let Some(l) = lease {
                            req["lease_ms"] = json!(ms(&l, "--lease")?);
                        }
                        if let Some(c) = dead_cap {
                            req["dead_cap"] = json!(c);
                        }
                        if let Some(d) = default_delay {
                            req["default_delay_ms"] = json!(ms(&d, "--default-delay")?);
                        }
                        if let Some(r) = retry {
                            req["retry"] = parse_retry(&r)?;
                        }
                        if let Some(url) = push_url {
                            let mut d = json!({"mode": "push", "url": url});
                            if let Some(m) = push_method {
                                d["method"] = json!(m.to_ascii_uppercase());
                            }
                            if let Some(t) = push_timeout {
                                d["timeout_ms"] = json!(ms(&t, "--push-timeout")?);
                            }
                            if let Some(c) = push_concurrency {
                                d["concurrency"] = json!(c);
                            }
                            if !push_secret.is_empty() {
                                d["secrets"] = json!(push_secret);
                            }
                            req["delivery"] = d;
                        }
                        if pull {
                            req["delivery"] = json!({"mode": "pull"});
                        }
                        let v = api
                            .call(Method::PUT, api.url(&["v1", "topics", &topic]), Some(&req))
                            .await?;
                        if conn.json {
                            print_json(&v);
                        } else {
                            println!("{}: {}", s(&v["name"]), v["config"]);
                        }
                    }
                    TopicsCmd::Delete { topic } => {
                        let v = api
                            .call(Method::DELETE, api.url(&["v1", "topics", &topic]), None)
                            .await?;
                        if conn.json {
                            print_json(&v);
                        } else {
                            println!(
                                "{} deleted with {} jobs",
                                s(&v["name"]),
                                s(&v["deleted_jobs"])
                            );
                        }
                    }
                }
            }
            ClientCmd::Dead { conn, cmd } => {
                let api = conn.api()?;
                match cmd {
                    DeadCmd::List {
                        topic,
                        limit,
                        offset,
                    } => {
                        let url = format!(
                            "{}?limit={limit}&offset={offset}",
                            api.url(&["v1", "topics", &topic, "dead"])
                        );
                        let v = api.call(Method::GET, url, None).await?;
                        if conn.json {
                            print_json(&v);
                        } else {
                            let mut t = Table::new();
                            t.load_preset(comfy_table::presets::UTF8_BORDERS_ONLY);
                            t.set_header(vec!["id", "attempts", "died", "last error"]);
                            for j in v["jobs"].as_array().cloned().unwrap_or_default() {
                                t.add_row(vec![
                                    s(&j["id"]),
                                    s(&j["attempts"]),
                                    rfc3339(j["died_at_ms"].as_u64()),
                                    s(&j["last_error"]),
                                ]);
                            }
                            println!("{t}");
                        }
                    }
                    DeadCmd::Replay { topic, ids } => {
                        let req = if ids.is_empty() {
                            json!({})
                        } else {
                            json!({ "ids": ids })
                        };
                        let v = api
                            .call(
                                Method::POST,
                                api.url(&["v1", "topics", &topic, "dead", "replay"]),
                                Some(&req),
                            )
                            .await?;
                        if conn.json {
                            print_json(&v);
                        } else {
                            println!("{} replayed", s(&v["replayed"]));
                        }
                    }
                    DeadCmd::Purge { topic } => {
                        let v = api
                            .call(
                                Method::DELETE,
                                api.url(&["v1", "topics", &topic, "dead"]),
                                None,
                            )
                            .await?;
                        if conn.json {
                            print_json(&v);
                        } else {
                            println!("{} purged", s(&v["purged"]));
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_flag_forms() {
        assert_eq!(
            parse_retry("1m,3m").unwrap(),
            json!({"delays_ms": [60000, 180000]})
        );
        assert_eq!(
            parse_retry("fixed:30s").unwrap(),
            json!({"fixed_ms": 30000})
        );
        let e = parse_retry("exp:1s,2,1h").unwrap();
        assert_eq!(e["exponential"]["max_ms"], json!(3_600_000));
        assert!(parse_retry("exp:1s").is_err());
        assert!(parse_retry("soon").is_err());
    }

    #[test]
    fn path_segments_are_encoded() {
        assert_eq!(
            dq_client::encode_segment("order/42 ü"),
            "order%2F42%20%C3%BC"
        );
        assert_eq!(dq_client::encode_segment("a.b:c-d_e"), "a.b:c-d_e");
    }

    #[test]
    fn times() {
        assert_eq!(at_ms("1970-01-01T00:00:01Z").unwrap(), 1000);
        assert_eq!(rfc3339(Some(1000)), "1970-01-01T00:00:01.000Z");
        assert_eq!(rfc3339(None), "-");
    }
}
