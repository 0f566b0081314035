//! Prometheus metrics, served at `GET /metrics` in the text exposition
//! format (version 0.0.4). Names and meanings: docs/operations.md.
//!
//! Two kinds of figures:
//! - read from the store at each scrape (counts per state, running totals,
//!   oldest overdue age): the same on every dq instance of a deployment;
//! - measured by this process (lateness of the jobs it handed out, HTTP
//!   request durations): per instance, as histograms.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds (seconds) of the histogram buckets: 1 ms to 1 min.
const BUCKETS: [f64; 16] = [
    0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0,
];

/// Upper bounds (seconds) of the HTTP request histograms: fewer, as there is
/// one histogram per method, route and status.
const HTTP_BUCKETS: [f64; 8] = [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0];

/// A histogram with fixed buckets; observations in microseconds.
#[derive(Debug)]
struct Histogram {
    bounds: &'static [f64],
    buckets: Vec<AtomicU64>,
    count: AtomicU64,
    sum_us: AtomicU64,
}

impl Default for Histogram {
    fn default() -> Self {
        Self::with(&BUCKETS)
    }
}

impl Histogram {
    fn with(bounds: &'static [f64]) -> Self {
        Self {
            bounds,
            buckets: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
            count: AtomicU64::new(0),
            sum_us: AtomicU64::new(0),
        }
    }

    fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        if let Some(i) = self.bounds.iter().position(|b| secs <= *b) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_us
            .fetch_add(d.as_micros() as u64, Ordering::Relaxed);
    }

    /// The upper bound of the bucket holding quantile `q` (0–1), in
    /// seconds; infinity past the last bucket; None if nothing was observed.
    fn quantile(&self, q: f64) -> Option<f64> {
        let count = self.count.load(Ordering::Relaxed);
        if count == 0 {
            return None;
        }
        let want = (q * count as f64).ceil().max(1.0) as u64;
        let mut cumulative = 0;
        for (i, b) in self.bounds.iter().enumerate() {
            cumulative += self.buckets[i].load(Ordering::Relaxed);
            if cumulative >= want {
                return Some(*b);
            }
        }
        Some(f64::INFINITY)
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        let mut cumulative = 0;
        for (i, b) in self.bounds.iter().enumerate() {
            cumulative += self.buckets[i].load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{b}\"}} {cumulative}");
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {count}");
        let sum = self.sum_us.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum{{{labels}}} {sum}");
        let _ = writeln!(out, "{name}_count{{{labels}}} {count}");
    }
}

/// What `/metrics` shows of the store, as the service read it
/// ([`crate::Service::metrics_text`]): [`Metrics::render`] writes it out
/// without a store call of its own.
#[derive(Debug, Default)]
pub struct StoreSnapshot {
    /// Each part of the store (one per Redis shard) and whether it answers.
    pub health: Vec<(String, dq_core::StoreResult<()>)>,
    /// How many topics the store knows.
    pub topics: usize,
    /// The counts of the topics that get series of their own.
    pub stats: Vec<(dq_core::Topic, dq_core::TopicStats)>,
    /// The store's size in bytes, where it can tell.
    pub bytes: Option<u64>,
    /// Counters of the store's own work.
    pub work: Vec<dq_core::WorkCounter>,
    /// The time dq decides by, now (ms).
    pub now_ms: u64,
}

