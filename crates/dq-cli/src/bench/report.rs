//! What a scenario observed and how it is reported: [`Observed`] (the
//! hand-outs per job and their lateness histogram), the lateness figures as
//! JSON, the human table plus the JSON line every scenario ends with
//! ([`print`]), and the `--check` of a result's correctness figures.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Result, bail};
use comfy_table::Table;
use hdrhistogram::Histogram;
use serde_json::{Value, json};

/// What consumers observed.
pub(super) struct Observed {
    /// Hand-outs per id.
    pub(super) seen: HashMap<String, u32>,
    /// Per id, its due time and when it was first received (µs).
    first: HashMap<String, (u64, u64)>,
    /// Lateness in µs.
    pub(super) lateness: Histogram<u64>,
    pub(super) early: u64,
    pub(super) last_us: u64,
    /// Jobs the server answered `acked` for.
    pub(super) acked: u64,
    /// Acks refused (an item's error) or lost with a failed call.
    pub(super) ack_errors: u64,
}

impl Observed {
    /// Nothing seen yet, room for `expected` ids.
    pub(super) fn new(expected: usize) -> Result<Self> {
        Ok(Self {
            seen: HashMap::with_capacity(expected),
            first: HashMap::with_capacity(expected),
            lateness: Histogram::new_with_bounds(1, 3_600_000_000, 3)?,
            early: 0,
            last_us: 0,
            acked: 0,
            ack_errors: 0,
        })
    }

    /// One hand-out of `id`, due at `due_ms`, received at `received_us`:
    /// early, or its lateness.
    pub(super) fn record(&mut self, id: String, due_ms: u64, received_us: u64) {
        let due_us = due_ms * 1000;
        if received_us < due_us {
            self.early += 1;
        } else {
            let _ = self.lateness.record((received_us - due_us).max(1));
        }
        self.first
            .entry(id.clone())
            .or_insert((due_us, received_us));
        *self.seen.entry(id).or_default() += 1;
        self.last_us = self.last_us.max(received_us);
    }

    /// The lateness of the jobs due in each second after `t0_ms` (the run's
    /// start, which the window counts from): `[second, jobs, p99_ms,
    /// max_ms]` rows, in order, so a tail is placed in the run (while the
    /// producer was still enqueueing, or later).
    pub(super) fn lateness_by_second(&self, t0_ms: u64) -> Result<Vec<Value>> {
        let mut by: std::collections::BTreeMap<u64, Histogram<u64>> = Default::default();
        for (due_us, received_us) in self.first.values() {
            let s = (due_us / 1000).saturating_sub(t0_ms) / 1000;
            let h = match by.entry(s) {
                std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::btree_map::Entry::Vacant(e) => {
                    e.insert(Histogram::new_with_bounds(1, 3_600_000_000, 3)?)
                }
            };
            let _ = h.record(received_us.saturating_sub(*due_us).max(1));
        }
        Ok(by
            .into_iter()
            .map(|(s, h)| json!([s, h.len(), ms(h.value_at_quantile(0.99)), ms(h.max())]))
            .collect())
    }

    /// Lateness measured from the later of each job's due time and the
    /// acknowledgement of its enqueue (`acked[i]` for the id ending in
    /// `-i`): a producer still enqueueing when jobs are due is told apart
    /// from a slow queue. A job handed out before its enqueue's reply
    /// arrived counts as on time.
    pub(super) fn lateness_from_ack(&self, acked: &[AtomicU64]) -> Result<Histogram<u64>> {
        let mut h = Histogram::new_with_bounds(1, 3_600_000_000, 3)?;
        for (id, (due_us, received_us)) in &self.first {
            let ack = id
                .rsplit_once('-')
                .and_then(|(_, i)| i.parse::<usize>().ok())
                .and_then(|i| acked.get(i))
                .map_or(0, |a| a.load(Ordering::Relaxed));
            let from = (*due_us).max(ack);
            let _ = h.record(received_us.saturating_sub(from).max(1));
        }
        Ok(h)
    }
}

fn ms(us: u64) -> f64 {
    (us as f64 / 1000.0 * 10.0).round() / 10.0
}

pub(super) fn lateness_json(h: &Histogram<u64>) -> Value {
    json!({
        "p50_ms": ms(h.value_at_quantile(0.5)),
        "p90_ms": ms(h.value_at_quantile(0.9)),
        "p99_ms": ms(h.value_at_quantile(0.99)),
        "p999_ms": ms(h.value_at_quantile(0.999)),
        "max_ms": ms(h.max()),
    })
}

pub(super) fn print(result: &Value) {
    let mut t = Table::new();
    t.load_preset(comfy_table::presets::UTF8_BORDERS_ONLY);
    t.set_header(vec!["figure", "value"]);
    fn rows(prefix: &str, v: &Value, t: &mut Table) {
        if let Some(o) = v.as_object() {
            for (k, v) in o {
                let name = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                if v.is_object() {
                    rows(&name, v, t);
                } else {
                    t.add_row(vec![name, v.to_string()]);
                }
            }
        }
    }
    rows("", result, &mut t);
    println!("{t}");
    println!("{result}");
}

/// The correctness figures of a result, for `--check`.
pub(super) fn check(result: &Value) -> Result<()> {
    let mut bad = Vec::new();
    for key in [
        "lost",
        "duplicated",
        "early",
        "errors",
        "enqueue_errors",
        "ack_errors",
        "fill_errors",
        "topics_left",
    ] {
        if let Some(n) = result.get(key).and_then(Value::as_u64)
            && n > 0
        {
            bad.push(format!("{key} = {n}"));
        }
    }
    if bad.is_empty() {
        Ok(())
    } else {
        bail!("check failed: {}", bad.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_reads_correctness_figures_only() {
        assert!(check(&json!({"lost": 0, "duplicated": 0, "early": 0, "jobs_per_s": 1})).is_ok());
        let e = check(&json!({"lost": 2, "duplicated": 0, "early": 1})).unwrap_err();
        assert!(check(&json!({"lost": 0, "acked": 9, "ack_errors": 0})).is_ok());
        let refused = check(&json!({"lost": 0, "acked": 8, "ack_errors": 1})).unwrap_err();
        assert!(refused.to_string().contains("ack_errors = 1"), "{refused}");
        assert!(
            e.to_string().contains("lost = 2") && e.to_string().contains("early = 1"),
            "{e}"
        );
    }
}
