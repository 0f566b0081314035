//! [`WriterWork`]: the embedded store's writer counters, read from the
//! server's `/metrics`, for the drain scenario's figures.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The embedded store's writer counters, read from `/metrics`
/// (`dq_embedded_writer_*`; absent on Redis).
pub(super) struct WriterWork {
    at: Instant,
    operations: f64,
    commits: f64,
    busy: f64,
    commit: f64,
}

impl WriterWork {
    pub(super) async fn read(server: &str, token: Option<&str>) -> Option<Self> {
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
    pub(super) fn since(&self, before: &Self) -> Value {
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