/// The metrics this process measures itself.
#[derive(Debug, Default)]
pub struct Metrics {
    lateness: Mutex<BTreeMap<String, std::sync::Arc<Histogram>>>,
    http: Mutex<BTreeMap<(String, String, u16), std::sync::Arc<Histogram>>>,
    push: Mutex<BTreeMap<(String, &'static str), std::sync::Arc<Histogram>>>,
    /// Jobs of forwarding topics by (topic, outcome).
    forwarded: Mutex<BTreeMap<(String, &'static str), u64>>,
    /// Reserve calls in progress (most of them waiting for a job).
    reserving: std::sync::Arc<std::sync::atomic::AtomicI64>,
    /// Push deliveries in progress.
    delivering: std::sync::Arc<std::sync::atomic::AtomicI64>,
    /// Which topics get series of their own.
    series: Mutex<TopicSeries>,
}

/// Which topics get `dq_topic_*` series of their own: every topic while
/// there are at most `max_topics`; beyond, the topics `topics` names and
/// those this process handed jobs out of (the ones with lateness, push or
/// forwarding figures here), at most `max_topics` of them in name order.
/// The rest are counted in `dq_topics_without_series`, not summed: a sum
/// would read every topic's counts on each scrape, the cost this bound
/// avoids (`/metrics` with 100,000 topics stays one page).
#[derive(Debug, Clone)]
pub struct TopicSeries {
    /// Most topics with series of their own.
    pub max_topics: usize,
    /// Topics that get series whatever their count (`metrics_topics`).
    pub topics: Vec<crate::keys::TopicPattern>,
}

impl Default for TopicSeries {
    fn default() -> Self {
        Self {
            max_topics: 1000,
            topics: Vec::new(),
        }
    }
}

/// Counts one call in progress while it lives.
pub(crate) struct InFlight(std::sync::Arc<std::sync::atomic::AtomicI64>);

impl InFlight {
    fn new(n: &std::sync::Arc<std::sync::atomic::AtomicI64>) -> Self {
        n.fetch_add(1, Ordering::Relaxed);
        Self(n.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Escapes a label value (`\`, `"` and newlines).
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl Metrics {
    /// Sets which topics get series of their own.
    pub fn set_topic_series(&self, series: TopicSeries) {
        *self.series.lock().expect("poisoned") = series;
    }

    /// The topics of `all` that get series of their own (see [`TopicSeries`]).
    pub(crate) fn with_series(&self, all: Vec<dq_core::Topic>) -> Vec<dq_core::Topic> {
        let series = self.series.lock().expect("poisoned").clone();
        if all.len() <= series.max_topics {
            return all;
        }
        let mut active: std::collections::HashSet<String> = self
            .lateness
            .lock()
            .expect("poisoned")
            .keys()
            .cloned()
            .collect();
        active.extend(
            self.push
                .lock()
                .expect("poisoned")
                .keys()
                .map(|(t, _)| t.clone()),
        );
        active.extend(
            self.forwarded
                .lock()
                .expect("poisoned")
                .keys()
                .map(|(t, _)| t.clone()),
        );
        all.into_iter()
            .filter(|t| {
                active.contains(t.as_str()) || series.topics.iter().any(|p| p.matches(t.as_str()))
            })
            .take(series.max_topics)
            .collect()
    }

    /// Records that a job of `topic` was handed out `late` after its due time.
    pub fn observe_lateness(&self, topic: &str, late: Duration) {
        let h = self
            .lateness
            .lock()
            .expect("poisoned")
            .entry(topic.to_string())
            .or_default()
            .clone();
        h.observe(late);
    }

    /// Upper bounds (seconds) of the lateness p50 and p99 of `topic`'s
    /// hand-outs by this process, from the histogram's buckets.
    pub fn lateness_quantiles(&self, topic: &str) -> Option<(f64, f64)> {
        let h = self
            .lateness
            .lock()
            .expect("poisoned")
            .get(topic)
            .cloned()?;
        Some((h.quantile(0.5)?, h.quantile(0.99)?))
    }

    /// Records one push delivery: how long the callback took and what came
    /// of it (`acked`, `retry`, `dead`, `unrecorded`).
    pub fn observe_push(&self, topic: &str, outcome: &'static str, took: Duration) {
        let h = self
            .push
            .lock()
            .expect("poisoned")
            .entry((topic.to_string(), outcome))
            .or_default()
            .clone();
        h.observe(took);
    }

    /// Records `n` jobs of a forwarding topic with one outcome (`written`,
    /// `retry`, `dead`, `lost`).
    pub fn observe_forward(&self, topic: &str, outcome: &'static str, n: u64) {
        if n > 0 {
            *self
                .forwarded
                .lock()
                .expect("poisoned")
                .entry((topic.to_string(), outcome))
                .or_default() += n;
        }
    }

    /// One reserve call in progress, while the guard lives.
    pub(crate) fn reserving(&self) -> InFlight {
        InFlight::new(&self.reserving)
    }

    /// One push delivery in progress, while the guard lives.
    pub(crate) fn delivering(&self) -> InFlight {
        InFlight::new(&self.delivering)
    }

    /// Records one HTTP request.
    pub fn observe_http(&self, method: &str, route: &str, status: u16, took: Duration) {
        let h = self
            .http
            .lock()
            .expect("poisoned")
            .entry((method.to_string(), route.to_string(), status))
            .or_insert_with(|| std::sync::Arc::new(Histogram::with(&HTTP_BUCKETS)))
            .clone();
        h.observe(took);
    }

    /// The exposition text: the store's figures as `store` read them, then
    /// this process's.
    pub fn render(&self, store: &StoreSnapshot) -> String {
        let mut out = String::new();
        let health = &store.health;
        let up = health.iter().any(|(_, r)| r.is_ok());
        out.push_str(
            "# HELP dq_up Whether the store answers (1) or not (0); with Redis shards, whether any does.\n# TYPE dq_up gauge\n",
        );
        let _ = writeln!(out, "dq_up {}", u8::from(up));
        out.push_str("# HELP dq_store_up Whether each part of the store (each Redis shard) answers.\n# TYPE dq_store_up gauge\n");
        for (name, r) in health {
            let _ = writeln!(
                out,
                "dq_store_up{{store=\"{}\"}} {}",
                label(name),
                u8::from(r.is_ok())
            );
        }
        let (stats, all) = (&store.stats, store.topics);
        out.push_str("# HELP dq_topics Topics in the store.\n# TYPE dq_topics gauge\n");
        let _ = writeln!(out, "dq_topics {all}");
        out.push_str("# HELP dq_topics_without_series Topics without dq_topic_* series of their own (beyond metrics_max_topics, not named in metrics_topics, nothing handed out by this process).\n# TYPE dq_topics_without_series gauge\n");
        let _ = writeln!(
            out,
            "dq_topics_without_series {}",
            all.saturating_sub(stats.len())
        );
        out.push_str("# HELP dq_topic_jobs Jobs of a topic in each state now (ready: due and not yet handed out).\n# TYPE dq_topic_jobs gauge\n");
        for (t, s) in stats {
            let t = label(t.as_str());
            for (state, n) in [
                ("scheduled", s.scheduled),
                ("ready", s.ready),
                ("reserved", s.reserved),
                ("dead", s.dead),
            ] {
                let _ = writeln!(out, "dq_topic_jobs{{topic=\"{t}\",state=\"{state}\"}} {n}");
            }
        }
        out.push_str("# HELP dq_topic_oldest_overdue_seconds How long the most overdue waiting job of a topic has been due (0 if none).\n# TYPE dq_topic_oldest_overdue_seconds gauge\n");
        for (t, s) in stats {
            let _ = writeln!(
                out,
                "dq_topic_oldest_overdue_seconds{{topic=\"{}\"}} {}",
                label(t.as_str()),
                s.oldest_overdue_ms as f64 / 1000.0
            );
        }
        type Pick = fn(&dq_core::TopicCounters) -> u64;
        let counters: [(&str, &str, Pick); 12] = [
            ("enqueued", "Jobs created.", |c| c.enqueued),
            ("acked", "Jobs acknowledged (done).", |c| c.acked),
            (
                "failed",
                "Failed attempts: nacks and expired leases.",
                |c| c.failed,
            ),
            (
                "expired",
                "Leases that ran out (each also a failed attempt); not jobs that expired (expired_unhandled).",
                |c| c.expired,
            ),
            (
                "expired_unhandled",
                "Jobs whose own expiry passed before their next hand-out: dead with last_error expired (also counted in dead) or dropped.",
                |c| c.expired_unhandled,
            ),
            (
                "nacked",
                "Failed attempts reported by consumers (nack, bury, push failures): failed - expired.",
                |c| c.failed.saturating_sub(c.expired),
            ),
            (
                "retried",
                "Failed attempts given another attempt later: failed - (dead - expired_unhandled) (one too many per job dropped on expiry).",
                |c| {
                    c.failed
                        .saturating_sub(c.dead.saturating_sub(c.expired_unhandled))
                },
            ),
            ("dead", "Jobs that went to the dead letters.", |c| c.dead),
            ("cancelled", "Jobs cancelled.", |c| c.cancelled),
            (
                "dead_dropped",
                "Dead letters dropped over the topic's dead_cap.",
                |c| c.dead_dropped,
            ),
            ("replayed", "Dead letters replayed.", |c| c.replayed),
            (
                "rate_limited",
                "Ready jobs a reserve asked for and held back by the topic's rate limit (a job held over several reserves counts each time).",
                |c| c.rate_limited,
            ),
        ];
        for (name, help, pick) in counters {
            let _ = writeln!(out, "# HELP dq_topic_{name}_total {help}");
            let _ = writeln!(out, "# TYPE dq_topic_{name}_total counter");
            for (t, s) in stats {
                let _ = writeln!(
                    out,
                    "dq_topic_{name}_total{{topic=\"{}\"}} {}",
                    label(t.as_str()),
                    pick(&s.counters)
                );
            }
        }
        out.push_str("# HELP dq_lateness_seconds Time from a job's due time to its hand-out by this process.\n# TYPE dq_lateness_seconds histogram\n");
        for (t, h) in self.lateness.lock().expect("poisoned").iter() {
            h.render(
                &mut out,
                "dq_lateness_seconds",
                &format!("topic=\"{}\"", label(t)),
            );
        }
        out.push_str("# HELP dq_push_delivery_duration_seconds Push deliveries by this process: callback duration, by outcome (acked, retry, dead, unrecorded); _count counts outcomes.\n# TYPE dq_push_delivery_duration_seconds histogram\n");
        for ((t, o), h) in self.push.lock().expect("poisoned").iter() {
            h.render(
                &mut out,
                "dq_push_delivery_duration_seconds",
                &format!("topic=\"{}\",outcome=\"{o}\"", label(t)),
            );
        }
        out.push_str("# HELP dq_http_request_duration_seconds HTTP requests served by this process.\n# TYPE dq_http_request_duration_seconds histogram\n");
        for ((m, r, s), h) in self.http.lock().expect("poisoned").iter() {
            h.render(
                &mut out,
                "dq_http_request_duration_seconds",
                &format!(
                    "method=\"{}\",route=\"{}\",status=\"{s}\"",
                    label(m),
                    label(r)
                ),
            );
        }
        out.push_str("# HELP dq_forwarded_jobs_total Jobs of forwarding topics (redis_stream, redis_list) by outcome on this instance: written (into the target and acked), retry and dead (the target refused or was unreachable: a failed attempt), lost (the lease had passed to another holder, or written and not acked), unknown (the store did not answer the one-script write: written, or back after its lease).\n# TYPE dq_forwarded_jobs_total counter\n");
        for ((t, o), n) in self.forwarded.lock().expect("poisoned").iter() {
            let _ = writeln!(
                out,
                "dq_forwarded_jobs_total{{topic=\"{}\",outcome=\"{o}\"}} {n}",
                label(t)
            );
        }
        let _ = writeln!(
            out,
            "# HELP dq_build_info The running dq's version (value 1).\n# TYPE dq_build_info gauge\ndq_build_info{{version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        );
        let _ = writeln!(
            out,
            "# HELP dq_reserve_in_progress Reserve calls in progress on this instance (most wait for a job).\n# TYPE dq_reserve_in_progress gauge\ndq_reserve_in_progress {}",
            self.reserving.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "# HELP dq_push_deliveries_in_flight Push deliveries this instance is making now.\n# TYPE dq_push_deliveries_in_flight gauge\ndq_push_deliveries_in_flight {}",
            self.delivering.load(Ordering::Relaxed)
        );
        if let Some(bytes) = store.bytes {
            let _ = writeln!(
                out,
                "# HELP dq_store_bytes Size of the store: the embedded store's files, or the Redis servers' used memory.\n# TYPE dq_store_bytes gauge\ndq_store_bytes {bytes}"
            );
        }
        for c in &store.work {
            let _ = writeln!(
                out,
                "# HELP {0} {1}\n# TYPE {0} counter\n{0} {2}",
                c.name, c.help, c.value
            );
        }
        use dq_core::Clock as _;
        let offset = store.now_ms as f64 - dq_core::SystemClock.now_ms() as f64;
        let _ = writeln!(
            out,
            "# HELP dq_clock_offset_seconds The time dq decides by (the store's clock, or the monotonic clock since start) minus this host's wall clock.\n# TYPE dq_clock_offset_seconds gauge\ndq_clock_offset_seconds {:.3}",
            offset / 1000.0
        );
        process_metrics(&mut out);
        out
    }
}

/// The standard `process_*` metrics, read from /proc (Linux; nothing
/// elsewhere): CPU time, resident memory, open and allowed descriptors,
/// start time.
fn process_metrics(out: &mut String) {
    // USER_HZ: the unit of utime/stime in /proc/self/stat, 100 on Linux.
    const TICKS_PER_S: f64 = 100.0;
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return;
    };
    // Fields after the ")" closing the command name, which may hold spaces.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let num = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok());
    // rest[0] is field 3 (state): utime is field 14, stime 15, starttime 22.
    if let (Some(u), Some(s)) = (num(11), num(12)) {
        let _ = writeln!(
            out,
            "# HELP process_cpu_seconds_total User and system CPU time spent.\n# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total {}",
            (u + s) / TICKS_PER_S
        );
    }
    let boot = std::fs::read_to_string("/proc/stat").ok().and_then(|t| {
        t.lines()
            .find_map(|l| l.strip_prefix("btime "))
            .and_then(|v| v.trim().parse::<f64>().ok())
    });
    if let (Some(start), Some(boot)) = (num(19), boot) {
        let _ = writeln!(
            out,
            "# HELP process_start_time_seconds Start time of the process since the Unix epoch.\n# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds {}",
            boot + start / TICKS_PER_S
        );
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
    };
    if let Some(rss) = kib("VmRSS:") {
        let _ = writeln!(
            out,
            "# HELP process_resident_memory_bytes Resident memory size in bytes.\n# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes {}",
            rss * 1024
        );
    }
    if let Some(vm) = kib("VmSize:") {
        let _ = writeln!(
            out,
            "# HELP process_virtual_memory_bytes Virtual memory size in bytes.\n# TYPE process_virtual_memory_bytes gauge\nprocess_virtual_memory_bytes {}",
            vm * 1024
        );
    }
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        let _ = writeln!(
            out,
            "# HELP process_open_fds Open file descriptors.\n# TYPE process_open_fds gauge\nprocess_open_fds {}",
            fds.count()
        );
    }
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    if let Some(max) = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3))
        .and_then(|v| v.parse::<u64>().ok())
    {
        let _ = writeln!(
            out,
            "# HELP process_max_fds Most open file descriptors allowed.\n# TYPE process_max_fds gauge\nprocess_max_fds {max}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(500));
        h.observe(Duration::from_millis(3));
        h.observe(Duration::from_secs(100));
        let mut out = String::new();
        h.render(&mut out, "x", "a=\"b\"");
        assert!(out.contains("x_bucket{a=\"b\",le=\"0.001\"} 1\n"), "{out}");
        assert!(out.contains("x_bucket{a=\"b\",le=\"0.005\"} 2\n"), "{out}");
        assert!(out.contains("x_bucket{a=\"b\",le=\"60\"} 2\n"), "{out}");
        assert!(out.contains("x_bucket{a=\"b\",le=\"+Inf\"} 3\n"), "{out}");
        assert!(out.contains("x_count{a=\"b\"} 3\n"), "{out}");
        assert!(out.contains("x_sum{a=\"b\"} 100.0035\n"), "{out}");
    }

    #[test]
    fn quantiles_are_bucket_bounds() {
        let h = Histogram::default();
        assert_eq!(h.quantile(0.5), None);
        for _ in 0..98 {
            h.observe(Duration::from_micros(1500));
        }
        h.observe(Duration::from_millis(40));
        h.observe(Duration::from_secs(100));
        assert_eq!(h.quantile(0.5), Some(0.002));
        assert_eq!(h.quantile(0.99), Some(0.05));
        assert_eq!(h.quantile(1.0), Some(f64::INFINITY));
    }

    #[test]
    fn labels_are_escaped() {
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
