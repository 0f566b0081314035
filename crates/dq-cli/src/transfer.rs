//! `dq export` and `dq import`: every job, topic setting and schedule of a
//! running server as JSON Lines, and back into any server (any store to
//! any store), through the HTTP API.
//!
//! The file: a header line, then per topic its settings and its jobs, then
//! the schedules, then an end line with the counts (an import without it
//! says the file is cut short). Every line has a `kind`:
//!
//! ```text
//! {"kind":"header","format":"dq-export","version":1,"exported_at_ms":…}
//! {"kind":"topic","name":"orders","config":{…}}
//! {"kind":"job","topic":"orders","job":{"id":"order-1","state":"scheduled","due_at_ms":…,…}}
//! {"kind":"schedule","name":"nightly","spec":{…}}
//! {"kind":"end","topics":1,"jobs":1,"schedules":1}
//! ```
//!
//! Both directions stream: the export writes each page of jobs as it comes
//! (pages of [`PAGE`]), the import sends batches of at most [`BATCH`] jobs
//! or [`BATCH_BYTES`] as it reads; memory stays the same for 10 M jobs.

use std::io::{BufRead, Write};
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Subcommand;
use dq_client::{Client, wire};
use dq_core::{JobState, TopicConfig, TopicConfigPatch};
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};

use crate::conn::Conn;

/// The file format's name, in the header.
const FORMAT: &str = "dq-export";
/// The file format's version: an import refuses a newer one.
const VERSION: u32 = 1;
/// Jobs asked for per page of the export.
const PAGE: usize = 500;
/// Most jobs per import request.
const BATCH: usize = 500;
/// Most bytes of job lines per import request (the server takes 32 MiB).
const BATCH_BYTES: usize = 8 << 20;

#[derive(Debug, Subcommand)]
pub(crate) enum TransferCmd {
    /// Write every job (each state), topic setting and schedule of a running server to stdout as JSON Lines: dq export > FILE
    Export {
        #[command(flatten)]
        conn: Conn,
        /// Only this topic (and its schedules)
        #[arg(long)]
        topic: Option<String>,
    },
    /// Write the jobs, topic settings and schedules of a dq export file into a running server (any store); running it again changes nothing
    Import {
        #[command(flatten)]
        conn: Conn,
        /// A file written by dq export ("-": stdin)
        file: PathBuf,
    },
}

// The lines of the file. Plain structs, each read straight from its line
// (no tagged enum or `flatten`: those buffer the line, and a body must be
// kept as its exact text, which a buffer loses).

/// The first line.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct HeaderLine {
    kind: String,
    format: String,
    version: u32,
    exported_at_ms: u64,
}

/// A topic's settings (push credentials redacted, as the API shows them).
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TopicLine {
    kind: String,
    name: String,
    config: TopicConfig,
}

/// A job; a reserved job is written as ready, due at its lease deadline.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct JobLine {
    kind: String,
    topic: String,
    job: wire::JobRecord,
}

/// A schedule.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScheduleLine {
    kind: String,
    name: String,
    spec: wire::ScheduleSpec,
}

/// The last line: what the file holds.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct EndLine {
    kind: String,
    topics: u64,
    jobs: u64,
    schedules: u64,
}

/// Any line's kind, read first.
#[derive(Deserialize)]
struct Kind {
    kind: String,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn bar(len: u64, unit: &str) -> ProgressBar {
    // indicatif draws on stderr, and only when it is a terminal.
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template(&format!(
            "{{msg}} [{{bar:40}}] {{pos}}/{{len}} {unit} ({{percent}}%)"
        ))
        .expect("a valid template")
        .progress_chars("=> "),
    );
    pb
}

/// A reserved job as the file keeps it: ready, due when its lease ends
/// (it was not done; the attempt it is on stays counted).
fn exported(mut j: wire::JobRecord) -> wire::JobRecord {
    if j.state == JobState::Reserved {
        j.state = JobState::Ready;
        j.due_at_ms = j.lease_deadline_ms.unwrap_or(j.due_at_ms);
    }
    j.lease_deadline_ms = None;
    j
}

/// Whether a delivery holds credentials the API showed redacted (`…`): a
/// push secret or header value, a forwarding URL's password. Those cannot
/// be imported; the operator sets them again.
fn redacted(config: &TopicConfig) -> bool {
    serde_json::to_string(&config.delivery).is_ok_and(|s| s.contains('…'))
}

fn write_line(out: &mut impl Write, line: &impl Serialize) -> Result<()> {
    serde_json::to_writer(&mut *out, line)?;
    out.write_all(b"\n")?;
    Ok(())
}

impl TransferCmd {
    pub(crate) async fn run(self) -> Result<()> {
        match self {
            TransferCmd::Export { conn, topic } => export(&conn.client()?, topic).await,
            TransferCmd::Import { conn, file } => import(&conn.client()?, &file).await,
        }
    }
}

