//! Dead letters: `dq dead` (list, replay, purge).

use anyhow::Result;
use clap::{Args, Subcommand};
use dq_client::wire;

use crate::conn::Conn;
use crate::output::{bordered, confirm, opt, print_json, rfc3339, shown_body};

/// A body as the dead list shows it: its first 60 characters.
fn cut(body: &str) -> String {
    const SHOWN: usize = 60;
    if body.chars().count() > SHOWN {
        format!("{}…", body.chars().take(SHOWN).collect::<String>())
    } else {
        body.to_string()
    }
}

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
    /// List dead letters, the newest death first (as the admin page does)
    List {
        /// The topic
        topic: String,
        /// Most to list
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// Skip this many of the newest (of the oldest with --oldest-first)
        #[arg(long, default_value_t = 0)]
        offset: usize,
        /// The oldest death first (the API's order)
        #[arg(long)]
        oldest_first: bool,
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
                oldest_first,
            } => {
                let jobs = if oldest_first {
                    api.list_dead(&topic, offset, limit).await?
                } else {
                    // The API lists the oldest first: take the page from
                    // the end of the dead letters kept, and turn it round.
                    let kept = api.topic(&topic).await?.stats.dead as usize;
                    let end = kept.saturating_sub(offset);
                    let start = end.saturating_sub(limit);
                    let mut jobs = if end > start {
                        api.list_dead(&topic, start, end - start).await?
                    } else {
                        Vec::new()
                    };
                    jobs.reverse();
                    jobs
                };
                if conn.json() {
                    print_json(&wire::DeadList { jobs });
                } else {
                    let mut t = bordered(vec!["id", "attempts", "died", "last error", "body"]);
                    for j in &jobs {
                        t.add_row(vec![
                            j.id.clone(),
                            j.attempts.to_string(),
                            rfc3339(j.died_at_ms),
                            opt(j.last_error.as_deref()),
                            cut(&shown_body(j.body.as_ref(), j.body_base64.as_deref())),
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
