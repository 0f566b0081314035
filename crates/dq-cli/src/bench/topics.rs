//! `dq bench topics`: what many topics cost a server (#23, "Many topics").
//! N topics holding one job each (due in an hour) are created, then, while
//! they exist: the CPU of the server and of its store with no client
//! traffic (against the same measured before the topics were made), the
//! time to list the topics (whole, and by pages where the server pages),
//! the latency of a reserve naming many topics against one naming a single
//! topic, and a steady flow's lateness on one more topic. Afterwards the N
//! topics are deleted (unless `--keep`).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use dq_client::{Client, Error as ApiError, NewJob, Reserve};
use hdrhistogram::Histogram;
use indicatif::ProgressBar;
use serde_json::{Value, json};

use super::steady::{SteadyPlan, steady};
use super::{body, procfs, progress};

/// Longest time the server is left alone before the idle CPU is measured,
/// so the tail of the creation burst (writes, fsyncs, the dispatcher
/// working off the creations' announcements) is not counted: it settles
/// when a second passes with dq and its store each under [`QUIET_PCT`].
const SETTLE: Duration = Duration::from_secs(120);

/// CPU (% of one core) under which a second counts as quiet.
const QUIET_PCT: f64 = 2.0;

/// Topics a listing page asks for.
const PAGE: usize = 100;

/// The parameters of the scenario.
pub(super) struct TopicsPlan {
    /// Topics created.
    pub(super) topics: usize,
    /// Idle time measured.
    pub(super) idle: Duration,
    /// Topics named by the many-topic reserve (fewer if the server refuses
    /// that many).
    pub(super) watch: usize,
    /// Reserves timed per case.
    pub(super) iterations: usize,
    /// Creations and deletions in flight at once.
    pub(super) concurrency: usize,
    pub(super) dq_pid: Option<u32>,
    pub(super) store_pid: Option<u32>,
    /// The store's Redis URL, to find its `redis-server`.
    pub(super) redis: Option<String>,
    /// Keep the N topics afterwards.
    pub(super) keep: bool,
    /// The steady flow measured while the topics exist.
    pub(super) steady: SteadyPlan,
}

/// The server under test: its API client, and what a raw call needs.
pub(super) struct Server<'a> {
    pub(super) api: &'a Client,
    /// Base URL, no trailing `/`.
    pub(super) base: &'a str,
    pub(super) token: Option<&'a str>,
}

/// Runs the scenario; `prefix` names the topics: `<prefix>-<i>` for the N
/// topics, `prefix` itself for the steady flow (deleted by the caller).
pub(super) async fn run(
    server: &Server<'_>,
    prefix: &str,
    run_id: &str,
    plan: &TopicsPlan,
) -> Result<Value> {
    let names: Arc<Vec<String>> = Arc::new(
        (0..plan.topics.max(1))
            .map(|i| format!("{prefix}-{i}"))
            .collect(),
    );
    let procs = processes(
        server.base,
        &Given {
            dq_pid: plan.dq_pid,
            store_pid: plan.store_pid,
            redis: plan.redis.clone(),
        },
    );
    let idle_before = cpu_over(&procs, plan.idle).await;
    let created = create(server.api, &names, plan.concurrency).await?;
    let idle_with = cpu_over(&procs, plan.idle).await;
    let idle = idle_json(&procs, plan.idle, idle_before, idle_with);
    // Whatever happens while measuring, the topics are deleted after.
    let measured = measure(server, &names, prefix, run_id, plan).await;
    let deleted = if plan.keep {
        json!("kept (--keep)")
    } else {
        delete(server.api, &names, plan.concurrency, prefix).await?
    };
    let mut v = measured?;
    v["idle"] = idle;
    let errors = [
        &created["errors"],
        &deleted["errors"],
        &v["reserve"]["errors"],
    ]
    .iter()
    .filter_map(|e| e.as_u64())
    .sum::<u64>();
    v["scenario"] = json!("topics");
    v["topics"] = json!(names.len());
    v["create"] = created;
    v["delete"] = deleted.clone();
    v["errors"] = json!(errors);
    v["topics_left"] = deleted["left"].clone();
    for k in ["lost", "duplicated", "early"] {
        v[k] = v["steady"][k].clone();
    }
    Ok(v)
}

