//! The client subcommands: each is one or a few calls to the HTTP API of a
//! running `dq serve`, printed as a table (or raw JSON with `--json`).
//!
//! This module only dispatches: one [`ClientCmd`] variant per subcommand,
//! each carrying its own arguments and run by its group's module:
//!
//! - [`jobs`]: one job at a time: `push`, `get`, `cancel`, `reschedule`,
//!   `reserve`, `ack`, `nack`
//! - [`topics`]: `stats`, and the `topics` group: list, put, pause, resume,
//!   delete
//! - [`schedules`]: the `schedules` group: list, get, put, pause, resume,
//!   delete
//! - [`keys`]: the `keys` group: list, create, rotate, revoke
//! - [`dead`]: the `dead` group: list, replay, purge
//! - [`flags`]: the flag values they share (durations, times, rates, retry)
//!
//! The connection flags are [`crate::conn::Conn`]; what is printed is in
//! [`crate::output`].

mod dead;
mod flags;
mod jobs;
mod keys;
mod schedules;
mod topics;

use anyhow::Result;
use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub(crate) enum ClientCmd {
    /// Enqueue a job
    #[command(visible_alias = "enqueue")]
    Push(jobs::Push),
    /// Show a job
    Get(jobs::Get),
    /// Cancel a job (any state)
    Cancel(jobs::Cancel),
    /// Move a waiting job to a new due time
    Reschedule(jobs::Reschedule),
    /// Counts per topic (all topics, or one with its settings)
    Stats(topics::Stats),
    /// Lease due jobs for a script to work on (then ack or nack each)
    Reserve(jobs::Reserve),
    /// Done with a reserved job
    Ack(jobs::Ack),
    /// A reserved job failed: retry it later, or send it to the dead letters
    Nack(jobs::Nack),
    /// List, configure or delete topics
    Topics(topics::Topics),
    /// Recurring schedules: list, show, put, pause, resume, delete
    Schedules(schedules::Schedules),
    /// API keys: create, list, rotate, revoke (needs an admin key or the admin_token)
    Keys(keys::Keys),
    /// Dead letters: list, replay, purge
    Dead(dead::Dead),
}

impl ClientCmd {
    pub(crate) async fn run(self) -> Result<()> {
        match self {
            ClientCmd::Push(cmd) => cmd.run().await,
            ClientCmd::Get(cmd) => cmd.run().await,
            ClientCmd::Cancel(cmd) => cmd.run().await,
            ClientCmd::Reschedule(cmd) => cmd.run().await,
            ClientCmd::Stats(cmd) => cmd.run().await,
            ClientCmd::Reserve(cmd) => cmd.run().await,
            ClientCmd::Ack(cmd) => cmd.run().await,
            ClientCmd::Nack(cmd) => cmd.run().await,
            ClientCmd::Topics(cmd) => cmd.run().await,
            ClientCmd::Schedules(cmd) => cmd.run().await,
            ClientCmd::Keys(cmd) => cmd.run().await,
            ClientCmd::Dead(cmd) => cmd.run().await,
        }
    }
}
