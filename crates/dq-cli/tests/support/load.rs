//! A checked load for fault scenarios: producers enqueue with explicit ids
//! and delays, consumers reserve and ack, a fault is injected periodically,
//! and a checker counts every job — lost, unexpected, duplicated, early.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// What the load saw, for the checker.
#[derive(Default)]
pub(crate) struct Ledger {
    /// Enqueues answered 2xx: id → earliest moment it may be handed out.
    acked: HashMap<String, Instant>,
    /// Enqueues sent whose answer was lost (a crash): they may or may not exist.
    unknown: HashMap<String, Instant>,
    /// Hand-outs: id → moments, whether that hand-out's ack got a 2xx, and
    /// when the ack's answer came.
    deliveries: HashMap<String, Vec<(Instant, bool, Instant)>>,
    /// When the load started (the examples' times count from it).
    start: Option<Instant>,
}

/// The checker's counts.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Counts {
    pub(crate) acknowledged: usize,
    pub(crate) delivered: usize,
    pub(crate) lost: usize,
    pub(crate) unexpected: usize,
    pub(crate) duplicated: usize,
    pub(crate) redelivered_after_crash: usize,
    /// Hand-outs before the due moment, beyond the store's 1 ms resolution.
    pub(crate) early: usize,
    /// The earliest hand-out, in µs before its due moment (0: none early).
    pub(crate) earliest_us: u128,
    /// A few duplicated jobs: id, then each hand-out (ms since the load
    /// started, and whether its ack got a 2xx), for the failure message.
    pub(crate) duplicates: Vec<String>,
    /// For each duplicated job: when the 2xx of the ack before the second
    /// hand-out came (a test whose fault may lose the last acks, such as a
    /// crash of PostgreSQL under `synchronous_commit = off`, checks these
    /// against the moments of its faults).
    pub(crate) undone_acks: Vec<Instant>,
}

impl Ledger {
    fn counts(&self) -> Counts {
        let mut c = Counts {
            acknowledged: self.acked.len(),
            delivered: self.deliveries.len(),
            ..Counts::default()
        };
        // Never handed out. (A hand-out whose ack answer was lost is not lost:
        // the ack may have been done; if it was not, the job comes back.)
        c.lost = self
            .acked
            .keys()
            .filter(|id| !self.deliveries.contains_key(*id))
            .count();
        for (id, ds) in &self.deliveries {
            let not_before = self.acked.get(id).or_else(|| self.unknown.get(id));
            let Some(not_before) = not_before else {
                c.unexpected += 1;
                continue;
            };
            for (at, _, _) in ds {
                let ahead = not_before.saturating_duration_since(*at);
                c.earliest_us = c.earliest_us.max(ahead.as_micros());
                // Due times are whole milliseconds of the store's clock, read
                // after the request left: up to 1 ms before `not_before`.
                c.early += usize::from(ahead > Duration::from_millis(1));
            }
            let acked_first = ds.iter().position(|x| x.1);
            match acked_first {
                // Handed out again after an ack that succeeded: a duplicate.
                Some(p) if p + 1 < ds.len() => {
                    c.duplicated += 1;
                    c.undone_acks.push(ds[p].2);
                    if c.duplicates.len() < 5 {
                        let start = self.start.unwrap_or(*not_before);
                        let times: Vec<String> = ds
                            .iter()
                            .map(|(at, ok, _)| {
                                format!(
                                    "{} ms {}",
                                    at.saturating_duration_since(start).as_millis(),
                                    if *ok { "acked" } else { "not acked" }
                                )
                            })
                            .collect();
                        c.duplicates.push(format!("{id}: {}", times.join(", ")));
                    }
                }
                _ if ds.len() > 1 => c.redelivered_after_crash += 1,
                _ => {}
            }
        }
        c
    }
}