/// The measurements made while the N topics exist, after the idle CPU.
async fn measure(
    server: &Server<'_>,
    names: &[String],
    prefix: &str,
    run_id: &str,
    plan: &TopicsPlan,
) -> Result<Value> {
    let list = listing(server).await?;
    let reserve = reserve_latency(server.api, names, run_id, plan).await?;
    let flow = steady(server.api, prefix, &format!("{run_id}-s"), &plan.steady).await?;
    Ok(json!({"list": list, "reserve": reserve, "steady": flow}))
}

/// Runs `op(i)` for every `i` in `0..n`, at most `concurrency` at once;
/// returns how many returned `false`.
async fn each<F, Fut>(n: usize, concurrency: usize, pb: &ProgressBar, op: F) -> Result<u64>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = bool> + Send,
{
    let op = Arc::new(op);
    let next = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..concurrency.clamp(1, n.max(1)) {
        let (op, next, failed, pb) = (op.clone(), next.clone(), failed.clone(), pb.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= n {
                    return;
                }
                if !op(i).await {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
                pb.inc(1);
            }
        }));
    }
    for t in tasks {
        t.await?;
    }
    Ok(failed.load(Ordering::Relaxed))
}

fn secs(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0).round() / 1000.0
}

fn per_s(n: usize, d: Duration) -> f64 {
    (n as f64 / d.as_secs_f64().max(1e-6)).round()
}

/// Creates the topics: one enqueue each (a 64-byte job due in an hour;
/// a topic exists once it holds a job).
async fn create(api: &Client, names: &Arc<Vec<String>>, concurrency: usize) -> Result<Value> {
    let pb = progress(names.len() as u64, "create");
    let t0 = Instant::now();
    let (api, names2) = (api.clone(), names.clone());
    let job = Arc::new(
        NewJob::json(body(64))
            .id("held")
            .delay(Duration::from_secs(3600)),
    );
    let errors = each(names.len(), concurrency, &pb, move |i| {
        let (api, names, job) = (api.clone(), names2.clone(), job.clone());
        async move { api.enqueue(&names[i], &job).await.is_ok() }
    })
    .await?;
    let took = t0.elapsed();
    pb.finish_and_clear();
    Ok(
        json!({"seconds": secs(took), "topics_per_s": per_s(names.len(), took),
              "concurrency": concurrency, "errors": errors}),
    )
}

/// Deletes the topics (a topic already gone is not an error), then counts
/// the topics of this run the server still lists.
async fn delete(
    api: &Client,
    names: &Arc<Vec<String>>,
    concurrency: usize,
    prefix: &str,
) -> Result<Value> {
    let pb = progress(names.len() as u64, "delete");
    let t0 = Instant::now();
    let (api2, names2) = (api.clone(), names.clone());
    let errors = each(names.len(), concurrency, &pb, move |i| {
        let (api, names) = (api2.clone(), names2.clone());
        async move {
            match api.delete_topic(&names[i]).await {
                Ok(_) | Err(ApiError::NotFound { .. }) => true,
                Err(e) => {
                    tracing::debug!(topic = %names[i], error = %e, "delete failed");
                    false
                }
            }
        }
    })
    .await?;
    let took = t0.elapsed();
    pb.finish_and_clear();
    let ours = format!("{prefix}-");
    let left = api
        .topics()
        .await
        .context("listing the topics after deleting them")?
        .iter()
        .filter(|t| t.name.starts_with(&ours))
        .count();
    Ok(
        json!({"seconds": secs(took), "topics_per_s": per_s(names.len(), took),
              "errors": errors, "left": left}),
    )
}

/// How the store's process was found, if it was.
struct StoreProcess {
    pid: Option<u32>,
    how: String,
}

