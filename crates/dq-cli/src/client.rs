//! The client subcommands: each is one or a few calls to the HTTP API of a
//! running `dq serve`, printed as a table (or raw JSON with `--json`).

use std::time::{Duration, UNIX_EPOCH};

use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, Subcommand};
use comfy_table::Table;
use dq_client::{Client, NewJob, TopicInfo, wire};
use dq_core::{Clock, Delivery, PushConfig, PushMethod, RetryPolicy, TopicConfigPatch};
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
    /// An API key (dqk_…) or the server's admin_token, sent as Authorization: Bearer
    #[arg(long, env = "DQ_TOKEN", hide_env_values = true, global = true)]
    token: Option<String>,
    /// Print the server's JSON instead of a table
    #[arg(long, global = true)]
    json: bool,
    /// Trust this CA (or self-signed) certificate, PEM, for an https:// server
    #[arg(long, env = "DQ_CACERT", global = true)]
    cacert: Option<std::path::PathBuf>,
}

impl Conn {
    /// Whether to print the server's JSON.
    pub(crate) fn json(&self) -> bool {
        self.json
    }

    /// The API client for this server and token. A server given without a
    /// scheme (`127.0.0.1:7070`) means `http://`.
    pub(crate) fn client(&self) -> Result<Client> {
        let server = self.server.trim_end_matches('/');
        let base = if server.contains("://") {
            if !(server.starts_with("http://") || server.starts_with("https://")) {
                bail!("--server {server:?}: the URL must start with http:// or https://");
            }
            server.to_string()
        } else {
            format!("http://{server}")
        };
        let mut c = match &self.cacert {
            Some(path) => {
                let pem =
                    std::fs::read(path).with_context(|| format!("--cacert {}", path.display()))?;
                Client::with_root_certificate(base, &pem)
                    .with_context(|| format!("--cacert {}", path.display()))?
            }
            None => Client::new(base).context("cannot build HTTP client")?,
        };
        if let Some(t) = &self.token {
            c = c.token(t.clone());
        }
        Ok(c)
    }
}

