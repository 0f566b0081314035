//! `dq bench`: load scenarios against a running `dq serve`, through its HTTP
//! API like any client. Each prints a human table and, last, one JSON line of
//! results. Lateness = when a consumer received a job − its due time, both
//! read from this machine's clock (run the bench on the server's machine).
//!
//! This module holds the arguments and dispatches to one module per
//! scenario: [`enqueue`] (also the producers every scenario uses),
//! [`drain`], [`steady`] (the steady flow, and `backlog`), [`delivered`]
//! (`push` and `forward`), [`storage`], [`topics`] (the many-topics
//! scenario). Beside them: [`consume`] (the consumers), [`report`] (what
//! was observed, the figures printed, `--check`), [`writer`] (the embedded
//! writer's counters from `/metrics`), [`procfs`] (CPU time and the
//! listener of a port, read from `/proc`).

mod consume;
mod delivered;
mod drain;
mod enqueue;
mod procfs;
mod report;
mod steady;
mod storage;
mod topics;
mod writer;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, anyhow, bail};

use clap::{Args, Subcommand};
use dq_client::Client;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Value, json};

use consume::Acks;
use steady::{SteadyPlan, steady};

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
            } => enqueue::run(&api, &topic, &run_id, jobs, batch, producers, body_bytes).await?,
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
                let plan = drain::DrainPlan {
                    jobs,
                    window: range_ms(&window)?,
                    consumers,
                    max,
                    acks,
                    producers,
                    batch,
                    body_bytes,
                };
                let (server, token) = (&self.server, self.token.as_deref());
                drain::run(&api, &topic, &run_id, server, token, &plan).await?
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
                let plan = steady::BacklogPlan {
                    scheduled,
                    jobs,
                    rate,
                    duration,
                    delay,
                    consumers,
                };
                steady::backlog(&api, &topic, &run_id, &plan).await?
            }
            Scenario::Push {
                rate,
                duration,
                delay,
                jobs,
                concurrency,
            } => {
                let plan = SteadyPlan::parse(rate.max(1), &duration, &delay, 0, 0, 64)?;
                delivered::push(&api, &topic, &run_id, &plan, rate, jobs, concurrency).await?
            }
            Scenario::Forward {
                target,
                rate,
                duration,
                delay,
                jobs,
            } => {
                let plan = SteadyPlan::parse(rate.max(1), &duration, &delay, 0, 0, 64)?;
                delivered::forward(&api, &topic, &run_id, &plan, &target, rate, jobs).await?
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
                let (data_dir, redis) = (data_dir.as_deref(), redis.as_deref());
                storage::run(&api, &topic, &run_id, jobs, body_bytes, data_dir, redis).await?
            }
        };
        if !self.keep {
            let _ = api.delete_topic(&topic).await;
        }
        report::print(&result);
        if self.check {
            report::check(&result)?;
        }
        Ok(())
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
}