/// The store's process: `--store-pid`; else the `redis-server` listening
/// on the port of `--redis` (or of the `--redis` on dq's command line);
/// else none, saying why (the embedded store runs inside dq).
fn store_process(given: &Given, dq_pid: Option<u32>) -> StoreProcess {
    if let Some(pid) = given.store_pid {
        return StoreProcess {
            pid: Some(pid),
            how: format!("pid {pid} (--store-pid)"),
        };
    }
    let dq_args = dq_pid.map(procfs::command_line).unwrap_or_default();
    let (url, source) = match (&given.redis, redis_arg(&dq_args)) {
        (Some(u), _) => (Some(u.clone()), "--redis"),
        (None, Some(u)) => (Some(u), "dq's --redis"),
        (None, None) => (None, ""),
    };
    if let Some(url) = url {
        let port = reqwest::Url::parse(&url)
            .ok()
            .filter(|u| u.scheme().starts_with("redis"))
            .map(|u| u.port().unwrap_or(6379));
        let Some(port) = port else {
            return StoreProcess {
                pid: None,
                how: format!("not measured: no TCP port in {source} {url}"),
            };
        };
        return match procfs::listener_of(port) {
            Some(pid) => StoreProcess {
                pid: Some(pid),
                how: format!(
                    "{} pid {pid}, listening on port {port} ({source})",
                    procfs::command_name(pid).unwrap_or_default()
                ),
            },
            None => StoreProcess {
                pid: None,
                how: format!(
                    "not measured: no process of this user listens on port {port} ({source}); give --store-pid"
                ),
            },
        };
    }
    let embedded = dq_pid.is_some_and(|pid| {
        procfs::open_files(pid)
            .iter()
            .any(|f| f.rsplit('/').next() == Some(dq_embedded::DB_FILE))
    });
    StoreProcess {
        pid: None,
        how: if embedded {
            "embedded: it runs inside dq, its CPU is counted in dq's".into()
        } else {
            "not measured: give --store-pid, or --redis for a Redis store (an embedded store's CPU is inside dq's)".into()
        },
    }
}

/// The value of `--redis` in a command line (`--redis URL` or `--redis=URL`).
fn redis_arg(args: &[String]) -> Option<String> {
    args.iter().enumerate().find_map(|(i, a)| match a.as_str() {
        "--redis" => args.get(i + 1).cloned(),
        _ => a.strip_prefix("--redis=").map(str::to_string),
    })
}

/// The processes whose CPU is measured, found once.
pub(super) struct Processes {
    dq_pid: Option<u32>,
    dq_how: String,
    store: StoreProcess,
    /// Clock ticks per second, and where that figure came from.
    tck: (u64, &'static str),
}

/// What the command line says of the processes to measure.
#[derive(Default)]
pub(super) struct Given {
    /// `--dq-pid`.
    pub(super) dq_pid: Option<u32>,
    /// `--store-pid`.
    pub(super) store_pid: Option<u32>,
    /// `--redis`.
    pub(super) redis: Option<String>,
}

impl Processes {
    /// CPU time used so far by dq and by the store, in µs (none where not
    /// measured).
    pub(super) fn cpu_us(&self) -> (Option<u64>, Option<u64>) {
        let us = |pid: Option<u32>| {
            pid.and_then(|p| procfs::cpu_ticks(p).ok())
                .map(|t| t * 1_000_000 / self.tck.0)
        };
        (us(self.dq_pid), us(self.store.pid))
    }

