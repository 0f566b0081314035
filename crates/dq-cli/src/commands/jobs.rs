//! One job at a time: `dq push`, `get`, `cancel`, `reschedule`, and the
//! consumer's side for scripts: `reserve`, `ack`, `nack`.

use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use clap::Args;
use dq_client::{NewJob, wire};

use super::flags::{at_ms, ms};
use crate::conn::Conn;
use crate::output::{bordered, kv_table, opt, print_json, rfc3339, shown_body};

/// `dq push`.
#[derive(Debug, Args)]
pub(crate) struct Push {
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
    /// Expiry, counted from now, e.g. 10m: not handed out by then, the job
    /// never is (dead with last error "expired", or dropped: the topic's
    /// on_expiry) [default: the topic's --expires after the job is due]
    #[arg(long, conflicts_with = "expires_at")]
    expires_in: Option<String>,
    /// Expiry as a time, RFC 3339 (UTC when no zone is given)
    #[arg(long)]
    expires_at: Option<String>,
}

/// `dq get`.
#[derive(Debug, Args)]
pub(crate) struct Get {
    #[command(flatten)]
    conn: Conn,
    /// The job's topic
    topic: String,
    /// The job's id
    id: String,
}

/// `dq cancel`.
#[derive(Debug, Args)]
pub(crate) struct Cancel {
    #[command(flatten)]
    conn: Conn,
    /// The job's topic
    topic: String,
    /// The job's id
    id: String,
}

/// `dq reschedule`.
#[derive(Debug, Args)]
pub(crate) struct Reschedule {
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
}

/// `dq reserve`.
#[derive(Debug, Args)]
pub(crate) struct Reserve {
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
}

/// `dq ack`.
#[derive(Debug, Args)]
pub(crate) struct Ack {
    #[command(flatten)]
    conn: Conn,
    /// The job's topic
    topic: String,
    /// The job's id
    id: String,
    /// The lease token `dq reserve` printed
    lease_token: String,
}

/// `dq nack`.
#[derive(Debug, Args)]
pub(crate) struct Nack {
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

impl Push {
    pub(super) async fn run(self) -> Result<()> {
        let Push {
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
            expires_in,
            expires_at,
        } = self;
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
        if let Some(e) = expires_in {
            job = job.expires_in(Duration::from_millis(ms(&e, "--expires-in")?));
        }
        if let Some(a) = expires_at {
            job = job.expires_at_ms(at_ms(&a)?);
        }
        let e = api.enqueue(&topic, &job).await?;
        if conn.json() {
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
        Ok(())
    }
}

impl Get {
    pub(super) async fn run(self) -> Result<()> {
        let Get { conn, topic, id } = self;
        let api = conn.client()?;
        let j = api.get(&topic, &id).await?;
        if conn.json() {
            print_json(&j);
        } else {
            let body = shown_body(j.body.as_ref(), j.body_base64.as_deref());
            let errors = j
                .errors
                .iter()
                .map(|e| {
                    format!(
                        "attempt {} at {}: {}",
                        e.attempt,
                        rfc3339(Some(e.at_ms)),
                        e.error
                    )
                })
                .collect::<Vec<_>>()
                .join("\n");
            let t = kv_table(&[
                ("topic", j.topic.clone()),
                ("id", j.id.clone()),
                ("state", j.state.to_string()),
                ("due", rfc3339(Some(j.due_at_ms))),
                ("priority", j.priority.to_string()),
                ("attempts", format!("{}/{}", j.attempts, j.max_attempts)),
                ("last error", opt(j.last_error.as_deref())),
                (
                    "errors",
                    if errors.is_empty() {
                        "-".into()
                    } else {
                        errors
                    },
                ),
                ("created", rfc3339(Some(j.created_at_ms))),
                ("lease until", rfc3339(j.lease_deadline_ms)),
                ("died", rfc3339(j.died_at_ms)),
                ("expires", rfc3339(j.expires_at_ms)),
                ("body", body),
            ]);
            println!("{t}");
        }
        Ok(())
    }
}

impl Cancel {
    pub(super) async fn run(self) -> Result<()> {
        let Cancel { conn, topic, id } = self;
        let api = conn.client()?;
        let state = api.cancel(&topic, &id).await?;
        if conn.json() {
            print_json(&wire::Cancelled {
                id,
                cancelled: true,
                state,
            });
        } else {
            println!("{id} cancelled (was {state})");
        }
        Ok(())
    }
}

impl Reschedule {
    pub(super) async fn run(self) -> Result<()> {
        let Reschedule {
            conn,
            topic,
            id,
            delay,
            at,
        } = self;
        let api = conn.client()?;
        let due = match (delay, at) {
            (Some(d), _) => {
                let d = Duration::from_millis(ms(&d, "--delay")?);
                api.reschedule_after(&topic, &id, d).await?
            }
            (None, Some(a)) => api.reschedule(&topic, &id, at_ms(&a)?).await?,
            (None, None) => bail!("give --delay or --at"),
        };
        if conn.json() {
            print_json(&wire::Rescheduled { id, due_at_ms: due });
        } else {
            println!("{id} now due {}", rfc3339(Some(due)));
        }
        Ok(())
    }
}

impl Reserve {
    pub(super) async fn run(self) -> Result<()> {
        let Reserve {
            conn,
            topics,
            max,
            wait,
            lease,
        } = self;
        let api = conn.client()?;
        let mut req = dq_client::Reserve::new(topics)
            .max(max)
            .wait(Duration::from_millis(ms(&wait, "--wait")?));
        if let Some(l) = lease {
            req = req.lease(Duration::from_millis(ms(&l, "--lease")?));
        }
        let answer = api.reserve_answer(&req).await?;
        if conn.json() {
            print_json(&answer);
            return Ok(());
        }
        for t in &answer.unknown_topics {
            eprintln!("warning: no topic named {t:?} (nobody created it: a typo?)");
        }
        let jobs = answer.jobs;
        {
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
        Ok(())
    }
}

impl Ack {
    pub(super) async fn run(self) -> Result<()> {
        let Ack {
            conn,
            topic,
            id,
            lease_token: token,
        } = self;
        conn.client()?.ack(&topic, &id, &token).await?;
        if conn.json() {
            print_json(&wire::Acked { id, acked: true });
        } else {
            println!("{id} acked");
        }
        Ok(())
    }
}

impl Nack {
    pub(super) async fn run(self) -> Result<()> {
        let Nack {
            conn,
            topic,
            id,
            lease_token: token,
            error,
            retry_in,
            dead,
        } = self;
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
        if conn.json() {
            print_json(&n);
        } else {
            match n.due_at_ms {
                Some(due) => println!("{} failed; retried at {}", n.id, rfc3339(Some(due))),
                None => println!("{} failed; dead", n.id),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn path_segments_are_encoded() {
        assert_eq!(
            dq_client::encode_segment("order/42 ü"),
            "order%2F42%20%C3%BC"
        );
        assert_eq!(dq_client::encode_segment("a.b:c-d_e"), "a.b:c-d_e");
    }
}