async fn export(api: &Client, only: Option<String>) -> Result<()> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let topics: Vec<wire::TopicInfo> = match &only {
        Some(t) => vec![api.topic(t).await.with_context(|| format!("topic {t}"))?],
        None => api.topics().await.context("listing the topics")?,
    };
    let total: u64 = topics
        .iter()
        .map(|t| t.stats.scheduled + t.stats.ready + t.stats.reserved + t.stats.dead)
        .sum();
    write_line(
        &mut out,
        &HeaderLine {
            kind: "header".into(),
            format: FORMAT.into(),
            version: VERSION,
            exported_at_ms: now_ms(),
        },
    )?;
    let pb = bar(total, "jobs");
    pb.set_message("export");
    let (mut jobs, mut credentials) = (0u64, Vec::new());
    for t in &topics {
        let info = api
            .topic(&t.name)
            .await
            .with_context(|| format!("topic {}", t.name))?;
        let config = info.config.context("the server sent no settings")?;
        if redacted(&config) {
            credentials.push(t.name.clone());
        }
        write_line(
            &mut out,
            &TopicLine {
                kind: "topic".into(),
                name: t.name.clone(),
                config,
            },
        )?;
        let mut cursor: Option<String> = None;
        loop {
            let page = api
                .list_jobs(&t.name, None, cursor.as_deref(), PAGE)
                .await
                .with_context(|| format!("listing the jobs of {} ({jobs} written)", t.name))?;
            for j in page.jobs {
                write_line(
                    &mut out,
                    &JobLine {
                        kind: "job".into(),
                        topic: t.name.clone(),
                        job: exported(j),
                    },
                )?;
                jobs += 1;
                pb.inc(1);
            }
            // Each page on its way before the next is asked for.
            out.flush()?;
            match page.cursor {
                Some(c) => cursor = Some(c),
                None => break,
            }
        }
    }
    let mut schedules = 0u64;
    for s in api.schedules().await.context("listing the schedules")? {
        if only.as_ref().is_some_and(|t| *t != s.spec.topic) {
            continue;
        }
        write_line(
            &mut out,
            &ScheduleLine {
                kind: "schedule".into(),
                name: s.name,
                spec: s.spec,
            },
        )?;
        schedules += 1;
    }
    write_line(
        &mut out,
        &EndLine {
            kind: "end".into(),
            topics: topics.len() as u64,
            jobs,
            schedules,
        },
    )?;
    out.flush()?;
    pb.finish_and_clear();
    eprintln!(
        "exported {jobs} jobs, {} topics, {schedules} schedules",
        topics.len()
    );
    if !credentials.is_empty() {
        eprintln!(
            "note: the delivery credentials of {} (push secrets, header values, forwarding passwords) are write-only and come redacted: set them again after an import",
            credentials.join(", ")
        );
    }
    Ok(())
}

/// Jobs read and not yet sent, all of one topic.
#[derive(Default)]
struct Pending {
    topic: String,
    jobs: Vec<wire::JobRecord>,
    bytes: usize,
    /// The file line of the first job, for errors.
    first_line: usize,
}

/// What an import did.
#[derive(Default)]
struct Counts {
    created: u64,
    existed: u64,
    deduplicated: u64,
    topics: u64,
    schedules: u64,
}

impl Pending {
    async fn send(&mut self, api: &Client, counts: &mut Counts) -> Result<()> {
        if self.jobs.is_empty() {
            return Ok(());
        }
        let results = api
            .import_jobs(&self.topic, &self.jobs)
            .await
            .with_context(|| {
                format!(
                    "importing lines {}-{} (topic {}); nothing of them was written, lines before were: running the import again is safe",
                    self.first_line,
                    self.first_line + self.jobs.len() - 1,
                    self.topic
                )
            })?;
        for r in results {
            if r.created {
                counts.created += 1;
            } else if r.deduplicated {
                counts.deduplicated += 1;
            } else {
                counts.existed += 1;
            }
        }
        self.jobs.clear();
        self.bytes = 0;
        Ok(())
    }
}