    /// How each process was found.
    pub(super) fn how(&self) -> Value {
        json!({"dq": self.dq_how, "store": self.store.how, "clock_ticks": self.tck.1})
    }
}

/// dq: `--dq-pid`, else the process listening on the server's port; the
/// store: see [`store_process`].
pub(super) fn processes(base: &str, given: &Given) -> Processes {
    let port = reqwest::Url::parse(base)
        .ok()
        .and_then(|u| u.port_or_known_default());
    let (dq_pid, dq_how) = match (given.dq_pid, port.and_then(procfs::listener_of)) {
        (Some(p), _) => (Some(p), "--dq-pid".to_string()),
        (None, Some(p)) => (Some(p), format!("listening on port {}", port.unwrap_or(0))),
        (None, None) => (
            None,
            "not found: no process of this user listens on the server's port; give --dq-pid"
                .to_string(),
        ),
    };
    Processes {
        dq_pid,
        dq_how,
        store: store_process(given, dq_pid),
        tck: procfs::clock_ticks(),
    }
}

/// CPU of dq and of the store (% of one core, null when not measured) over
/// `idle` with no client traffic, once settled (at most [`SETTLE`]), and
/// how long settling took.
async fn cpu_over(p: &Processes, idle: Duration) -> (Value, Value, f64) {
    let ticks = |pid: Option<u32>| pid.and_then(|p| procfs::cpu_ticks(p).ok());
    let started = Instant::now();
    loop {
        let a = (ticks(p.dq_pid), ticks(p.store.pid));
        tokio::time::sleep(Duration::from_secs(1)).await;
        let b = (ticks(p.dq_pid), ticks(p.store.pid));
        let busy = |x: Option<u64>, y: Option<u64>| {
            x.zip(y).is_some_and(|(x, y)| {
                y.saturating_sub(x) as f64 * 100.0 / p.tck.0 as f64 >= QUIET_PCT
            })
        };
        if !(busy(a.0, b.0) || busy(a.1, b.1)) || started.elapsed() >= SETTLE {
            break;
        }
    }
    let settled = started.elapsed().as_secs_f64();
    let before = (ticks(p.dq_pid), ticks(p.store.pid));
    let t0 = Instant::now();
    tokio::time::sleep(idle).await;
    let wall = t0.elapsed().as_secs_f64();
    let after = (ticks(p.dq_pid), ticks(p.store.pid));
    let pct = |a: Option<u64>, b: Option<u64>| -> Value {
        match (a, b) {
            (Some(a), Some(b)) => {
                let cpu = b.saturating_sub(a) as f64 / p.tck.0 as f64;
                json!((cpu / wall * 1000.0).round() / 10.0)
            }
            _ => Value::Null,
        }
    };
    (pct(before.0, after.0), pct(before.1, after.1), settled)
}

/// The idle figures: with the N topics, and `before` they were created.
fn idle_json(
    p: &Processes,
    idle: Duration,
    before: (Value, Value, f64),
    with: (Value, Value, f64),
) -> Value {
    json!({"seconds": idle.as_secs_f64(), "settle_seconds": with.2,
           "settle_seconds_before": before.2,
           "clock_ticks_per_s": format!("{} ({})", p.tck.0, p.tck.1),
           "dq_pid": p.dq_pid, "dq": p.dq_how,
           "dq_cpu_pct": with.0, "dq_cpu_pct_before": before.0,
           "store_pid": p.store.pid, "store": p.store.how,
           "store_cpu_pct": with.1, "store_cpu_pct_before": before.1})
}

/// One raw GET: status, elapsed time, reply bytes and the parsed reply.
async fn get(
    http: &reqwest::Client,
    server: &Server<'_>,
    path: &str,
) -> Result<(u16, Duration, usize, Value)> {
    let mut req = http.get(format!("{}{path}", server.base));
    if let Some(t) = server.token {
        req = req.bearer_auth(t);
    }
    let t0 = Instant::now();
    let res = req.send().await.with_context(|| format!("GET {path}"))?;
    let status = res.status().as_u16();
    let bytes = res.bytes().await.with_context(|| format!("GET {path}"))?;
    let took = t0.elapsed();
    let v = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Ok((status, took, bytes.len(), v))
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 10_000.0).round() / 10.0
}

/// `GET /v1/topics` whole, then a first page of [`PAGE`] and the page after
/// it by the reply's `next_cursor` (sent back as `cursor`), where the server
/// pages; a server that refuses `limit`, ignores it or answers no
/// `next_cursor` is reported as not paging.
async fn listing(server: &Server<'_>) -> Result<Value> {
    // Longer than the API client's 60 s: the whole listing is what is slow.
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(600))
        .build()?;
    let (status, took, bytes, v) = get(&http, server, "/v1/topics").await?;
    if status != 200 {
        bail!("GET /v1/topics answered {status}: {v}");
    }
    let count = |v: &Value| v["topics"].as_array().map_or(0, Vec::len);
    let mut out = json!({"all_ms": ms(took), "all_topics": count(&v), "all_bytes": bytes});
    let (status, took, _, first) = get(&http, server, &format!("/v1/topics?limit={PAGE}")).await?;
    let cursor = first.get("next_cursor");
    let unsupported = if status != 200 {
        Some(format!("unsupported: limit refused (HTTP {status})"))
    } else if count(&first) > PAGE {
        Some("unsupported: limit ignored".to_string())
    } else if cursor.is_none() {
        Some("unsupported: no next_cursor in the reply".to_string())
    } else {
        None
    };
    if let Some(why) = unsupported {
        out["paging"] = json!(why);
        return Ok(out);
    }
    out["paging"] = json!("supported");
    out["first_page_ms"] = json!(ms(took));
    out["first_page_topics"] = json!(count(&first));
    match cursor.and_then(Value::as_str) {
        Some(c) => {
            let path = format!(
                "/v1/topics?limit={PAGE}&cursor={}",
                dq_client::encode_segment(c)
            );
            let (status, took, _, next) = get(&http, server, &path).await?;
            if status == 200 {
                out["next_page_ms"] = json!(ms(took));
                out["next_page_topics"] = json!(count(&next));
            } else {
                out["next_page"] = json!(format!("refused (HTTP {status}): {next}"));
            }
        }
        None => out["next_page"] = json!("none (one page)"),
    }
    Ok(out)
}

