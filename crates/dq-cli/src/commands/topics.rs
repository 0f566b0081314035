//! Topics: `dq stats` (counts per topic) and `dq topics` (list, put,
//! pause, resume, delete), with the stats table both print.

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use comfy_table::Table;
use dq_client::{Client, TopicInfo, wire};
use dq_core::{
    Clock, Delivery, PushConfig, PushMethod, RetryPolicy, TopicConfig, TopicConfigPatch,
};

use super::flags::{ms, parse_rate, parse_retry};
use crate::conn::Conn;
use crate::output::{bordered, confirm, print_json, rfc3339};

/// `dq stats`.
#[derive(Debug, Args)]
pub(crate) struct Stats {
    #[command(flatten)]
    conn: Conn,
    /// One topic, shown with its settings [default: all topics]
    topic: Option<String>,
}

/// `dq topics`.
#[derive(Debug, Args)]
pub(crate) struct Topics {
    #[command(flatten)]
    conn: Conn,
    #[command(subcommand)]
    cmd: Option<Box<TopicsCmd>>,
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
        /// Expiry of jobs that name none, counted from each job's due time,
        /// e.g. 10m (0 for none): not handed out by then, a job never is
        #[arg(long)]
        expires: Option<String>,
        /// What becomes of an expired job: dead (a dead letter with last
        /// error "expired") or drop
        #[arg(long, value_parser = ["dead", "drop"])]
        on_expiry: Option<String>,
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

impl Stats {
    pub(super) async fn run(self) -> Result<()> {
        let Stats { conn, topic } = self;
        let api = conn.client()?;
        match topic {
            Some(t) => {
                let info = api.topic(&t).await?;
                if conn.json() {
                    print_json(&info);
                } else {
                    println!("{}", stats_table(std::slice::from_ref(&info)));
                    if let Some(cfg) = &info.config {
                        println!("{}", settings_table(cfg));
                    }
                }
            }
            None => print_topics(&api, None, conn.json(), true).await?,
        }
        Ok(())
    }
}

impl Topics {
    pub(super) async fn run(self) -> Result<()> {
        let Topics { conn, cmd } = self;
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
                print_topic_page(&api, query, conn.json()).await?
            }
            TopicsCmd::List {
                prefix,
                limit: None,
                ..
            } => print_topics(&api, prefix.as_deref(), conn.json(), false).await?,
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
                expires,
                on_expiry,
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
                if let Some(e) = expires {
                    patch.expires_ms = Some(ms(&e, "--expires")?);
                }
                patch.on_expiry = on_expiry.as_deref().map(dq_core::OnExpiry::decode);
                if let Some(r) = rate_limit {
                    patch.rate_limit = Some(Some(parse_rate(&r, rate_burst, "--rate-limit")?));
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
                        None => dq_core::topic::PUSH_TIMEOUT_MS,
                    };
                    patch.delivery = Some(Delivery::Push(PushConfig {
                        url,
                        method,
                        timeout_ms,
                        headers: Default::default(),
                        concurrency: push_concurrency.unwrap_or(dq_core::topic::PUSH_CONCURRENCY),
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
                    config_sources: wire::config_sources(&config),
                    config,
                };
                if conn.json() {
                    print_json(&done);
                } else {
                    println!("{} now has:\n{}", done.name, settings_table(&done.config));
                }
            }
            TopicsCmd::Pause { topic } => set_paused(&api, topic, true, conn.json()).await?,
            TopicsCmd::Resume { topic } => set_paused(&api, topic, false, conn.json()).await?,
            TopicsCmd::Delete { topic, yes } => {
                confirm(&format!("Delete topic {topic:?} and all its jobs?"), yes)?;
                let deleted = api.delete_topic(&topic).await?;
                if conn.json() {
                    print_json(&wire::TopicDeleted {
                        name: topic,
                        deleted_jobs: deleted,
                    });
                } else {
                    println!("{topic} deleted with {deleted} jobs");
                }
            }
        }
        Ok(())
    }
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
            config_sources: wire::config_sources(&config),
            config,
        });
    } else if paused {
        println!("{topic} paused: nothing is handed out until `dq topics resume {topic}`");
    } else {
        println!("{topic} resumed");
    }
    Ok(())
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

/// A topic's settings in effect, one a row, in `dq topics put`'s units,
/// each with where it comes from: the default for the topic's delivery
/// mode, or set.
fn settings_table(cfg: &TopicConfig) -> Table {
    let mut t = bordered(vec!["setting", "value", "from"]);
    for line in wire::settings_in_words(cfg) {
        t.add_row(vec![
            line.name.to_string(),
            line.value,
            wire::source_in_words(line.source, cfg.delivery.mode()),
        ]);
    }
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
            dq_core::limits::human_ms_rounded(st.oldest_overdue_ms),
            c.enqueued.to_string(),
            c.acked.to_string(),
            c.failed.to_string(),
        ]);
    }
    t
}