#[derive(Debug, Subcommand)]
pub(crate) enum ClientCmd {
    /// Enqueue a job
    Push {
        #[command(flatten)]
        conn: Conn,
        /// The topic to enqueue on
        topic: String,
        /// Job body: JSON text (refused when it is not JSON; see --raw), or - to read it from stdin [default: null]
        body: Option<String>,
        /// Send the body as a JSON string, whatever it holds
        #[arg(long)]
        raw: bool,
        /// Job id (idempotency key) [default: generated]
        #[arg(long)]
        id: Option<String>,
        /// Delay, e.g. 30s, 15m, 3d
        #[arg(long, conflicts_with = "at")]
        delay: Option<String>,
        /// Due time, RFC 3339, e.g. 2026-12-01T09:00:00Z (UTC when no zone is given)
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
        /// Dedup window, e.g. 1h: for this long after the job ended, pushing its id again stores nothing [default: the topic's]
        #[arg(long)]
        dedup: Option<String>,
        /// Flow-control key, e.g. customer-17: the jobs of one key share the
        /// topic's --key-concurrency and --key-rate-limit, and keys take turns
        #[arg(long)]
        key: Option<String>,
    },
    /// Show a job
    Get {
        #[command(flatten)]
        conn: Conn,
        /// The job's topic
        topic: String,
        /// The job's id
        id: String,
    },
    /// Cancel a job (any state)
    Cancel {
        #[command(flatten)]
        conn: Conn,
        /// The job's topic
        topic: String,
        /// The job's id
        id: String,
    },
    /// Move a waiting job to a new due time
    Reschedule {
        #[command(flatten)]
        conn: Conn,
        /// The job's topic
        topic: String,
        /// The job's id
        id: String,
        /// New delay from now, e.g. 10m
        #[arg(long, conflicts_with = "at", required_unless_present = "at")]
        delay: Option<String>,
        /// New due time, RFC 3339 (UTC when no zone is given)
        #[arg(long)]
        at: Option<String>,
    },
    /// Counts per topic (all topics, or one with its settings)
    Stats {
        #[command(flatten)]
        conn: Conn,
        /// One topic, shown with its settings [default: all topics]
        topic: Option<String>,
    },
    /// Lease due jobs for a script to work on (then ack or nack each)
    Reserve {
        #[command(flatten)]
        conn: Conn,
        /// Pull topics to take jobs from
        #[arg(required = true)]
        topics: Vec<String>,
        /// Most jobs to take
        #[arg(long, default_value_t = 1)]
        max: usize,
        /// Wait this long for a job to become due, e.g. 30s (at most 30s)
        #[arg(long, default_value = "0s")]
        wait: String,
        /// Lease length, e.g. 5m [default: the job's, else the topic's]
        #[arg(long)]
        lease: Option<String>,
    },
    /// Done with a reserved job
    Ack {
        #[command(flatten)]
        conn: Conn,
        /// The job's topic
        topic: String,
        /// The job's id
        id: String,
        /// The lease token `dq reserve` printed
        lease_token: String,
    },
    /// A reserved job failed: retry it later, or send it to the dead letters
    Nack {
        #[command(flatten)]
        conn: Conn,
        /// The job's topic
        topic: String,
        /// The job's id
        id: String,
        /// The lease token `dq reserve` printed
        lease_token: String,
        /// Why (kept as the job's last error)
        #[arg(long, default_value = "nacked")]
        error: String,
        /// Retry after this long, e.g. 5m [default: the retry policy's wait]
        #[arg(long, conflicts_with = "dead")]
        retry_in: Option<String>,
        /// Dead at once, whatever attempts are left
        #[arg(long)]
        dead: bool,
    },
    /// List, configure or delete topics
    Topics {
        #[command(flatten)]
        conn: Conn,
        #[command(subcommand)]
        cmd: Option<Box<TopicsCmd>>,
    },
    /// Recurring schedules: list, show, put, pause, resume, delete
    Schedules {
        #[command(flatten)]
        conn: Conn,
        #[command(subcommand)]
        cmd: Option<SchedulesCmd>,
    },
    /// API keys: create, list, rotate, revoke (needs an admin key or the admin_token)
    Keys {
        #[command(flatten)]
        conn: Conn,
        #[command(subcommand)]
        cmd: Option<KeysCmd>,
    },
    /// Dead letters: list, replay, purge
    Dead {
        #[command(flatten)]
        conn: Conn,
        #[command(subcommand)]
        cmd: DeadCmd,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum KeysCmd {
    /// List keys: name, scopes, created, last used (never a secret)
    List,
    /// Create a key and print its secret (shown this once)
    Create {
        /// The key's name: 1-64 of A-Z a-z 0-9 _ -
        #[arg(long)]
        name: String,
        /// What it may do, action:pattern, repeated: enqueue|consume|read|manage:<topic or prefix*>, or admin
        #[arg(long = "scope", required = true)]
        scopes: Vec<String>,
        /// Most requests it may make to each instance: N/WINDOW, e.g. 100/1s (429 rate_limited beyond)
        #[arg(long)]
        rate_limit: Option<String>,
        /// The rate limit's burst [default: N]
        #[arg(long, requires = "rate_limit")]
        rate_burst: Option<u64>,
    },
    /// Give a key a new secret (printed); the old one stops working
    Rotate {
        /// The key
        name: String,
    },
    /// Revoke a key: it stops working on every instance within a second (asks first, unless --yes)
    Revoke {
        /// The key
        name: String,
        /// Do not ask
        #[arg(long)]
        yes: bool,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum SchedulesCmd {
    /// List schedules with their next slot
    List,
    /// Show a schedule: settings, last slot and its job, next slots
    Get {
        /// The schedule
        name: String,
    },
    /// Create or replace a schedule (every setting given anew)
    Put {
        /// The schedule's name (its jobs' ids are <name>@<slot ms>)
        name: String,
        /// The topic its jobs go to
        #[arg(long)]
        topic: String,
        /// A cron rule: 5 fields, or 6 with seconds first, e.g. '0 9 * * MON-FRI'
        #[arg(long, conflicts_with = "every", required_unless_present = "every")]
        cron: Option<String>,
        /// A fixed interval instead, e.g. 90s, 15m (at least 1s)
        #[arg(long)]
        every: Option<String>,
        /// IANA time zone of the cron rule [default: UTC]
        #[arg(long)]
        timezone: Option<String>,
        /// Each job's body, JSON [default: null]
        #[arg(long)]
        body: Option<String>,
        /// Each job's priority [default: 1024]
        #[arg(long)]
        priority: Option<u32>,
        /// Slots missed while no dq ran: skip, one, all [default: one]
        #[arg(long)]
        catch_up: Option<String>,
        /// Create it paused
        #[arg(long)]
        paused: bool,
        /// No slot before, RFC 3339
        #[arg(long)]
        start_at: Option<String>,
        /// No slot after, RFC 3339
        #[arg(long)]
        end_at: Option<String>,
    },
    /// Fire nothing until resumed
    Pause {
        /// The schedule
        name: String,
    },
    /// Fire again from now on
    Resume {
        /// The schedule
        name: String,
    },
    /// Delete a schedule (asks first, unless --yes)
    Delete {
        /// The schedule
        name: String,
        /// Do not ask
        #[arg(long)]
        yes: bool,
    },
}

// Parsed once per run: the size of the biggest variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub(crate) enum TopicsCmd {
    /// List topics with their counts, in name order (every topic, unless --limit)
    List {
        /// Only topics whose name starts with this (a plain prefix, no wildcards)
        #[arg(long)]
        prefix: Option<String>,
        /// List one page of at most N topics (1-1000) and say where the next starts, instead of every topic
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
        /// With --limit: start after this topic (the cursor a previous page printed)
        #[arg(long, requires = "limit")]
        cursor: Option<String>,
    },
    /// Create or update a topic's settings; settings not given keep their value
    Put {
        /// The topic (created when new)
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
        /// Retry waits: a list like 1m,3m,5m,7m; or exp:1s,2,1h (initial, factor, cap; a 4th part: jitter, 0.1 if not given); or fixed:30s
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
        /// Any delivery as the API's JSON, e.g. forwarding into a Redis
        /// Stream: '{"mode":"redis_stream","url":"redis://127.0.0.1:6379","stream":"orders:due"}'
        /// or a list: '{"mode":"redis_list","url":"redis://…","list":"orders:ready"}'
        #[arg(long, conflicts_with_all = ["pull", "push_url"])]
        delivery: Option<String>,
        /// Split the topic into this many partitions (Redis; only while it holds no jobs)
        #[arg(long)]
        partitions: Option<u32>,
        /// Dedup window of jobs that name none, e.g. 1h (0 for none)
        #[arg(long)]
        dedup: Option<String>,
        /// Hand out at most N jobs per window, across every instance, pull
        /// and push: N/WINDOW, e.g. 50/1s or 1000/1m
        #[arg(long, conflicts_with = "no_rate_limit")]
        rate_limit: Option<String>,
        /// The rate limit's burst: jobs at once after a quiet spell [default: N]
        #[arg(long, requires = "rate_limit")]
        rate_burst: Option<u64>,
        /// Remove the topic's rate limit
        #[arg(long)]
        no_rate_limit: bool,
        /// At most N unexpired leases at a time per flow-control key (jobs
        /// pushed with --key), across every instance, pull and push
        #[arg(long, conflicts_with = "no_key_concurrency")]
        key_concurrency: Option<u32>,
        /// Remove the topic's key concurrency limit
        #[arg(long)]
        no_key_concurrency: bool,
        /// A rate limit for each key of its own: N/WINDOW, e.g. 5/1s
        #[arg(long, conflicts_with = "no_key_rate_limit")]
        key_rate_limit: Option<String>,
        /// The key rate limit's burst [default: N]
        #[arg(long, requires = "key_rate_limit")]
        key_rate_burst: Option<u64>,
        /// Remove the topic's key rate limit
        #[arg(long)]
        no_key_rate_limit: bool,
    },
    /// Hold every hand-out of a topic (pull and push, on every instance)
    /// until resumed; enqueues go on
    Pause {
        /// The topic
        topic: String,
    },
    /// Hand a paused topic's jobs out again (under its rate limit)
    Resume {
        /// The topic
        topic: String,
    },
    /// Delete a topic and all its jobs (asks first, unless --yes)
    Delete {
        /// The topic
        topic: String,
        /// Do not ask
        #[arg(long)]
        yes: bool,
    },
}

#[derive(Debug, Subcommand)]
pub(crate) enum DeadCmd {
    /// List dead letters, oldest first
    List {
        /// The topic
        topic: String,
        /// Most to list
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// Skip this many of the oldest
        #[arg(long, default_value_t = 0)]
        offset: usize,
    },
    /// Make dead letters due now with fresh attempts (all, or the ids given)
    Replay {
        /// The topic
        topic: String,
        /// Dead letters to replay [default: all]
        ids: Vec<String>,
    },
    /// Delete all dead letters of a topic (asks first, unless --yes)
    Purge {
        /// The topic
        topic: String,
        /// Do not ask
        #[arg(long)]
        yes: bool,
    },
}

/// `dq topics pause|resume`: a known topic's `paused` setting.
async fn set_paused(api: &Client, topic: String, paused: bool, json: bool) -> Result<()> {
    // Unknown topics are refused (404), not created paused.
    api.topic(&topic).await?;
    let patch = TopicConfigPatch {
        paused: Some(paused),
        ..Default::default()
    };
    let config = api.configure_topic(&topic, &patch).await?;
    if json {
        print_json(&wire::TopicConfigured {
            name: topic,
            config,
        });
    } else if paused {
        println!("{topic} paused: nothing is handed out until `dq topics resume {topic}`");
    } else {
        println!("{topic} resumed");
    }
    Ok(())
}

/// `--rate-limit N/WINDOW` (e.g. 50/1s) and its burst.
fn parse_rate(text: &str, burst: Option<u64>, flag: &str) -> Result<dq_core::RateLimit> {
    let (n, window) = text
        .split_once('/')
        .with_context(|| format!("{flag}: {text:?} is not N/WINDOW like 50/1s"))?;
    let limit: u64 = n
        .trim()
        .parse()
        .with_context(|| format!("{flag}: {n:?} is not a number"))?;
    Ok(dq_core::RateLimit {
        limit,
        per_ms: ms(window.trim(), flag)?,
        burst: burst.unwrap_or(limit),
    })
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

/// `--retry`: the text form `dq_api::units` reads (the admin page's
/// settings take the same), as the API's JSON.
fn parse_retry(text: &str) -> Result<Value> {
    let policy = dq_api::units::parse_retry(text).map_err(|e| anyhow!("--{e}"))?;
    Ok(serde_json::to_value(policy)?)
}

/// `dq topics list --limit N`: one page of topics; where the next one
/// starts goes to stderr (in the JSON as `next_cursor`).
async fn print_topic_page(api: &Client, query: wire::TopicListQuery, json: bool) -> Result<()> {
    let page = api.list_topics(&query).await?;
    if json {
        print_json(&page);
    } else {
        println!("{}", stats_table(&page.topics));
        if let Some(c) = &page.next_cursor {
            eprintln!("more topics follow: --cursor {c}");
        }
    }
    Ok(())
}

/// `dq topics` and `dq stats`: every topic with its counts (those starting
/// with `prefix`, if given), following the pages (`stamp` adds the time).
async fn print_topics(api: &Client, prefix: Option<&str>, json: bool, stamp: bool) -> Result<()> {
    let topics = api.topics_with_prefix(prefix).await?;
    if json {
        print_json(&wire::TopicList {
            topics,
            next_cursor: None,
        });
    } else {
        println!("{}", stats_table(&topics));
        if stamp {
            println!("at {}", rfc3339(Some(dq_core::SystemClock.now_ms())));
        }
    }
    Ok(())
}

/// A schedule's last job as the tables show it.
fn last_job(s: &wire::ScheduleInfo) -> String {
    match &s.last_job {
        Some(j) => format!(
            "{} ({})",
            j.id,
            j.state
                .map_or("done or cancelled".into(), |st| st.to_string())
        ),
        None => "-".into(),
    }
}

fn print_schedule(s: &wire::ScheduleInfo, json: bool) {
    if json {
        print_json(s);
        return;
    }
    let next: Vec<String> = s.next.iter().map(|n| n.at.clone()).collect();
    let t = kv_table(&[
        ("name", s.name.clone()),
        ("topic", s.spec.topic.clone()),
        ("rule", s.rule.clone()),
        (
            "catch up",
            s.spec.catch_up.unwrap_or_default().as_str().to_string(),
        ),
        ("paused", s.spec.paused.to_string()),
        (
            "last slot",
            s.last.as_ref().map_or("-".into(), |l| l.at.clone()),
        ),
        ("last job", last_job(s)),
        (
            "next",
            if next.is_empty() {
                "-".into()
            } else {
                next.join("\n")
            },
        ),
    ]);
    println!("{t}");
}

fn print_json<T: serde::Serialize>(v: &T) {
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

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "-".into(), |v| v.to_string())
}

/// A job's body as the tables show it: the JSON as sent, or base64 bytes.
fn shown_body(json: Option<&dq_client::RawJson>, base64: Option<&str>) -> String {
    match (base64, json) {
        (Some(b), _) => format!("(base64) {b}"),
        (None, Some(j)) => j.get().to_string(),
        (None, None) => "null".into(),
    }
}

/// A table with borders and this header.
fn bordered(header: Vec<&str>) -> Table {
    let mut t = Table::new();
    t.load_preset(comfy_table::presets::UTF8_BORDERS_ONLY);
    t.set_header(header);
    t
}

fn stats_table(topics: &[TopicInfo]) -> Table {
    let mut t = bordered(vec![
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
        let st = &topic.stats;
        let c = &st.counters;
        t.add_row(vec![
            topic.name.clone(),
            st.scheduled.to_string(),
            st.ready.to_string(),
            st.reserved.to_string(),
            st.dead.to_string(),
            dq_core::limits::human_ms(st.oldest_overdue_ms),
            c.enqueued.to_string(),
            c.acked.to_string(),
            c.failed.to_string(),
        ]);
    }
    t
}

/// Asks `question` on the terminal; without one (a script), refuses unless
/// the caller passed `--yes`.
fn confirm(question: &str, yes: bool) -> Result<()> {
    use std::io::{BufRead, IsTerminal, Write};
    if yes {
        return Ok(());
    }
    if !std::io::stdin().is_terminal() {
        bail!("{question} Not without --yes (stdin is not a terminal to ask on)");
    }
    eprint!("{question} [y/N] ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    if matches!(answer.trim(), "y" | "Y" | "yes") {
        Ok(())
    } else {
        bail!("not done")
    }
}

/// The `push` body argument as the job's body: JSON text as it is, `-` for
/// stdin, `--raw` for a string.
fn push_body(body: Option<String>, raw: bool) -> Result<NewJob> {
    let text = match body.as_deref() {
        Some("-") => {
            let mut t = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut t)
                .context("reading the body from stdin")?;
            t
        }
        Some(t) => t.to_string(),
        None if raw => bail!("--raw needs a body"),
        None => "null".into(),
    };
    if raw {
        return Ok(NewJob::json(text));
    }
    NewJob::json_text(text.trim().to_string()).map_err(|e| {
        anyhow!("the body is not JSON ({e}); fix it, or pass --raw to send it as a string")
    })
}

impl ClientCmd {
    pub(crate) async fn run(self) -> Result<()> {
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
                raw,
                dedup,
                key,
            } => {
                let api = conn.client()?;
                let mut job = push_body(body, raw)?;
                if let Some(k) = key {
                    job = job.key(k);
                }
                if let Some(id) = id {
                    job = job.id(id);
                }
                if let Some(d) = delay {
                    job = job.delay(Duration::from_millis(ms(&d, "--delay")?));
                }
                if let Some(a) = at {
                    job = job.due_at_ms(at_ms(&a)?);
                }
                if let Some(p) = priority {
                    job = job.priority(p);
                }
                if let Some(m) = max_attempts {
                    job = job.max_attempts(m);
                }
                if replace {
                    job = job.replace();
                }
                if let Some(d) = dedup {
                    job = job.dedup(Duration::from_millis(ms(&d, "--dedup")?));
                }
                let e = api.enqueue(&topic, &job).await?;
                if conn.json {
                    print_json(&e);
                } else {
                    let what = if e.created {
                        "created"
                    } else if e.replaced {
                        "replaced"
                    } else if e.deduplicated {
                        "deduplicated (a job with this id ended within its dedup window; nothing stored)"
                    } else {
                        "exists (unchanged)"
                    };
                    match (e.due_at_ms, e.state) {
                        (Some(due), Some(state)) => {
                            println!("{} {what}; due {} ({state})", e.id, rfc3339(Some(due)))
                        }
                        _ => println!("{} {what}", e.id),
                    }
                }
            }
            ClientCmd::Get { conn, topic, id } => {
                let api = conn.client()?;
                let j = api.get(&topic, &id).await?;
                if conn.json {
                    print_json(&j);
                } else {
                    let body = shown_body(j.body.as_ref(), j.body_base64.as_deref());
                    let t = kv_table(&[
                        ("topic", j.topic.clone()),
                        ("id", j.id.clone()),
                        ("state", j.state.to_string()),
                        ("due", rfc3339(Some(j.due_at_ms))),
                        ("priority", j.priority.to_string()),
                        ("attempts", format!("{}/{}", j.attempts, j.max_attempts)),
                        ("last error", opt(j.last_error.as_deref())),
                        ("created", rfc3339(Some(j.created_at_ms))),
                        ("lease until", rfc3339(j.lease_deadline_ms)),
                        ("died", rfc3339(j.died_at_ms)),
                        ("body", body),
                    ]);
                    println!("{t}");
                }
            }
            ClientCmd::Cancel { conn, topic, id } => {
                let api = conn.client()?;
                let state = api.cancel(&topic, &id).await?;
                if conn.json {
                    print_json(&wire::Cancelled {
                        id,
                        cancelled: true,
                        state,
                    });
                } else {
                    println!("{id} cancelled (was {state})");
                }
            }
            ClientCmd::Reschedule {
                conn,
                topic,
                id,
                delay,
                at,
            } => {
                let api = conn.client()?;
                let due = match (delay, at) {
                    (Some(d), _) => {
                        let d = Duration::from_millis(ms(&d, "--delay")?);
                        api.reschedule_after(&topic, &id, d).await?
                    }
                    (None, Some(a)) => api.reschedule(&topic, &id, at_ms(&a)?).await?,
                    (None, None) => bail!("give --delay or --at"),
                };
                if conn.json {
                    print_json(&wire::Rescheduled { id, due_at_ms: due });
                } else {
                    println!("{id} now due {}", rfc3339(Some(due)));
                }
            }
            ClientCmd::Stats { conn, topic } => {
                let api = conn.client()?;
                match topic {
                    Some(t) => {
                        let info = api.topic(&t).await?;
                        if conn.json {
                            print_json(&info);
                        } else {
                            println!("{}", stats_table(std::slice::from_ref(&info)));
                            let cfg = serde_json::to_string(&info.config).unwrap_or_default();
                            println!("config: {cfg}");
                        }
                    }
                    None => print_topics(&api, None, conn.json, true).await?,
                }
            }
            ClientCmd::Reserve {
                conn,
                topics,
                max,
                wait,
                lease,
            } => {
                let api = conn.client()?;
                let mut req = dq_client::Reserve::new(topics)
                    .max(max)
                    .wait(Duration::from_millis(ms(&wait, "--wait")?));
                if let Some(l) = lease {
                    req = req.lease(Duration::from_millis(ms(&l, "--lease")?));
                }
                let jobs = api.reserve(&req).await?;
                if conn.json {
                    print_json(&wire::Reserved { jobs });
                } else {
                    let mut t = bordered(vec![
                        "topic",
                        "id",
                        "token",
                        "attempt",
                        "lease until",
                        "body",
                    ]);
                    for j in &jobs {
                        let body = shown_body(j.body.as_ref(), j.body_base64.as_deref());
                        t.add_row(vec![
                            j.topic.clone(),
                            j.id.clone(),
                            j.token.clone(),
                            j.attempt.to_string(),
                            rfc3339(Some(j.lease_deadline_ms)),
                            body,
                        ]);
                    }
                    println!("{t}");
                }
            }
            ClientCmd::Ack {
                conn,
                topic,
                id,
                lease_token: token,
            } => {
                conn.client()?.ack(&topic, &id, &token).await?;
                if conn.json {
                    print_json(&wire::Acked { id, acked: true });
                } else {
                    println!("{id} acked");
                }
            }
            ClientCmd::Nack {
                conn,
                topic,
                id,
                lease_token: token,
                error,
                retry_in,
                dead,
            } => {
                let api = conn.client()?;
                let n = if dead {
                    api.nack_dead(&topic, &id, &token, &error).await?;
                    wire::Nacked {
                        id,
                        state: dq_core::JobState::Dead,
                        due_at_ms: None,
                    }
                } else {
                    let retry = retry_in
                        .map(|r| ms(&r, "--retry-in").map(Duration::from_millis))
                        .transpose()?;
                    api.nack(&topic, &id, &token, &error, retry).await?
                };
                if conn.json {
                    print_json(&n);
                } else {
                    match n.due_at_ms {
                        Some(due) => println!("{} failed; retried at {}", n.id, rfc3339(Some(due))),
                        None => println!("{} failed; dead", n.id),
                    }
                }
            }
            ClientCmd::Schedules { conn, cmd } => {
                let api = conn.client()?;
                match cmd.unwrap_or(SchedulesCmd::List) {
                    SchedulesCmd::List => {
                        let schedules = api.schedules().await?;
                        if conn.json {
                            print_json(&wire::ScheduleList { schedules });
                        } else {
                            let mut t = bordered(vec!["name", "topic", "rule", "next", "last job"]);
                            for s in &schedules {
                                t.add_row(vec![
                                    s.name.clone(),
                                    s.spec.topic.clone(),
                                    s.rule.clone(),
                                    if s.spec.paused {
                                        "paused".to_string()
                                    } else {
                                        s.next.first().map_or("-".into(), |n| n.at.clone())
                                    },
                                    last_job(s),
                                ]);
                            }
                            println!("{t}");
                        }
                    }
                    SchedulesCmd::Get { name } => {
                        print_schedule(&api.schedule(&name).await?, conn.json)
                    }
                    SchedulesCmd::Put {
                        name,
                        topic,
                        cron,
                        every,
                        timezone,
                        body,
                        priority,
                        catch_up,
                        paused,
                        start_at,
                        end_at,
                    } => {
                        let body = body
                            .map(|b| {
                                serde_json::from_str::<dq_client::RawJson>(&b)
                                    .map_err(|e| anyhow!("--body is not JSON: {e}"))
                            })
                            .transpose()?;
                        let catch_up = catch_up
                            .map(|c| {
                                serde_json::from_value::<wire::CatchUp>(json!(c))
                                    .map_err(|_| anyhow!("--catch-up {c:?}: skip, one or all"))
                            })
                            .transpose()?;
                        let spec = wire::ScheduleSpec {
                            topic,
                            cron,
                            every,
                            timezone,
                            body,
                            priority,
                            catch_up,
                            paused,
                            start_at,
                            end_at,
                        };
                        print_schedule(&api.put_schedule(&name, &spec).await?, conn.json);
                    }
                    SchedulesCmd::Pause { name } => {
                        print_schedule(&api.pause_schedule(&name, true).await?, conn.json)
                    }
                    SchedulesCmd::Resume { name } => {
                        print_schedule(&api.pause_schedule(&name, false).await?, conn.json)
                    }
                    SchedulesCmd::Delete { name, yes } => {
                        confirm(&format!("Delete schedule {name:?}?"), yes)?;
                        api.delete_schedule(&name).await?;
                        if conn.json {
                            print_json(&wire::ScheduleDeleted {
                                name,
                                deleted: true,
                            });
                        } else {
                            println!(
                                "{name} deleted (jobs it enqueued ahead, due within 2 s, still run)"
                            );
                        }
                    }
                }
            }
            ClientCmd::Keys { conn, cmd } => {
                let api = conn.client()?;
                match cmd.unwrap_or(KeysCmd::List) {
                    KeysCmd::List => {
                        let keys = api.keys().await?;
                        if conn.json {
                            print_json(&wire::KeyList { keys });
                        } else {
                            let mut t = bordered(vec!["name", "scopes", "created", "last used"]);
                            for k in &keys {
                                t.add_row(vec![
                                    k.name.clone(),
                                    k.scopes.join(" "),
                                    rfc3339(Some(k.created_ms)),
                                    k.last_used_ms.map_or("never".into(), |t| rfc3339(Some(t))),
                                ]);
                            }
                            println!("{t}");
                        }
                    }
                    KeysCmd::Create {
                        name,
                        scopes,
                        rate_limit,
                        rate_burst,
                    } => {
                        let rate = rate_limit
                            .map(|r| parse_rate(&r, rate_burst, "--rate-limit"))
                            .transpose()?;
                        print_secret(&api.create_key(&name, &scopes, rate).await?, conn.json);
                    }
                    KeysCmd::Rotate { name } => {
                        print_secret(&api.rotate_key(&name).await?, conn.json);
                    }
                    KeysCmd::Revoke { name, yes } => {
                        confirm(
                            &format!(
                                "Revoke key {name:?}? Clients using it are refused within a second."
                            ),
                            yes,
                        )?;
                        api.revoke_key(&name).await?;
                        if conn.json {
                            print_json(&wire::KeyRevoked {
                                name,
                                revoked: true,
                            });
                        } else {
                            println!("{name} revoked");
                        }
                    }
                }
            }
            ClientCmd::Topics { conn, cmd } => {
                let api = conn.client()?;
                let list_all = TopicsCmd::List {
                    prefix: None,
                    limit: None,
                    cursor: None,
                };
                match cmd.map_or(list_all, |c| *c) {
                    TopicsCmd::List {
                        prefix,
                        limit: Some(limit),
                        cursor,
                    } => {
                        let query = wire::TopicListQuery {
                            limit: Some(limit),
                            cursor,
                            prefix,
                        };
                        print_topic_page(&api, query, conn.json).await?
                    }
                    TopicsCmd::List {
                        prefix,
                        limit: None,
                        ..
                    } => print_topics(&api, prefix.as_deref(), conn.json, false).await?,
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
                        delivery,
                        partitions,
                        dedup,
                        rate_limit,
                        rate_burst,
                        no_rate_limit,
                        key_concurrency,
                        no_key_concurrency,
                        key_rate_limit,
                        key_rate_burst,
                        no_key_rate_limit,
                    } => {
                        let mut patch = TopicConfigPatch {
                            partitions,
                            max_attempts,
                            dead_cap,
                            ..Default::default()
                        };
                        if let Some(l) = lease {
                            patch.lease_ms = Some(ms(&l, "--lease")?);
                        }
                        if let Some(d) = default_delay {
                            patch.default_delay_ms = Some(ms(&d, "--default-delay")?);
                        }
                        if let Some(d) = dedup {
                            patch.dedup_ms = Some(ms(&d, "--dedup")?);
                        }
                        if let Some(r) = rate_limit {
                            patch.rate_limit =
                                Some(Some(parse_rate(&r, rate_burst, "--rate-limit")?));
                        }
                        if no_rate_limit {
                            patch.rate_limit = Some(None);
                        }
                        if let Some(k) = key_concurrency {
                            patch.key_concurrency = Some(Some(k));
                        }
                        if no_key_concurrency {
                            patch.key_concurrency = Some(None);
                        }
                        if let Some(r) = key_rate_limit {
                            patch.key_rate_limit =
                                Some(Some(parse_rate(&r, key_rate_burst, "--key-rate-limit")?));
                        }
                        if no_key_rate_limit {
                            patch.key_rate_limit = Some(None);
                        }
                        if let Some(r) = retry {
                            patch.retry = Some(
                                serde_json::from_value::<RetryPolicy>(parse_retry(&r)?)
                                    .context("--retry")?,
                            );
                        }
                        if let Some(url) = push_url {
                            let method = match push_method.as_deref().map(str::to_ascii_uppercase) {
                                None => PushMethod::Post,
                                Some(m) if m == "POST" => PushMethod::Post,
                                Some(m) if m == "GET" => PushMethod::Get,
                                Some(m) => bail!("--push-method {m:?}: POST or GET"),
                            };
                            let timeout_ms = match push_timeout {
                                Some(t) => ms(&t, "--push-timeout")?,
                                None => 3000,
                            };
                            patch.delivery = Some(Delivery::Push(PushConfig {
                                url,
                                method,
                                timeout_ms,
                                headers: Default::default(),
                                concurrency: push_concurrency.unwrap_or(16),
                                secrets: push_secret,
                            }));
                        }
                        if pull {
                            patch.delivery = Some(Delivery::Pull {});
                        }
                        if let Some(d) = delivery {
                            patch.delivery =
                                Some(serde_json::from_str::<Delivery>(&d).context("--delivery")?);
                        }
                        let config = api.configure_topic(&topic, &patch).await?;
                        let done = wire::TopicConfigured {
                            name: topic,
                            config,
                        };
                        if conn.json {
                            print_json(&done);
                        } else {
                            let cfg = serde_json::to_string(&done.config).unwrap_or_default();
                            println!("{}: {cfg}", done.name);
                        }
                    }
                    TopicsCmd::Pause { topic } => set_paused(&api, topic, true, conn.json).await?,
                    TopicsCmd::Resume { topic } => {
                        set_paused(&api, topic, false, conn.json).await?
                    }
                    TopicsCmd::Delete { topic, yes } => {
                        confirm(&format!("Delete topic {topic:?} and all its jobs?"), yes)?;
                        let deleted = api.delete_topic(&topic).await?;
                        if conn.json {
                            print_json(&wire::TopicDeleted {
                                name: topic,
                                deleted_jobs: deleted,
                            });
                        } else {
                            println!("{topic} deleted with {deleted} jobs");
                        }
                    }
                }
            }
            ClientCmd::Dead { conn, cmd } => {
                let api = conn.client()?;
                match cmd {
                    DeadCmd::List {
                        topic,
                        limit,
                        offset,
                    } => {
                        let jobs = api.list_dead(&topic, offset, limit).await?;
                        if conn.json {
                            print_json(&wire::DeadList { jobs });
                        } else {
                            let mut t = bordered(vec!["id", "attempts", "died", "last error"]);
                            for j in &jobs {
                                t.add_row(vec![
                                    j.id.clone(),
                                    j.attempts.to_string(),
                                    rfc3339(j.died_at_ms),
                                    opt(j.last_error.as_deref()),
                                ]);
                            }
                            println!("{t}");
                        }
                    }
                    DeadCmd::Replay { topic, ids } => {
                        let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
                        let replayed = api
                            .replay_dead(&topic, (!ids.is_empty()).then_some(ids.as_slice()))
                            .await?;
                        if conn.json {
                            print_json(&wire::Replayed { replayed });
                        } else {
                            println!("{replayed} replayed");
                        }
                    }
                    DeadCmd::Purge { topic, yes } => {
                        confirm(
                            &format!("Delete all dead letters of {topic:?} for good?"),
                            yes,
                        )?;
                        let purged = api.purge_dead(&topic).await?;
                        if conn.json {
                            print_json(&wire::Purged { purged });
                        } else {
                            println!("{purged} purged");
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

/// A new key's secret: the only time it is shown.
fn print_secret(k: &wire::KeyCreated, json: bool) {
    if json {
        print_json(k);
        return;
    }
    println!("{}", k.secret);
    eprintln!(
        "key {} ({}): the line above is its secret, shown this once; send it as Authorization: Bearer (DQ_TOKEN / --token)",
        k.name,
        k.scopes.join(" ")
    );
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