/// The first `want` topics (at least one), or as many as the server lets
/// one reserve name when that is fewer (read from its refusal, which says
/// "1 to N"), and that limit if it was hit. The probe doubles as a warm-up.
async fn watch_list(
    api: &Client,
    names: &[String],
    want: usize,
) -> Result<(Vec<String>, Option<usize>)> {
    let mut n = want.clamp(1, names.len());
    let mut limit = None;
    loop {
        match api.reserve(&Reserve::new(names[..n].iter().cloned())).await {
            Ok(_) => return Ok((names[..n].to_vec(), limit)),
            Err(ApiError::Invalid { code, message }) if code == "invalid_topics" => {
                match message
                    .split_whitespace()
                    .filter_map(|w| w.parse::<usize>().ok())
                    .max()
                {
                    Some(most) if most < n && most > 0 => {
                        n = most;
                        limit = Some(most);
                    }
                    _ => bail!("the server refuses a reserve of {n} topics: {message}"),
                }
            }
            Err(e) => return Err(e).context("reserve over the watched topics"),
        }
    }
}

/// Reserve latency, three cases: `watched` topics with the job in the last
/// one, the same with the job in the middle one, and one topic alone.
async fn reserve_latency(
    api: &Client,
    names: &[String],
    run_id: &str,
    plan: &TopicsPlan,
) -> Result<Value> {
    let (watched, limit) = watch_list(api, names, plan.watch).await?;
    let last = watched[watched.len() - 1].clone();
    let middle = watched[watched.len() / 2].clone();
    let one = std::slice::from_ref(&last);
    let n = plan.iterations.max(1);
    let cases = [
        ("last", &watched[..], &last),
        ("middle", &watched[..], &middle),
        ("one_topic", one, &last),
    ];
    let mut out = json!({"watched": watched.len(), "iterations": n});
    if let Some(l) = limit {
        out["watch_limited_by_server_to"] = json!(l);
    }
    let mut errors = 0;
    for (case, topics, target) in cases {
        let (v, e) = time_reserves(api, topics, target, &format!("{run_id}-{case}"), n).await?;
        out[case] = v;
        errors += e;
    }
    out["errors"] = json!(errors);
    Ok(out)
}

/// `n` times: enqueue a job due now into `target`, then time a reserve
/// (wait 0) naming `topics`, then ack what it handed out. Only the reserve
/// is timed. A reserve that comes back empty is counted as missed (the
/// job is then fetched with a wait, to leave nothing behind).
async fn time_reserves(
    api: &Client,
    topics: &[String],
    target: &str,
    tag: &str,
    n: usize,
) -> Result<(Value, u64)> {
    let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3)?;
    let (mut missed, mut errors) = (0u64, 0u64);
    let req = Reserve::new(topics.iter().cloned()).lease(Duration::from_secs(30));
    for k in 0..n {
        if api
            .enqueue(target, &NewJob::json("x").id(format!("{tag}-{k}")))
            .await
            .is_err()
        {
            errors += 1;
            continue;
        }
        let t0 = Instant::now();
        let r = api.reserve(&req).await;
        let took = t0.elapsed();
        let jobs = match r {
            Ok(jobs) if !jobs.is_empty() => {
                let _ = h.record((took.as_micros() as u64).max(1));
                jobs
            }
            Ok(_) => {
                missed += 1;
                let again = Reserve::new([target])
                    .wait(Duration::from_secs(2))
                    .lease(Duration::from_secs(30));
                api.reserve(&again).await.unwrap_or_default()
            }
            Err(_) => {
                errors += 1;
                continue;
            }
        };
        for j in jobs {
            if api.ack(&j.topic, &j.id, &j.token).await.is_err() {
                errors += 1;
            }
        }
    }
    let us = |q: f64| h.value_at_quantile(q);
    let v = json!({"p50_us": us(0.5), "p99_us": us(0.99), "max_us": h.max(),
                   "timed": h.len(), "missed": missed});
    Ok((v, errors))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_redis_url_is_read_from_dq_s_command_line() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            redis_arg(&args(&["dq", "serve", "--redis", "redis://h:6390"])),
            Some("redis://h:6390".into())
        );
        assert_eq!(
            redis_arg(&args(&["dq", "serve", "--redis=redis://h:6391/2"])),
            Some("redis://h:6391/2".into())
        );
        assert_eq!(
            redis_arg(&args(&["dq", "serve", "--data-dir", "/tmp/x"])),
            None
        );
        // --redis-shards is another flag.
        assert_eq!(
            redis_arg(&args(&[
                "dq",
                "serve",
                "--redis-shards",
                "redis://a,redis://b"
            ])),
            None
        );
    }
}
