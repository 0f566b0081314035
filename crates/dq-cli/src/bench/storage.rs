//! `dq bench storage`: the store's bytes per scheduled job, from the
//! embedded store's files or Redis' `INFO memory`, before and after N jobs.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use dq_client::{Client, NewJob};
use serde_json::{Value, json};

use super::enqueue::produce;
use super::{body, progress};

/// The store's size: the embedded store's files in `data_dir`, or the
/// `used_memory` of the Redis at `redis`.
fn measure(data_dir: Option<&Path>, redis: Option<&str>) -> Result<u64> {
    match (data_dir, redis) {
        (Some(dir), _) => {
            let mut total = 0;
            for e in std::fs::read_dir(dir).with_context(|| format!("read {}", dir.display()))? {
                let e = e?;
                if e.file_name().to_string_lossy().starts_with("dq.sqlite3") {
                    total += e.metadata()?.len();
                }
            }
            Ok(total)
        }
        (None, Some(url)) => {
            let mut c = redis::Client::open(url)?.get_connection()?;
            let info: String = redis::cmd("INFO").arg("memory").query(&mut c)?;
            info.lines()
                .find_map(|l| l.strip_prefix("used_memory:"))
                .and_then(|v| v.trim().parse().ok())
                .ok_or_else(|| anyhow!("no used_memory in INFO"))
        }
        _ => bail!("give --data-dir or --redis"),
    }
}

/// Runs the scenario: `jobs` jobs of `body_bytes` due in an hour.
pub(super) async fn run(
    api: &Client,
    topic: &str,
    run_id: &str,
    jobs: usize,
    body_bytes: usize,
    data_dir: Option<&Path>,
    redis: Option<&str>,
) -> Result<Value> {
    let before = measure(data_dir, redis)?;
    let bd = body(body_bytes);
    let rid = run_id.to_string();
    let job = Arc::new(move |i: usize| {
        NewJob::json(&bd)
            .id(format!("{rid}-{i}"))
            .delay(Duration::from_millis(3_600_000))
    });
    let pb = progress(jobs as u64, "enqueue");
    let errors = produce(api, topic, jobs, 1000, 2, job, &pb).await?;
    pb.finish_and_clear();
    let after = measure(data_dir, redis)?;
    let id_len = format!("{run_id}-{}", jobs / 2).len();
    Ok(
        json!({"scenario": "storage", "store": if data_dir.is_some() { "embedded" } else { "redis" },
           "jobs": jobs, "body_bytes": body_bytes, "id_bytes": id_len, "errors": errors,
           "bytes_before": before, "bytes_after": after,
           "bytes_per_job": ((after as f64 - before as f64) / jobs as f64).round()}),
    )
}