/// The load: producers enqueue with explicit ids and delays of 0–300 ms,
/// consumers reserve and ack; `fault` runs every `every` and injects a fault
/// (then returns once the system is back). After `run`, the consumers drain
/// until every acknowledged job was delivered (or 60 s pass).
pub(crate) async fn crash_loop<F, Fut>(
    base: &str,
    run: Duration,
    every: Duration,
    mut fault: F,
) -> (Counts, usize)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let ledger = Arc::new(Mutex::new(Ledger {
        start: Some(Instant::now()),
        ..Ledger::default()
    }));
    let stop_producing = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop_consuming = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let mut tasks = Vec::new();
    for p in 0..2 {
        let (http, base, ledger, stop) = (
            http.clone(),
            base.to_string(),
            ledger.clone(),
            stop_producing.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                n += 1;
                let id = format!("p{p}-{n}");
                let delay = (n * 37 + p * 11) % 300;
                let sent = Instant::now();
                let not_before = sent + Duration::from_millis(delay);
                let res = http
                    .post(format!("{base}/v1/topics/load/jobs"))
                    .json(&json!({"id": id, "body": {"n": n}, "delay_ms": delay}))
                    .send()
                    .await;
                let done = res.is_ok_and(|r| r.status().is_success());
                {
                    let mut l = ledger.lock().unwrap();
                    // No answer (a crash) or a 503: it may or may not exist.
                    let book = if done { &mut l.acked } else { &mut l.unknown };
                    book.insert(id, not_before);
                }
                tokio::time::sleep(Duration::from_millis(4)).await;
            }
        }));
    }
    for _ in 0..2 {
        let (http, base, ledger, stop) = (
            http.clone(),
            base.to_string(),
            ledger.clone(),
            stop_consuming.clone(),
        );
        tasks.push(tokio::spawn(async move {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let res = http
                    .post(format!("{base}/v1/reserve"))
                    .json(&json!({"topics": ["load"], "max": 20, "wait_ms": 200, "lease_ms": 1500}))
                    .send()
                    .await;
                let jobs = match res {
                    Ok(r) if r.status().is_success() => match r.json::<Value>().await {
                        Ok(v) => v["jobs"].as_array().cloned().unwrap_or_default(),
                        Err(_) => Vec::new(),
                    },
                    _ => {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let at = Instant::now();
                for j in jobs {
                    let id = j["id"].as_str().unwrap().to_string();
                    let ok = http
                        .post(format!("{base}/v1/topics/load/jobs/{id}/ack"))
                        .json(&json!({"token": j["token"]}))
                        .send()
                        .await
                        .is_ok_and(|r| r.status().is_success());
                    let answered = Instant::now();
                    ledger
                        .lock()
                        .unwrap()
                        .deliveries
                        .entry(id)
                        .or_default()
                        .push((at, ok, answered));
                }
            }
        }));
    }
    let started = Instant::now();
    let mut faults = 0;
    while started.elapsed() < run {
        tokio::time::sleep(every).await;
        fault().await;
        faults += 1;
    }
    stop_producing.store(true, std::sync::atomic::Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while ledger.lock().unwrap().counts().lost > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Late deliveries of unknown enqueues and of crash-interrupted leases.
    tokio::time::sleep(Duration::from_millis(1600)).await;
    stop_consuming.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    let counts = ledger.lock().unwrap().counts();
    (counts, faults)
}

pub(crate) fn check(name: &str, counts: &Counts, faults: usize, run: Duration) {
    eprintln!(
        "faults: {name}: {faults} faults in {run:?}; acknowledged {}, delivered {}, lost {}, unexpected {}, duplicated {}, redelivered after a crash {}, early {} (earliest {} µs before due)",
        counts.acknowledged,
        counts.delivered,
        counts.lost,
        counts.unexpected,
        counts.duplicated,
        counts.redelivered_after_crash,
        counts.early,
        counts.earliest_us
    );
    assert!(faults >= 2, "{name}: the faults were injected");
    assert!(
        counts.acknowledged > 100,
        "{name}: the load ran: {counts:?}"
    );
    assert_eq!(
        (
            counts.lost,
            counts.unexpected,
            counts.duplicated,
            counts.early
        ),
        (0, 0, 0, 0),
        "{name}: {counts:?}"
    );
}
