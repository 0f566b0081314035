//! `dq bench`: load scenarios against a running `dq serve`, through its HTTP
//! API like any client. Each prints a human table and, last, one JSON line of
//! results. Lateness = when a consumer received a job − its due time, both
//! read from this machine's clock (run the bench on the server's machine).
//!
//! Modules: [`topics`] (the many-topics scenario), [`procfs`] (CPU time and
//! the listener of a port, read from `/proc`).

mod procfs;
mod topics;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, anyhow, bail};

use clap::{Args, Subcommand, ValueEnum};
use comfy_table::Table;
use dq_client::{Ack, Client, NewJob, Reserve};
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Value, json};

/// Arguments of `dq bench`.
#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    /// Base URL of the dq server under test
    #[arg(
        long,
        env = "DQ_SERVER",
        default_value = "http://127.0.0.1:7070",
        global = true
    )]
    server: String,
    /// The server's admin_token, if it has one
    #[arg(long, env = "DQ_TOKEN", hide_env_values = true, global = true)]
    token: Option<String>,
    /// Topic to use [default: bench-<scenario>-<random>]; deleted afterwards unless --keep
    #[arg(long, global = true)]
    topic: Option<String>,
    /// Split the bench topic into this many partitions first (Redis stores)
    #[arg(long, global = true)]
    partitions: Option<u32>,
    /// Keep the bench topic and its jobs afterwards
    #[arg(long, global = true)]
    keep: bool,
    /// Exit with an error unless every job was handed out exactly once and
    /// none early (lost = 0, duplicated = 0, early = 0, no enqueue errors).
    /// Checks correctness only, never speed.
    #[arg(long, global = true)]
    check: bool,
    #[command(subcommand)]
    scenario: Scenario,
}