async fn import(api: &Client, file: &std::path::Path) -> Result<()> {
    let (reader, size): (Box<dyn BufRead>, u64) = if file.as_os_str() == "-" {
        (Box::new(std::io::BufReader::new(std::io::stdin())), 0)
    } else {
        let f = std::fs::File::open(file).with_context(|| format!("{}", file.display()))?;
        let size = f.metadata().map(|m| m.len()).unwrap_or(0);
        (Box::new(std::io::BufReader::new(f)), size)
    };
    let pb = bar(size, "bytes");
    pb.set_message("import");
    let mut pending = Pending::default();
    let mut counts = Counts::default();
    let mut end: Option<(u64, u64, u64)> = None;
    let mut jobs_read = 0u64;
    let mut credentials = Vec::new();
    for (i, line) in reader.lines().enumerate() {
        let n = i + 1;
        let line = line.with_context(|| format!("reading line {n}"))?;
        pb.inc(line.len() as u64 + 1);
        if line.trim().is_empty() {
            continue;
        }
        if end.is_some() {
            bail!("line {n}: lines after the end line: not a file dq export wrote");
        }
        let kind: Kind = serde_json::from_str(&line)
            .with_context(|| format!("line {n} is not a line of a dq export file"))?;
        let bad = |e: serde_json::Error| anyhow::anyhow!("line {n} ({} line): {e}", kind.kind);
        if n == 1 && kind.kind != "header" {
            bail!("line 1 is not a dq export header: not a file dq export wrote");
        }
        match kind.kind.as_str() {
            "header" => {
                let h: HeaderLine = serde_json::from_str(&line).map_err(bad)?;
                if n != 1 || h.format != FORMAT {
                    bail!("line {n}: a header line must be the first, of format {FORMAT:?}");
                }
                if h.version > VERSION {
                    bail!(
                        "the file is of format version {}, written by a newer dq; this dq reads versions up to {VERSION}",
                        h.version
                    );
                }
            }
            "topic" => {
                let t: TopicLine = serde_json::from_str(&line).map_err(bad)?;
                pending.send(api, &mut counts).await?;
                put_topic(api, &t.name, t.config, &mut credentials)
                    .await
                    .with_context(|| format!("line {n}: topic {}", t.name))?;
                counts.topics += 1;
            }
            "job" => {
                let j: JobLine = serde_json::from_str(&line).map_err(bad)?;
                if pending.topic != j.topic
                    || pending.jobs.len() >= BATCH
                    || pending.bytes + line.len() > BATCH_BYTES
                {
                    pending.send(api, &mut counts).await?;
                    pending.topic = j.topic;
                }
                if pending.jobs.is_empty() {
                    pending.first_line = n;
                }
                pending.bytes += line.len();
                pending.jobs.push(j.job);
                jobs_read += 1;
            }
            "schedule" => {
                let s: ScheduleLine = serde_json::from_str(&line).map_err(bad)?;
                pending.send(api, &mut counts).await?;
                api.put_schedule(&s.name, &s.spec)
                    .await
                    .with_context(|| format!("line {n}: schedule {}", s.name))?;
                counts.schedules += 1;
            }
            "end" => {
                let e: EndLine = serde_json::from_str(&line).map_err(bad)?;
                end = Some((e.topics, e.jobs, e.schedules));
            }
            other => bail!("line {n}: unknown kind {other:?}"),
        }
        pb.set_message(format!("import ({jobs_read} jobs)"));
    }
    pending.send(api, &mut counts).await?;
    pb.finish_and_clear();
    eprintln!(
        "imported {jobs_read} jobs ({} created, {} already there, {} in their dedup window), {} topics, {} schedules",
        counts.created, counts.existed, counts.deduplicated, counts.topics, counts.schedules
    );
    if !credentials.is_empty() {
        eprintln!(
            "note: the delivery of {} was not imported: its credentials come redacted in an export; set it again (dq topics put … --push-secret …)",
            credentials.join(", ")
        );
    }
    match end {
        None => bail!(
            "the file has no end line: it is cut short (what it held is imported; export again and import the new file)"
        ),
        Some((topics, jobs, schedules))
            if (topics, jobs, schedules) != (counts.topics, jobs_read, counts.schedules) =>
        {
            bail!(
                "the end line says {jobs} jobs, {topics} topics, {schedules} schedules, but the file holds {jobs_read}, {}, {}",
                counts.topics,
                counts.schedules
            )
        }
        Some(_) => Ok(()),
    }
}

/// Applies a topic's settings from an export. A delivery whose credentials
/// came redacted is left out (the topic keeps the delivery it has here: a
/// new topic pulls) and named in `credentials`; a partition count this
/// store does not take (the embedded store keeps one) is left out too.
async fn put_topic(
    api: &Client,
    name: &str,
    config: TopicConfig,
    credentials: &mut Vec<String>,
) -> Result<()> {
    let keep_delivery = !redacted(&config);
    if !keep_delivery {
        credentials.push(name.to_string());
    }
    let patch = TopicConfigPatch {
        max_attempts: Some(config.max_attempts),
        lease_ms: Some(config.lease_ms),
        dead_cap: Some(config.dead_cap),
        default_delay_ms: Some(config.default_delay_ms),
        retry: Some(config.retry),
        delivery: keep_delivery.then_some(config.delivery),
        partitions: Some(config.partitions),
        dedup_ms: Some(config.dedup_ms),
        paused: Some(config.paused),
        rate_limit: Some(config.rate_limit),
        key_concurrency: Some(config.key_concurrency),
        key_rate_limit: Some(config.key_rate_limit),
        expires_ms: Some(config.expires_ms),
        on_expiry: Some(config.on_expiry),
    };
    match api.configure_topic(name, &patch).await {
        Err(dq_client::Error::Invalid { code, .. }) if code == "invalid_partitions" => {
            eprintln!(
                "note: topic {name}: {} partitions cannot be kept here; imported with the partitions this store gives it",
                config.partitions
            );
            let patch = TopicConfigPatch {
                partitions: None,
                ..patch
            };
            api.configure_topic(name, &patch).await?;
            Ok(())
        }
        r => r.map(|_| ()).map_err(Into::into),
    }
}
