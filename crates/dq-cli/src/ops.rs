//! The operator's subcommands: `backup` and `restore` of an embedded data
//! directory (on this machine, through `dq_embedded::backup`; `backup`
//! pointed at PostgreSQL says to use `pg_dump`), and `drain` of a running
//! server (through its HTTP API).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Subcommand;
use dq_embedded::backup::{self, Progress};
use indicatif::{ProgressBar, ProgressStyle};

use crate::conn::Conn;

#[derive(Debug, Subcommand)]
pub(crate) enum OpsCmd {
    /// Back up an embedded store into a new file: a consistent copy (SQLite's online backup API), taken while dq serves it
    Backup {
        /// The data directory of the embedded store
        #[arg(long, env = "DQ_DATA_DIR", default_value = "dq-data")]
        data_dir: PathBuf,
        /// The backup file to write (must not exist)
        out: PathBuf,
        /// A PostgreSQL store (as dq serve's --postgres) is not copied by dq: given (or DQ_POSTGRES set), dq backup says what to use instead (pg_dump) and writes nothing
        #[arg(long, env = "DQ_POSTGRES", hide_env_values = true)]
        postgres: Option<String>,
        /// The PostgreSQL store's schema, for that advice [default: dq]
        #[arg(long, env = "DQ_POSTGRES_SCHEMA")]
        postgres_schema: Option<String>,
    },
    /// Restore a backup into a data directory (refuses one that is not empty unless --force; dq must not be serving it)
    Restore {
        /// A file written by `dq backup` (or POST /v1/admin/backup)
        backup: PathBuf,
        /// The data directory to restore into
        #[arg(long, env = "DQ_DATA_DIR", default_value = "dq-data")]
        data_dir: PathBuf,
        /// Replace the data of a directory that is not empty
        #[arg(long)]
        force: bool,
    },
    /// Exit 0 when a running server is ready (GET /readyz answers 200), 1 with the reason otherwise: a health check for containers
    Ready {
        #[command(flatten)]
        conn: Conn,
    },
    /// Drain a running server for a restart: it hands out no more jobs, /readyz answers 503 draining; waits for its deliveries in flight
    Drain {
        #[command(flatten)]
        conn: Conn,
        /// How long to wait for deliveries in flight, e.g. 30s (0: do not wait)
        #[arg(long, default_value = "30s")]
        wait: String,
    },
}

/// A bar over a copy's pages (drawn only on a terminal).
fn bar(what: &'static str) -> (ProgressBar, impl FnMut(Progress)) {
    let pb = ProgressBar::new(0);
    pb.set_style(
        ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} pages ({percent}%)")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    pb.set_message(what);
    let p = pb.clone();
    (pb, move |prog: Progress| {
        p.set_length(prog.total);
        p.set_position(prog.copied);
    })
}

impl OpsCmd {
    pub(crate) async fn run(self) -> Result<()> {
        match self {
            OpsCmd::Backup {
                postgres: Some(_),
                postgres_schema,
                ..
            } => {
                let schema = postgres_schema.unwrap_or_else(|| "dq".into());
                bail!(
                    "dq backup copies the embedded store only; {}",
                    dq_postgres::backup_advice(&schema)
                );
            }
            OpsCmd::Backup { data_dir, out, .. } => {
                let (pb, mut progress) = bar("backup");
                let shown = out.display().to_string();
                let r = tokio::task::spawn_blocking(move || {
                    backup::backup(&data_dir, &out, &mut progress)
                })
                .await?;
                pb.finish_and_clear();
                let r = r.with_context(|| format!("backup into {shown} failed"))?;
                println!(
                    "backup written: {} ({} bytes, {} pages, schema version {}) in {:.1?}",
                    r.path.display(),
                    r.bytes,
                    r.pages,
                    r.schema_version,
                    r.took
                );
            }
            OpsCmd::Restore {
                backup: file,
                data_dir,
                force,
            } => {
                let (pb, mut progress) = bar("restore");
                let shown = data_dir.display().to_string();
                let r = tokio::task::spawn_blocking(move || {
                    backup::restore(&file, &data_dir, force, &mut progress)
                })
                .await?;
                pb.finish_and_clear();
                let r = r.with_context(|| format!("restore into {shown} failed"))?;
                println!(
                    "restored: {} ({} bytes, schema version {}); start dq serve --data-dir {shown}",
                    r.path.display(),
                    r.bytes,
                    r.schema_version
                );
            }
            OpsCmd::Ready { conn } => {
                let health = conn.client()?.ready().await.context("not ready")?;
                if conn.json() {
                    println!("{}", serde_json::to_string_pretty(&health)?);
                } else {
                    println!("{}", health.status);
                }
            }
            OpsCmd::Drain { conn, wait } => {
                let wait = humantime::parse_duration(&wait)
                    .with_context(|| format!("--wait: {wait:?} is not a duration like 30s, 2m"))?;
                let api = conn.client()?;
                // In calls of 30 s at most (the client's request timeout is
                // 60 s); asking again is harmless.
                let deadline = std::time::Instant::now() + wait;
                let status = loop {
                    let left = deadline.saturating_duration_since(std::time::Instant::now());
                    let status = api
                        .drain(left.min(Duration::from_secs(30)))
                        .await
                        .context("drain")?;
                    if status.drained || left.is_zero() {
                        break status;
                    }
                };
                if conn.json() {
                    println!("{}", serde_json::to_string_pretty(&status)?);
                }
                if status.drained {
                    if !conn.json() {
                        println!(
                            "drained: no job is handed out here any more and nothing is in flight; /readyz answers 503; stop the process (SIGTERM) when ready"
                        );
                    }
                } else {
                    bail!(
                        "draining, but {} deliveries still in flight after {}; run dq drain again to wait more",
                        status.in_flight,
                        humantime::format_duration(wait)
                    );
                }
            }
        }
        Ok(())
    }
}