#[derive(Debug, Subcommand)]
enum Scenario {
    /// Enqueue N jobs (due in an hour) with P producers, in batches of B (1 = one call per job)
    Enqueue {
        #[arg(long, default_value_t = 100_000)]
        jobs: usize,
        #[arg(long, default_value_t = 1000)]
        batch: usize,
        #[arg(long, default_value_t = 4)]
        producers: usize,
        #[arg(long, default_value_t = 64)]
        body_bytes: usize,
    },
    /// N jobs due uniformly in a window after the start; C consumers reserve and ack them
    Drain {
        #[arg(long, default_value_t = 100_000)]
        jobs: usize,
        /// Due window after the start, e.g. 1s..10s (0s..0s: all due at once)
        #[arg(long, default_value = "1s..10s")]
        window: String,
        #[arg(long, default_value_t = 8)]
        consumers: usize,
        /// Jobs per reserve call
        #[arg(long, default_value_t = 100)]
        max: usize,
        /// How a consumer acks what it reserved: `inline` (ack the batch,
        /// wait for the answer, then reserve again) or `pipelined` (send
        /// the acks and reserve again at once, one ack call in flight per
        /// consumer, as the Rust Worker's acker runs beside its reserves)
        #[arg(long, value_enum, default_value_t = Acks::Inline)]
        acks: Acks,
        #[arg(long, default_value_t = 2)]
        producers: usize,
        /// Jobs per enqueue call (large bodies need fewer to stay within
        /// the server's request limit)
        #[arg(long, default_value_t = 1000)]
        batch: usize,
        #[arg(long, default_value_t = 64)]
        body_bytes: usize,
    },
    /// R jobs/s for T with delays uniform in [a, b]; C consumers reserve and ack
    Steady {
        #[arg(long, default_value_t = 2000)]
        rate: usize,
        #[arg(long, default_value = "30s")]
        duration: String,
        #[arg(long, default_value = "1s..10s")]
        delay: String,
        #[arg(long, default_value_t = 8)]
        consumers: usize,
        #[arg(long, default_value_t = 100)]
        max: usize,
        #[arg(long, default_value_t = 64)]
        body_bytes: usize,
    },
    /// With N jobs scheduled a day ahead: batch enqueue speed, then a steady
    /// flow's lateness (compare N = 10000 with 1000000 and more)
    Backlog {
        #[arg(long, default_value_t = 1_000_000)]
        scheduled: usize,
        /// Jobs in the enqueue measurement
        #[arg(long, default_value_t = 100_000)]
        jobs: usize,
        #[arg(long, default_value_t = 2000)]
        rate: usize,
        #[arg(long, default_value = "10s")]
        duration: String,
        #[arg(long, default_value = "1s..3s")]
        delay: String,
        #[arg(long, default_value_t = 8)]
        consumers: usize,
    },
    /// Push delivery to a local receiver started by the bench: R jobs/s for T
    /// with delays in [a, b] (lateness), or with --rate 0, N jobs due at once
    /// (deliveries/s)
    Push {
        #[arg(long, default_value_t = 2000)]
        rate: usize,
        #[arg(long, default_value = "20s")]
        duration: String,
        #[arg(long, default_value = "1s..10s")]
        delay: String,
        /// With --rate 0: jobs enqueued at once, all due now
        #[arg(long, default_value_t = 50_000)]
        jobs: usize,
        /// Deliveries in flight at once
        #[arg(long, default_value_t = 64)]
        concurrency: usize,
    },
    /// Forwarding into a Redis Stream read by the bench (`XREAD`): R jobs/s
    /// for T with delays in [a, b] (lateness), or with --rate 0, N jobs due
    /// at once (jobs/s)
    Forward {
        /// The target Redis (the store's own for the one-script path)
        #[arg(long)]
        target: String,
        #[arg(long, default_value_t = 2000)]
        rate: usize,
        #[arg(long, default_value = "20s")]
        duration: String,
        #[arg(long, default_value = "1s..10s")]
        delay: String,
        /// With --rate 0: jobs enqueued at once, all due now
        #[arg(long, default_value_t = 50_000)]
        jobs: usize,
    },
    /// N topics of one job each (due in an hour) and, while they exist: idle
    /// CPU of dq and of its store, the time to list them, reserve latency
    /// over many topics against one, a steady flow's lateness; then they are
    /// deleted (unless --keep)
    Topics {
        #[arg(long, default_value_t = 100_000)]
        topics: usize,
        /// Seconds without client traffic over which CPU is measured
        #[arg(long, default_value_t = 10)]
        idle_secs: u64,
        /// Topics named by the many-topic reserve (at most --topics, and at
        /// most what the server allows in one reserve)
        #[arg(long, default_value_t = 1000)]
        watch: usize,
        /// Reserves timed per case
        #[arg(long, default_value_t = 200)]
        iterations: usize,
        /// Topic creations (and deletions) in flight at once
        #[arg(long, default_value_t = 64)]
        concurrency: usize,
        /// The steady flow's jobs/s
        #[arg(long, default_value_t = 2000)]
        rate: usize,
        #[arg(long, default_value = "10s")]
        duration: String,
        #[arg(long, alias = "delays", default_value = "1s..10s")]
        delay: String,
        #[arg(long, default_value_t = 8)]
        consumers: usize,
        /// dq's process id [default: the process of this user listening on
        /// --server's port]
        #[arg(long)]
        dq_pid: Option<u32>,
        /// The store's process id [default: the one listening on the port of
        /// --redis]
        #[arg(long)]
        store_pid: Option<u32>,
        /// The server's Redis URL, to find its redis-server [default: the
        /// --redis on dq's command line]
        #[arg(long)]
        redis: Option<String>,
    },
    /// Store bytes per scheduled job: N jobs of a body size, measured on the
    /// embedded store's directory or Redis' INFO memory
    Storage {
        #[arg(long, default_value_t = 100_000)]
        jobs: usize,
        #[arg(long, default_value_t = 64)]
        body_bytes: usize,
        /// The server's --data-dir (embedded store)
        #[arg(long, conflicts_with = "redis", required_unless_present = "redis")]
        data_dir: Option<std::path::PathBuf>,
        /// The server's Redis URL
        #[arg(long)]
        redis: Option<String>,
    },
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

fn range_ms(text: &str) -> Result<(u64, u64)> {
    let (a, b) = text
        .split_once("..")
        .ok_or_else(|| anyhow!("{text:?} is not a range like 1s..10s"))?;
    let ms = |t: &str| -> Result<u64> {
        Ok(humantime::parse_duration(t.trim())
            .with_context(|| format!("{t:?} is not a duration"))?
            .as_millis() as u64)
    };
    let (a, b) = (ms(a)?, ms(b)?);
    if a > b {
        bail!("range {text:?} ends before it starts");
    }
    Ok((a, b))
}

fn progress(len: u64, what: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template("{msg:>10} [{bar:40}] {pos}/{len} {per_sec} eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    pb.set_message(what.to_string());
    pb
}

/// Enqueues `n` jobs with `producers` tasks in batches; `job(i)` builds job i.
async fn produce(
    api: &Client,
    topic: &str,
    n: usize,
    batch: usize,
    producers: usize,
    job: Arc<dyn Fn(usize) -> NewJob + Send + Sync>,
    pb: &ProgressBar,
) -> Result<u64> {
    produce_noting(api, topic, n, batch, producers, job, pb, None).await
}

/// [`produce`], noting in `acked[i]` when (µs, this machine's clock) the
/// server acknowledged the enqueue of job `i`.
#[allow(clippy::too_many_arguments)]
async fn produce_noting(
    api: &Client,
    topic: &str,
    n: usize,
    batch: usize,
    producers: usize,
    job: Arc<dyn Fn(usize) -> NewJob + Send + Sync>,
    pb: &ProgressBar,
    acked: Option<Arc<Vec<AtomicU64>>>,
) -> Result<u64> {
    let next = Arc::new(AtomicUsize::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..producers {
        let (api, next, errors, job, pb, acked) = (
            api.clone(),
            next.clone(),
            errors.clone(),
            job.clone(),
            pb.clone(),
            acked.clone(),
        );
        let topic = topic.to_string();
        tasks.push(tokio::spawn(async move {
            loop {
                let start = next.fetch_add(batch, Ordering::SeqCst);
                if start >= n {
                    return;
                }
                let end = (start + batch).min(n);
                let ok = if batch == 1 {
                    api.enqueue(&topic, &job(start)).await.is_ok()
                } else {
                    let jobs: Vec<NewJob> = (start..end).map(|i| job(i)).collect();
                    match api.enqueue_batch(&topic, &jobs).await {
                        Ok(r) => r.iter().all(Result::is_ok),
                        Err(_) => false,
                    }
                };
                if !ok {
                    errors.fetch_add((end - start) as u64, Ordering::Relaxed);
                }
                if let Some(acked) = &acked {
                    let at = now_us();
                    for a in &acked[start..end] {
                        a.store(at, Ordering::Relaxed);
                    }
                }
                pb.inc((end - start) as u64);
            }
        }));
    }
    for t in tasks {
        t.await?;
    }
    Ok(errors.load(Ordering::Relaxed))
}

/// What consumers observed.
struct Observed {
    /// Hand-outs per id.
    seen: HashMap<String, u32>,
    /// Per id, its due time and when it was first received (µs).
    first: HashMap<String, (u64, u64)>,
    /// Lateness in µs.
    lateness: Histogram<u64>,
    early: u64,
    last_us: u64,
    /// Jobs the server answered `acked` for.
    acked: u64,
    /// Acks refused (an item's error) or lost with a failed call.
    ack_errors: u64,
}

/// How a bench consumer acks the jobs it reserved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Acks {
    /// Ack a batch, wait for the answer, then reserve again.
    Inline,
    /// Send a batch's acks and reserve again without waiting for them (at
    /// most one ack call in flight per consumer).
    Pipelined,
}

impl Observed {
    /// Nothing seen yet, room for `expected` ids.
    fn new(expected: usize) -> Result<Self> {
        Ok(Self {
            seen: HashMap::with_capacity(expected),
            first: HashMap::with_capacity(expected),
            lateness: Histogram::new_with_bounds(1, 3_600_000_000, 3)?,
            early: 0,
            last_us: 0,
            acked: 0,
            ack_errors: 0,
        })
    }

    /// One hand-out of `id`, due at `due_ms`, received at `received_us`:
    /// early, or its lateness.
    fn record(&mut self, id: String, due_ms: u64, received_us: u64) {
        let due_us = due_ms * 1000;
        if received_us < due_us {
            self.early += 1;
        } else {
            let _ = self.lateness.record((received_us - due_us).max(1));
        }
        self.first
            .entry(id.clone())
            .or_insert((due_us, received_us));
        *self.seen.entry(id).or_default() += 1;
        self.last_us = self.last_us.max(received_us);
    }

    /// The lateness of the jobs due in each second after `t0_ms` (the run's
    /// start, which the window counts from): `[second, jobs, p99_ms,
    /// max_ms]` rows, in order, so a tail is placed in the run (while the
    /// producer was still enqueueing, or later).
    fn lateness_by_second(&self, t0_ms: u64) -> Result<Vec<Value>> {
        let mut by: std::collections::BTreeMap<u64, Histogram<u64>> = Default::default();
        for (due_us, received_us) in self.first.values() {
            let s = (due_us / 1000).saturating_sub(t0_ms) / 1000;
            let h = match by.entry(s) {
                std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::btree_map::Entry::Vacant(e) => {
                    e.insert(Histogram::new_with_bounds(1, 3_600_000_000, 3)?)
                }
            };
            let _ = h.record(received_us.saturating_sub(*due_us).max(1));
        }
        Ok(by
            .into_iter()
            .map(|(s, h)| json!([s, h.len(), ms(h.value_at_quantile(0.99)), ms(h.max())]))
            .collect())
    }

    /// Lateness measured from the later of each job's due time and the
    /// acknowledgement of its enqueue (`acked[i]` for the id ending in
    /// `-i`): a producer still enqueueing when jobs are due is told apart
    /// from a slow queue. A job handed out before its enqueue's reply
    /// arrived counts as on time.
    fn lateness_from_ack(&self, acked: &[AtomicU64]) -> Result<Histogram<u64>> {
        let mut h = Histogram::new_with_bounds(1, 3_600_000_000, 3)?;
        for (id, (due_us, received_us)) in &self.first {
            let ack = id
                .rsplit_once('-')
                .and_then(|(_, i)| i.parse::<usize>().ok())
                .and_then(|i| acked.get(i))
                .map_or(0, |a| a.load(Ordering::Relaxed));
            let from = (*due_us).max(ack);
            let _ = h.record(received_us.saturating_sub(from).max(1));
        }
        Ok(h)
    }
}

/// Acks `acks` in one call; counts what was acked and what was not into
/// `tally` (acked, errors).
async fn ack_counted(api: &Client, acks: Vec<Ack>, tally: &(AtomicU64, AtomicU64)) {
    let n = acks.len() as u64;
    let acked = match api.ack_batch(&acks).await {
        Ok(results) => (results.iter().filter(|r| r.is_ok()).count() as u64).min(n),
        Err(_) => 0,
    };
    tally.0.fetch_add(acked, Ordering::Relaxed);
    tally.1.fetch_add(n - acked, Ordering::Relaxed);
}

/// Waits for a pipelined ack call (its task and its number of acks); a
/// task that did not finish counts its acks as errors.
async fn ack_landed(call: (tokio::task::JoinHandle<()>, u64), tally: &(AtomicU64, AtomicU64)) {
    let (task, n) = call;
    if task.await.is_err() {
        tally.1.fetch_add(n, Ordering::Relaxed);
    }
}

/// Runs `c` consumers until `expected` distinct jobs were received or
/// `deadline`, each reserving `max` at a time and acking as `acks` says.
#[allow(clippy::too_many_arguments)]
async fn consume(
    api: &Client,
    topic: &str,
    c: usize,
    max: usize,
    ack_mode: Acks,
    expected: usize,
    deadline: Instant,
    pb: &ProgressBar,
) -> Result<Observed> {
    let obs = Arc::new(Mutex::new(Observed::new(expected)?));
    let done = Arc::new(AtomicBool::new(false));
    let tally = Arc::new((AtomicU64::new(0), AtomicU64::new(0)));
    let mut tasks = Vec::new();
    for _ in 0..c {
        let (api, obs, done, pb) = (api.clone(), obs.clone(), done.clone(), pb.clone());
        let tally = tally.clone();
        let topic = topic.to_string();
        tasks.push(tokio::spawn(async move {
            // Pipelined: the ack call still in flight, awaited before the
            // next one is sent and when the consumer stops.
            let mut in_flight: Option<(tokio::task::JoinHandle<()>, u64)> = None;
            while !done.load(Ordering::SeqCst) && Instant::now() < deadline {
                let req = Reserve::new([topic.clone()])
                    .max(max)
                    .wait(Duration::from_millis(500))
                    .lease(Duration::from_secs(120));
                let jobs = match api.reserve(&req).await {
                    Ok(jobs) => jobs,
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let received = now_us();
                if jobs.is_empty() {
                    continue;
                }
                {
                    let mut o = obs.lock().expect("poisoned");
                    for j in &jobs {
                        o.record(j.id.clone(), j.due_at_ms, received);
                    }
                    if o.seen.len() >= expected {
                        done.store(true, Ordering::SeqCst);
                    }
                }
                pb.inc(jobs.len() as u64);
                let acks: Vec<Ack> = jobs
                    .into_iter()
                    .map(|j| Ack {
                        topic: j.topic,
                        id: j.id,
                        token: j.token,
                    })
                    .collect();
                match ack_mode {
                    Acks::Inline => ack_counted(&api, acks, &tally).await,
                    Acks::Pipelined => {
                        if let Some(previous) = in_flight.take() {
                            ack_landed(previous, &tally).await;
                        }
                        let n = acks.len() as u64;
                        let (api, tally) = (api.clone(), tally.clone());
                        let task = tokio::spawn(async move {
                            ack_counted(&api, acks, &tally).await;
                        });
                        in_flight = Some((task, n));
                    }
                }
            }
            if let Some(last) = in_flight {
                ack_landed(last, &tally).await;
            }
        }));
    }
    for t in tasks {
        t.await?;
    }
    let mut obs = Arc::try_unwrap(obs)
        .map_err(|_| anyhow!("consumers still running"))?
        .into_inner()
        .expect("poisoned");
    obs.acked = tally.0.load(Ordering::Relaxed);
    obs.ack_errors = tally.1.load(Ordering::Relaxed);
    Ok(obs)
}

/// The embedded store's writer counters, read from `/metrics`
/// (`dq_embedded_writer_*`; absent on Redis).
struct WriterWork {
    at: Instant,
    operations: f64,
    commits: f64,
    busy: f64,
    commit: f64,
}

impl WriterWork {
    async fn read(server: &str, token: Option<&str>) -> Option<Self> {
        use dq_embedded::writer::{WORK_BUSY, WORK_COMMIT, WORK_COMMITS, WORK_OPERATIONS};
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()
            .ok()?;
        let mut req = http.get(format!("{}/metrics", server.trim_end_matches('/')));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let res = match req.send().await {
            Ok(r) if r.status().is_success() => r,
            Ok(r) => {
                eprintln!("bench: /metrics answered {}: no writer figures", r.status());
                return None;
            }
            Err(e) => {
                eprintln!("bench: cannot read /metrics ({e}): no writer figures");
                return None;
            }
        };
        let text = res.text().await.ok()?;
        let get = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse::<f64>().ok())
        };
        Some(Self {
            at: Instant::now(),
            operations: get(WORK_OPERATIONS)?,
            commits: get(WORK_COMMITS)?,
            busy: get(WORK_BUSY)?,
            commit: get(WORK_COMMIT)?,
        })
    }

    /// The writer's share of the time between two reads: busy (running
    /// calls and committing) and committing (its fsyncs and checkpoints
    /// included), the commits and the calls per commit (the reads' own
    /// calls among them: one or two).
    fn since(&self, before: &Self) -> Value {
        let wall = (self.at - before.at).as_secs_f64().max(1e-9);
        let commits = self.commits - before.commits;
        let share = |x: f64| (x / wall * 1000.0).round() / 1000.0;
        json!({
            "busy_share": share(self.busy - before.busy),
            "commit_share": share(self.commit - before.commit),
            "commits": commits as u64,
            "calls_per_commit": ((self.operations - before.operations) / commits.max(1.0) * 100.0).round() / 100.0,
        })
    }
}

fn ms(us: u64) -> f64 {
    (us as f64 / 1000.0 * 10.0).round() / 10.0
}

fn lateness_json(h: &Histogram<u64>) -> Value {
    json!({
        "p50_ms": ms(h.value_at_quantile(0.5)),
        "p90_ms": ms(h.value_at_quantile(0.9)),
        "p99_ms": ms(h.value_at_quantile(0.99)),
        "p999_ms": ms(h.value_at_quantile(0.999)),
        "max_ms": ms(h.max()),
    })
}

fn print(result: &Value) {
    let mut t = Table::new();
    t.load_preset(comfy_table::presets::UTF8_BORDERS_ONLY);
    t.set_header(vec!["figure", "value"]);
    fn rows(prefix: &str, v: &Value, t: &mut Table) {
        if let Some(o) = v.as_object() {
            for (k, v) in o {
                let name = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                if v.is_object() {
                    rows(&name, v, t);
                } else {
                    t.add_row(vec![name, v.to_string()]);
                }
            }
        }
    }
    rows("", result, &mut t);
    println!("{t}");
    println!("{result}");
}

/// The parameters of a steady flow.
struct SteadyPlan {
    rate: usize,
    secs: f64,
    delay: (u64, u64),
    consumers: usize,
    max: usize,
    body_bytes: usize,
}

impl SteadyPlan {
    fn parse(
        rate: usize,
        duration: &str,
        delay: &str,
        consumers: usize,
        max: usize,
        body_bytes: usize,
    ) -> Result<Self> {
        Ok(Self {
            rate: rate.max(1),
            secs: humantime::parse_duration(duration)
                .context("--duration")?
                .as_secs_f64(),
            delay: range_ms(delay)?,
            consumers,
            max,
            body_bytes,
        })
    }
}

/// Enqueues `rate` jobs/s for `secs` (a batch every 10 ms), delays uniform
/// in `delay`; ids are `<run_id>-<n>`. Returns the jobs not accepted.
async fn feed(api: &Client, topic: &str, run_id: &str, p: &SteadyPlan) -> u64 {
    let (a, b) = p.delay;
    let jobs = (p.rate as f64 * p.secs) as usize;
    let bd = body(p.body_bytes);
    let t0 = Instant::now();
    let mut sent = 0usize;
    let mut errors = 0u64;
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    while sent < jobs {
        tick.tick().await;
        let owed = ((t0.elapsed().as_secs_f64() * p.rate as f64) as usize).min(jobs);
        if owed <= sent {
            continue;
        }
        let batch: Vec<NewJob> = (sent..owed)
            .map(|i| {
                let d = a + if b > a {
                    rand::random_range(0..=(b - a))
                } else {
                    0
                };
                NewJob::json(&bd)
                    .id(format!("{run_id}-{i}"))
                    .delay(Duration::from_millis(d))
            })
            .collect();
        for chunk in batch.chunks(1000) {
            if api.enqueue_batch(topic, chunk).await.is_err() {
                errors += chunk.len() as u64;
            }
        }
        sent = owed;
    }
    errors
}

/// A local HTTP receiver for push benches: records, per job id, the hand-outs
/// and the lateness (receipt − `Dq-Due-At`), answers 204.
async fn receiver(expected: usize) -> Result<(String, Arc<Mutex<Observed>>)> {
    let obs = Arc::new(Mutex::new(Observed::new(expected)?));
    let o = obs.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: axum::http::HeaderMap| {
            let o = o.clone();
            async move {
                let received = now_us();
                let due_ms = headers
                    .get("dq-due-at")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0);
                let id = headers
                    .get("dq-job-id")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_string();
                o.lock().expect("poisoned").record(id, due_ms, received);
                axum::http::StatusCode::NO_CONTENT
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/hook", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((url, obs))
}

/// `rate` jobs/s for `secs`, delays uniform in `delay`, consumed as they fall due.
async fn steady(api: &Client, topic: &str, run_id: &str, p: &SteadyPlan) -> Result<Value> {
    let (a, b) = p.delay;
    let jobs = (p.rate as f64 * p.secs) as usize;
    let pb = progress(jobs as u64, "handed out");
    let deadline = Instant::now()
        + Duration::from_secs_f64(p.secs)
        + Duration::from_millis(b)
        + Duration::from_secs(60);
    let consumer = {
        let (api, topic, pb) = (api.clone(), topic.to_string(), pb.clone());
        let (consumers, max) = (p.consumers, p.max);
        tokio::spawn(async move {
            consume(
                &api,
                &topic,
                consumers,
                max,
                Acks::Inline,
                jobs,
                deadline,
                &pb,
            )
            .await
        })
    };
    let errors = feed(api, topic, run_id, p).await;
    let obs = consumer.await??;
    pb.finish_and_clear();
    let dup: u64 = obs
        .seen
        .values()
        .map(|c| (*c as u64).saturating_sub(1))
        .sum();
    Ok(
        json!({"rate": p.rate, "seconds": p.secs, "delay_ms": [a, b], "jobs": jobs,
              "consumers": p.consumers, "enqueue_errors": errors,
              "acked": obs.acked, "ack_errors": obs.ack_errors,
              "lateness": lateness_json(&obs.lateness),
              "lost": jobs.saturating_sub(obs.seen.len()), "duplicated": dup, "early": obs.early}),
    )
}

/// Jobs a push or forward bench expects: `rate` × its duration, or with
/// rate 0 the `jobs` enqueued at once.
fn expected_jobs(rate: usize, jobs: usize, plan: &SteadyPlan) -> usize {
    if rate == 0 {
        jobs
    } else {
        (rate as f64 * plan.secs) as usize
    }
}

/// Feeds a topic dq delivers itself (push, forward) and waits until `obs`
/// saw every job (or a minute past the last due time): lateness, lost,
/// duplicated, early, and with rate 0 the jobs per second.
async fn delivered(
    api: &Client,
    topic: &str,
    run_id: &str,
    rate: usize,
    jobs: usize,
    plan: &SteadyPlan,
    obs: &Arc<Mutex<Observed>>,
) -> Result<Value> {
    let expected = expected_jobs(rate, jobs, plan);
    let pb = progress(expected as u64, "delivered");
    let started = Instant::now();
    let t0_us = now_us();
    let errors = if rate == 0 {
        let bd = body(64);
        let rid = run_id.to_string();
        let job = Arc::new(move |i: usize| NewJob::json(&bd).id(format!("{rid}-{i}")));
        produce(api, topic, jobs, 1000, 2, job, &ProgressBar::hidden()).await?
    } else {
        feed(api, topic, run_id, plan).await
    };
    let limit = started
        + Duration::from_secs_f64(plan.secs)
        + Duration::from_millis(plan.delay.1)
        + Duration::from_secs(60);
    loop {
        let n = obs.lock().expect("poisoned").seen.len();
        pb.set_position(n as u64);
        if n >= expected || Instant::now() > limit {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Late duplicates would show up shortly after.
    tokio::time::sleep(Duration::from_millis(200)).await;
    pb.finish_and_clear();
    let o = obs.lock().expect("poisoned");
    let dup: u64 = o.seen.values().map(|c| (*c as u64).saturating_sub(1)).sum();
    let wall = (o.last_us.saturating_sub(t0_us)) as f64 / 1e6;
    let mut v = json!({"jobs": expected, "enqueue_errors": errors,
           "lateness": lateness_json(&o.lateness),
           "lost": expected.saturating_sub(o.seen.len()), "duplicated": dup, "early": o.early});
    if rate == 0 {
        v["seconds"] = json!((wall * 1000.0).round() / 1000.0);
        v["deliveries_per_s"] = json!((o.seen.len() as f64 / wall.max(0.001)).round());
    } else {
        v["rate"] = json!(rate);
        v["delay_ms"] = json!([plan.delay.0, plan.delay.1]);
    }
    Ok(v)
}

/// A reader of the forward bench's stream (`XREAD BLOCK` from the start):
/// records, per job id, the entries and the lateness (receipt − the
/// entry's `due_at_ms`).
async fn stream_reader(url: &str, stream: &str, expected: usize) -> Result<Arc<Mutex<Observed>>> {
    let obs = Arc::new(Mutex::new(Observed::new(expected)?));
    let mut c = redis::Client::open(url)
        .context("--target")?
        .get_multiplexed_async_connection()
        .await
        .context("cannot reach the --target Redis")?;
    let (o, stream) = (obs.clone(), stream.to_string());
    tokio::spawn(async move {
        let mut from = "0".to_string();
        loop {
            let r: redis::RedisResult<redis::streams::StreamReadReply> = redis::cmd("XREAD")
                .arg("COUNT")
                .arg(1000)
                .arg("BLOCK")
                .arg(500)
                .arg("STREAMS")
                .arg(&stream)
                .arg(&from)
                .query_async(&mut c)
                .await;
            let Ok(reply) = r else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            let received = now_us();
            let mut o = o.lock().expect("poisoned");
            for k in reply.keys {
                for e in k.ids {
                    from = e.id.clone();
                    let id: String = e.get("id").unwrap_or_default();
                    o.record(id, e.get::<u64>("due_at_ms").unwrap_or(0), received);
                }
            }
            if o.seen.len() >= expected {
                return;
            }
        }
    });
    Ok(obs)
}

fn body(bytes: usize) -> Value {
    Value::String("x".repeat(bytes))
}

impl BenchArgs {
    pub(crate) async fn run(self) -> Result<()> {
        // No retries: a refused call is counted, not hidden.
        let mut api = Client::new(self.server.trim_end_matches('/'))
            .context("cannot build HTTP client")?
            .retries(0);
        if let Some(t) = &self.token {
            api = api.token(t.clone());
        }
        let run_id = format!("{:06x}", rand::random::<u32>() & 0xff_ffff);
        let name = match &self.scenario {
            Scenario::Enqueue { .. } => "enqueue",
            Scenario::Drain { .. } => "drain",
            Scenario::Steady { .. } => "steady",
            Scenario::Backlog { .. } => "backlog",
            Scenario::Push { .. } => "push",
            Scenario::Forward { .. } => "forward",
            Scenario::Storage { .. } => "storage",
            Scenario::Topics { .. } => "topics",
        };
        let topic = self
            .topic
            .clone()
            .unwrap_or_else(|| format!("bench-{name}-{run_id}"));
        if let Some(n) = self.partitions {
            let patch = dq_core::TopicConfigPatch {
                partitions: Some(n),
                ..Default::default()
            };
            api.configure_topic(&topic, &patch)
                .await
                .context("setting the bench topic's partitions")?;
        }
        let result = match self.scenario {
            Scenario::Enqueue {
                jobs,
                batch,
                producers,
                body_bytes,
            } => {
                let batch = batch.clamp(1, 1000);
                let b = body(body_bytes);
                let rid = run_id.clone();
                let job = Arc::new(move |i: usize| {
                    NewJob::json(&b)
                        .id(format!("{rid}-{i}"))
                        .delay(Duration::from_millis(3_600_000))
                });
                let pb = progress(jobs as u64, "enqueue");
                let t0 = Instant::now();
                let errors = produce(&api, &topic, jobs, batch, producers, job, &pb).await?;
                let secs = t0.elapsed().as_secs_f64();
                pb.finish_and_clear();
                json!({"scenario": "enqueue", "jobs": jobs, "batch": batch, "producers": producers,
                       "body_bytes": body_bytes, "seconds": (secs * 1000.0).round() / 1000.0,
                       "jobs_per_s": (jobs as f64 / secs).round(), "errors": errors})
            }
            Scenario::Drain {
                jobs,
                window,
                consumers,
                max,
                acks,
                producers,
                batch,
                body_bytes,
            } => {
                let (a, b) = range_ms(&window)?;
                // CPU of dq and of its store over the whole run (enqueue,
                // reserve, ack): the cost of a job's lifecycle.
                let procs = topics::processes(&self.server, &topics::Given::default());
                let cpu0 = procs.cpu_us();
                let work0 = WriterWork::read(&self.server, self.token.as_deref()).await;
                let t0_ms = now_us() / 1000;
                let bd = body(body_bytes);
                let rid = run_id.clone();
                let job = Arc::new(move |i: usize| {
                    let due = t0_ms
                        + a
                        + if b > a {
                            rand::random_range(0..=(b - a))
                        } else {
                            0
                        };
                    NewJob::json(&bd).id(format!("{rid}-{i}")).due_at_ms(due)
                });
                let pb = progress(jobs as u64, "handed out");
                let deadline = Instant::now() + Duration::from_millis(b) + Duration::from_secs(120);
                let started = Instant::now();
                let consumer = {
                    let (api, topic, pb) = (api.clone(), topic.clone(), pb.clone());
                    tokio::spawn(async move {
                        consume(&api, &topic, consumers, max, acks, jobs, deadline, &pb).await
                    })
                };
                // The writer's counters again when the last job is handed
                // out (not when the consumers stop: their last long polls
                // would add idle time).
                let work_end = {
                    let (server, token, pb) = (self.server.clone(), self.token.clone(), pb.clone());
                    tokio::spawn(async move {
                        while pb.position() < jobs as u64 && Instant::now() < deadline {
                            tokio::time::sleep(Duration::from_millis(1)).await;
                        }
                        WriterWork::read(&server, token.as_deref()).await
                    })
                };
                let enq_pb = ProgressBar::hidden();
                let acked: Arc<Vec<AtomicU64>> =
                    Arc::new((0..jobs).map(|_| AtomicU64::new(0)).collect());
                let errors = produce_noting(
                    &api,
                    &topic,
                    jobs,
                    batch.max(1),
                    producers,
                    job,
                    &enq_pb,
                    Some(acked.clone()),
                )
                .await?;
                let enqueue_s = started.elapsed().as_secs_f64();
                let obs = consumer.await??;
                let cpu1 = procs.cpu_us();
                let work1 = work_end.await.ok().flatten();
                pb.finish_and_clear();
                let per_job = |a: Option<u64>, b: Option<u64>| match (a, b) {
                    (Some(a), Some(b)) if !obs.seen.is_empty() => {
                        json!(
                            ((b.saturating_sub(a)) as f64 / obs.seen.len() as f64 * 10.0).round()
                                / 10.0
                        )
                    }
                    _ => Value::Null,
                };
                let cpu = json!({"dq": per_job(cpu0.0, cpu1.0), "store": per_job(cpu0.1, cpu1.1),
                                 "measured": procs.how()});
                let wall = (obs.last_us.saturating_sub(t0_ms * 1000)) as f64 / 1e6;
                let writer = work1
                    .zip(work0)
                    .map_or(Value::Null, |(w1, w0)| w1.since(&w0));
                let active = wall - a as f64 / 1000.0;
                let dup: u64 = obs
                    .seen
                    .values()
                    .map(|c| (*c as u64).saturating_sub(1))
                    .sum();
                json!({"scenario": "drain", "jobs": jobs, "window_ms": [a, b], "consumers": consumers, "max": max, "batch": batch,
                       "acks": acks.to_possible_value().map(|v| v.get_name().to_string()), "acked": obs.acked, "ack_errors": obs.ack_errors,
                       "enqueue_seconds": (enqueue_s * 1000.0).round() / 1000.0, "enqueue_errors": errors,
                       "seconds": (wall * 1000.0).round() / 1000.0,
                       "jobs_per_s": (obs.seen.len() as f64 / active.max(0.001)).round(),
                       "lateness": lateness_json(&obs.lateness),
                       "lateness_from_enqueue_ack": lateness_json(&obs.lateness_from_ack(&acked)?),
                       "lateness_by_due_second": obs.lateness_by_second(t0_ms)?,
                       "cpu_us_per_job": cpu, "writer": writer,
                       "lost": jobs.saturating_sub(obs.seen.len()), "duplicated": dup, "early": obs.early})
            }
            Scenario::Steady {
                rate,
                duration,
                delay,
                consumers,
                max,
                body_bytes,
            } => {
                let plan = SteadyPlan::parse(rate, &duration, &delay, consumers, max, body_bytes)?;
                let mut v = steady(&api, &topic, &run_id, &plan).await?;
                v["scenario"] = json!("steady");
                v
            }
            Scenario::Backlog {
                scheduled,
                jobs,
                rate,
                duration,
                delay,
                consumers,
            } => {
                // 1. The backlog: jobs due in a day, never handed out here.
                let b = body(64);
                let rid = run_id.clone();
                let fill = Arc::new(move |i: usize| {
                    NewJob::json(&b)
                        .id(format!("{rid}-b{i}"))
                        .delay(Duration::from_millis(86_400_000))
                });
                let pb = progress(scheduled as u64, "backlog");
                let t0 = Instant::now();
                let fill_errors = produce(&api, &topic, scheduled, 1000, 4, fill, &pb).await?;
                let fill_s = t0.elapsed().as_secs_f64();
                pb.finish_and_clear();
                // 2. Batch enqueue on top of it.
                let b = body(64);
                let rid = run_id.clone();
                let more = Arc::new(move |i: usize| {
                    NewJob::json(&b)
                        .id(format!("{rid}-e{i}"))
                        .delay(Duration::from_millis(86_400_000))
                });
                let pb = progress(jobs as u64, "enqueue");
                let t0 = Instant::now();
                let errors = produce(&api, &topic, jobs, 1000, 4, more, &pb).await?;
                let enq_s = t0.elapsed().as_secs_f64();
                pb.finish_and_clear();
                // 3. A steady flow through the same topic.
                let plan = SteadyPlan::parse(rate, &duration, &delay, consumers, 100, 64)?;
                let flow = steady(&api, &topic, &format!("{run_id}-s"), &plan).await?;
                json!({"scenario": "backlog", "scheduled": scheduled,
                       "fill_jobs_per_s": (scheduled as f64 / fill_s).round(), "fill_errors": fill_errors,
                       "enqueue_jobs_per_s": (jobs as f64 / enq_s).round(), "enqueue_errors": errors,
                       "steady": flow, "lost": flow["lost"], "duplicated": flow["duplicated"],
                       "early": flow["early"], "ack_errors": flow["ack_errors"]})
            }
            Scenario::Push {
                rate,
                duration,
                delay,
                jobs,
                concurrency,
            } => {
                let plan = SteadyPlan::parse(rate.max(1), &duration, &delay, 0, 0, 64)?;
                let expected = expected_jobs(rate, jobs, &plan);
                let (url, obs) = receiver(expected).await?;
                let push = dq_core::PushConfig {
                    url,
                    method: dq_core::PushMethod::Post,
                    timeout_ms: 3000,
                    headers: Default::default(),
                    concurrency: u32::try_from(concurrency).unwrap_or(u32::MAX),
                    secrets: Vec::new(),
                };
                let patch = dq_core::TopicConfigPatch {
                    delivery: Some(dq_core::Delivery::Push(push)),
                    ..Default::default()
                };
                api.configure_topic(&topic, &patch).await?;
                let mut v = delivered(&api, &topic, &run_id, rate, jobs, &plan, &obs).await?;
                v["scenario"] = json!("push");
                v["concurrency"] = json!(concurrency);
                v
            }
            Scenario::Forward {
                target,
                rate,
                duration,
                delay,
                jobs,
            } => {
                let plan = SteadyPlan::parse(rate.max(1), &duration, &delay, 0, 0, 64)?;
                let expected = expected_jobs(rate, jobs, &plan);
                let stream = format!("dq-bench:{run_id}");
                let obs = stream_reader(&target, &stream, expected).await?;
                let patch = dq_core::TopicConfigPatch {
                    delivery: Some(dq_core::Delivery::RedisStream(
                        dq_core::forward::StreamTarget {
                            url: target.clone(),
                            stream: stream.clone(),
                            maxlen: None,
                            fields: dq_core::forward::StreamFields::Flat,
                        },
                    )),
                    ..Default::default()
                };
                api.configure_topic(&topic, &patch).await?;
                let mut v = delivered(&api, &topic, &run_id, rate, jobs, &plan, &obs).await?;
                v["scenario"] = json!("forward");
                let mut c = redis::Client::open(target.as_str())?
                    .get_multiplexed_async_connection()
                    .await?;
                let _: () = redis::cmd("DEL").arg(&stream).query_async(&mut c).await?;
                v
            }
            Scenario::Topics {
                topics,
                idle_secs,
                watch,
                iterations,
                concurrency,
                rate,
                duration,
                delay,
                consumers,
                dq_pid,
                store_pid,
                redis,
            } => {
                let plan = topics::TopicsPlan {
                    topics,
                    idle: Duration::from_secs(idle_secs),
                    watch,
                    iterations,
                    concurrency,
                    dq_pid,
                    store_pid,
                    redis,
                    keep: self.keep,
                    steady: SteadyPlan::parse(rate, &duration, &delay, consumers, 100, 64)?,
                };
                let server = topics::Server {
                    api: &api,
                    base: self.server.trim_end_matches('/'),
                    token: self.token.as_deref(),
                };
                topics::run(&server, &topic, &run_id, &plan).await?
            }
            Scenario::Storage {
                jobs,
                body_bytes,
                data_dir,
                redis,
            } => {
                let measure = |data_dir: &Option<std::path::PathBuf>,
                               redis: &Option<String>|
                 -> Result<u64> {
                    match (data_dir, redis) {
                        (Some(dir), _) => {
                            let mut total = 0;
                            for e in std::fs::read_dir(dir)
                                .with_context(|| format!("read {}", dir.display()))?
                            {
                                let e = e?;
                                if e.file_name().to_string_lossy().starts_with("dq.sqlite3") {
                                    total += e.metadata()?.len();
                                }
                            }
                            Ok(total)
                        }
                        (None, Some(url)) => {
                            let mut c = redis::Client::open(url.as_str())?.get_connection()?;
                            let info: String = redis::cmd("INFO").arg("memory").query(&mut c)?;
                            info.lines()
                                .find_map(|l| l.strip_prefix("used_memory:"))
                                .and_then(|v| v.trim().parse().ok())
                                .ok_or_else(|| anyhow!("no used_memory in INFO"))
                        }
                        _ => bail!("give --data-dir or --redis"),
                    }
                };
                let before = measure(&data_dir, &redis)?;
                let bd = body(body_bytes);
                let rid = run_id.clone();
                let job = Arc::new(move |i: usize| {
                    NewJob::json(&bd)
                        .id(format!("{rid}-{i}"))
                        .delay(Duration::from_millis(3_600_000))
                });
                let pb = progress(jobs as u64, "enqueue");
                let errors = produce(&api, &topic, jobs, 1000, 2, job, &pb).await?;
                pb.finish_and_clear();
                let after = measure(&data_dir, &redis)?;
                let id_len = format!("{run_id}-{}", jobs / 2).len();
                json!({"scenario": "storage", "store": if data_dir.is_some() { "embedded" } else { "redis" },
                       "jobs": jobs, "body_bytes": body_bytes, "id_bytes": id_len, "errors": errors,
                       "bytes_before": before, "bytes_after": after,
                       "bytes_per_job": ((after as f64 - before as f64) / jobs as f64).round()})
            }
        };
        if !self.keep {
            let _ = api.delete_topic(&topic).await;
        }
        print(&result);
        if self.check {
            check(&result)?;
        }
        Ok(())
    }
}

/// The correctness figures of a result, for `--check`.
fn check(result: &Value) -> Result<()> {
    let mut bad = Vec::new();
    for key in [
        "lost",
        "duplicated",
        "early",
        "errors",
        "enqueue_errors",
        "ack_errors",
        "fill_errors",
        "topics_left",
    ] {
        if let Some(n) = result.get(key).and_then(Value::as_u64)
            && n > 0
        {
            bad.push(format!("{key} = {n}"));
        }
    }
    if bad.is_empty() {
        Ok(())
    } else {
        bail!("check failed: {}", bad.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        assert_eq!(range_ms("1s..10s").unwrap(), (1000, 10_000));
        assert_eq!(range_ms("0s..0s").unwrap(), (0, 0));
        assert!(range_ms("10s..1s").is_err());
        assert!(range_ms("soon").is_err());
    }

    #[test]
    fn check_reads_correctness_figures_only() {
        assert!(check(&json!({"lost": 0, "duplicated": 0, "early": 0, "jobs_per_s": 1})).is_ok());
        let e = check(&json!({"lost": 2, "duplicated": 0, "early": 1})).unwrap_err();
        assert!(check(&json!({"lost": 0, "acked": 9, "ack_errors": 0})).is_ok());
        let refused = check(&json!({"lost": 0, "acked": 8, "ack_errors": 1})).unwrap_err();
        assert!(refused.to_string().contains("ack_errors = 1"), "{refused}");
        assert!(
            e.to_string().contains("lost = 2") && e.to_string().contains("early = 1"),
            "{e}"
        );
    }
}
