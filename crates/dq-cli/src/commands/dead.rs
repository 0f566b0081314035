//! Dead letters: `dq dead` (list, replay, purge).

use anyhow::Result;
use clap::{Args, Subcommand};
use dq_client::wire;

use crate::conn::Conn;
use crate::output::{bordered, confirm, opt, print_json, rfc3339};

/// `dq dead`.
#[derive(Debug, Args)]
pub(crate) struct Dead {
    #[command(flatten)]
    conn: Conn,
    #[command(subcommand)]
    cmd: DeadCmd,
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
    /// Make dead letters due now with fresh attempts (all, or the ids given; all asks first, unless --yes)
    Replay {
        /// The topic
        topic: String,
        /// Dead letters to replay [default: all]
        ids: Vec<String>,
        /// Do not ask before replaying all
        #[arg(long)]
        yes: bool,
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

impl Dead {
    pub(super) async fn run(self) -> Result<()> {
        let Dead { conn, cmd } = self;
        let api = conn.client()?;
        match cmd {
            DeadCmd::List {
                topic,
                limit,
                offset,
            } => {
                let jobs = api.list_dead(&topic, offset, limit).await?;
                if conn.json() {
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
            DeadCmd::Replay { topic, ids, yes } => {
                if ids.is_empty() {
                    confirm(
                        &format!("Replay every dead letter of {topic:?} (each runs again now)?"),
                        yes,
                    )?;
                }
                let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
                let replayed = api
                    .replay_dead(&topic, (!ids.is_empty()).then_some(ids.as_slice()))
                    .await?;
                if conn.json() {
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
                if conn.json() {
                    print_json(&wire::Purged { purged });
                } else {
                    println!("{purged} purged");
                }
            }
        }
        Ok(())
    }
}
