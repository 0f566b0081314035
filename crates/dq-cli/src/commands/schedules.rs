//! Recurring schedules: `dq schedules` (list, get, put, pause, resume,
//! delete), and how a schedule is shown.

use anyhow::{Result, anyhow};
use clap::{Args, Subcommand};
use dq_client::wire;
use serde_json::json;

use crate::conn::Conn;
use crate::output::{bordered, confirm, kv_table, print_json};

/// `dq schedules`.
#[derive(Debug, Args)]
pub(crate) struct Schedules {
    #[command(flatten)]
    conn: Conn,
    #[command(subcommand)]
    cmd: Option<SchedulesCmd>,
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

impl Schedules {
    pub(super) async fn run(self) -> Result<()> {
        let Schedules { conn, cmd } = self;
        let api = conn.client()?;
        match cmd.unwrap_or(SchedulesCmd::List) {
            SchedulesCmd::List => {
                let schedules = api.schedules().await?;
                if conn.json() {
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
            SchedulesCmd::Get { name } => print_schedule(&api.schedule(&name).await?, conn.json()),
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
                print_schedule(&api.put_schedule(&name, &spec).await?, conn.json());
            }
            SchedulesCmd::Pause { name } => {
                print_schedule(&api.pause_schedule(&name, true).await?, conn.json())
            }
            SchedulesCmd::Resume { name } => {
                print_schedule(&api.pause_schedule(&name, false).await?, conn.json())
            }
            SchedulesCmd::Delete { name, yes } => {
                confirm(&format!("Delete schedule {name:?}?"), yes)?;
                api.delete_schedule(&name).await?;
                if conn.json() {
                    print_json(&wire::ScheduleDeleted {
                        name,
                        deleted: true,
                    });
                } else {
                    println!("{name} deleted (jobs it enqueued ahead, due within 2 s, still run)");
                }
            }
        }
        Ok(())
    }
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
