//! A schedule's rule, pure: its settings checked, the cron expression or
//! interval parsed, its slots in a time zone (gaps and repeats of DST
//! included), the job each slot becomes, and its stored form. No I/O: the
//! service stores schedules and fires their slots
//! (`crate::service`'s `schedules.rs`), the [`crate::scheduler::Scheduler`]
//! loop asks it to, every [`TICK`].

use std::time::Duration;

use chrono::{LocalResult, NaiveDateTime, TimeZone, Timelike, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds};
use dq_api::{self as wire, CatchUp};
use dq_core::{Body, InvalidInput, JobId, Limits, NewJob, Topic, When};

/// The record kind schedules are kept under.
pub const KIND: &str = "schedule";
/// How far ahead of its slot a job is enqueued.
pub const LEAD_MS: u64 = 2_000;
/// How often each instance looks at the schedules.
pub const TICK: Duration = Duration::from_millis(500);
/// Most missed slots `catch_up: "all"` enqueues after downtime (the latest).
pub const MAX_CATCH_UP: usize = 1_000;
/// Dedup window of every firing's job: a slot fired again within it (an
/// instance that read the mark before another raised it) stores nothing.
pub const FIRING_DEDUP_MS: u64 = 3_600_000;
/// Longest schedule name: its jobs' ids add `@` and up to 20 digits.
pub const MAX_NAME_LEN: usize = 200;
/// Smallest `every`.
pub const MIN_EVERY_MS: u64 = 1_000;
/// Largest `every` (about ten years: slot arithmetic stays far from overflow).
pub const MAX_EVERY_MS: u64 = 3660 * 86_400_000;
/// Slots shown in a schedule's reply.
pub const NEXT_SHOWN: usize = 5;
/// Most schedules a store keeps (every instance reads them all each pass).
pub const MAX_SCHEDULES: usize = 10_000;
/// A slot is missed (and `catch_up` decides) once it is this far behind
/// the pass that finds it not enqueued: no pass ran from `LEAD_MS` before
/// it to this after it. A slot found less late is fired as it is.
pub const MISSED_AFTER_MS: u64 = 500;
/// Most cron candidates looked at to find one slot (a per-second rule
/// steps through a whole repeated hour at a fall-back).
const CRON_STEPS: usize = 100_000;

/// A rule's moments.
#[derive(Debug, Clone)]
enum Rule {
    Cron(Box<Cron>),
    Every(u64),
}

/// A schedule, validated: everything a pass needs.
#[derive(Debug, Clone)]
pub struct Schedule {
    /// Its name.
    pub name: String,
    /// Its settings, normalised (defaults filled in).
    pub spec: wire::ScheduleSpec,
    /// Where its jobs go.
    pub topic: Topic,
    rule: Rule,
    tz: Tz,
    start_ms: Option<u64>,
    end_ms: Option<u64>,
    catch_up: CatchUp,
    body: Body,
    priority: u32,
}

fn bad(code: &'static str, message: impl Into<String>) -> InvalidInput {
    InvalidInput::new(code, message)
}

/// Checks a schedule name: the id charset (printable, no whitespace), at
/// most [`MAX_NAME_LEN`] characters.
///
/// # Errors
/// `invalid_schedule_name`.
pub fn check_name(name: &str) -> Result<(), InvalidInput> {
    let chars = name.chars().count();
    if chars > MAX_NAME_LEN {
        return Err(bad(
            "invalid_schedule_name",
            format!("a schedule name must be 1-{MAX_NAME_LEN} characters, got {chars}"),
        ));
    }
    JobId::new(name).map_err(|e| {
        bad(
            "invalid_schedule_name",
            format!(
                "a schedule name follows the job id rules (its jobs are named after it): {}",
                e.message
            ),
        )
    })?;
    Ok(())
}

const FIELDS_5: [&str; 5] = ["minute", "hour", "day-of-month", "month", "day-of-week"];
const FIELDS_6: [&str; 6] = [
    "second",
    "minute",
    "hour",
    "day-of-month",
    "month",
    "day-of-week",
];

fn parser() -> CronParser {
    CronParser::builder().seconds(Seconds::Optional).build()
}

/// Parses a cron expression of 5 fields, or 6 with seconds first.
///
/// # Errors
/// `invalid_cron`, naming the field at fault where one is.
fn parse_cron(expr: &str) -> Result<Cron, InvalidInput> {
    let fields: Vec<&str> = expr.split_whitespace().collect();
    let names: &[&str] = match fields.len() {
        5 => &FIELDS_5,
        6 => &FIELDS_6,
        // Aliases (@daily, @hourly, …) are one field.
        1 if expr.trim_start().starts_with('@') => &[],
        n => {
            return Err(bad(
                "invalid_cron",
                format!(
                    "a cron expression has 5 fields (minute hour day-of-month month day-of-week) or 6 (second first), got {n}: {expr:?}"
                ),
            ));
        }
    };
    let p = parser();
    p.parse(expr).map_err(|e| {
        // Which field: the first that fails alone among wildcards.
        let culprit = (0..names.len()).find(|&i| {
            let probe: Vec<&str> = (0..names.len())
                .map(|k| if k == i { fields[k] } else { "*" })
                .collect();
            p.parse(&probe.join(" ")).is_err()
        });
        match culprit {
            Some(i) => bad(
                "invalid_cron",
                format!(
                    "cron field {} ({}) {:?} is invalid: {e}",
                    i + 1,
                    names[i],
                    fields[i]
                ),
            ),
            None => bad(
                "invalid_cron",
                format!("cron expression {expr:?} is invalid: {e}"),
            ),
        }
    })
}

/// An RFC 3339 time in Unix ms; one before 1970 is 1970 (no slot is
/// earlier).
fn parse_time(field: &'static str, code: &'static str, v: &str) -> Result<u64, InvalidInput> {
    chrono::DateTime::parse_from_rfc3339(v)
        .map(|t| u64::try_from(t.timestamp_millis()).unwrap_or(0))
        .map_err(|_| {
            bad(
                code,
                format!("{field} must be an RFC 3339 time (2026-12-01T09:00:00+01:00), got {v:?}"),
            )
        })
}

/// What every job of a schedule is, but its id and due time.
fn template(body: Body, priority: u32) -> NewJob {
    NewJob {
        priority,
        dedup_ms: Some(FIRING_DEDUP_MS),
        ..NewJob::with_generated_id(body, When::TopicDefault)
    }
}

impl Schedule {
    /// Validates a schedule's settings.
    ///
    /// # Errors
    /// The first thing wrong, with its own code: `invalid_schedule_name`,
    /// `invalid_topic`, `invalid_schedule` (both or neither of `cron` and
    /// `every`), `invalid_cron`, `invalid_every`, `invalid_timezone`,
    /// `invalid_start_at`, `invalid_end_at`, `invalid_body`, `body_too_large`.
    pub fn new(
        name: &str,
        spec: wire::ScheduleSpec,
        limits: &Limits,
    ) -> Result<Self, InvalidInput> {
        check_name(name)?;
        let topic = Topic::new(spec.topic.clone())?;
        let rule = match (&spec.cron, &spec.every) {
            (Some(_), Some(_)) => {
                return Err(bad("invalid_schedule", "give cron or every, not both"));
            }
            (None, None) => {
                return Err(bad(
                    "invalid_schedule",
                    "give cron (\"0 9 * * MON-FRI\") or every (\"90s\")",
                ));
            }
            (Some(c), None) => Rule::Cron(Box::new(parse_cron(c)?)),
            (None, Some(e)) => {
                let d = humantime::parse_duration(e).map_err(|err| {
                    bad(
                        "invalid_every",
                        format!(
                            "every must be a duration like \"90s\" or \"15m\", got {e:?}: {err}"
                        ),
                    )
                })?;
                let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
                if !(MIN_EVERY_MS..=MAX_EVERY_MS).contains(&ms) {
                    return Err(bad(
                        "invalid_every",
                        format!("every must be between 1s and 3660d, got {e:?}"),
                    ));
                }
                if d.subsec_nanos() % 1_000_000 != 0 {
                    return Err(bad(
                        "invalid_every",
                        format!("every is counted in whole milliseconds, got {e:?}"),
                    ));
                }
                Rule::Every(ms)
            }
        };
        let tz_name = spec.timezone.clone().unwrap_or_else(|| "UTC".into());
        let tz: Tz = tz_name.parse().map_err(|_| {
            bad(
                "invalid_timezone",
                format!("{tz_name:?} is not an IANA time zone (e.g. Europe/Berlin, America/New_York, UTC)"),
            )
        })?;
        let start_ms = spec
            .start_at
            .as_deref()
            .map(|v| parse_time("start_at", "invalid_start_at", v))
            .transpose()?;
        let end_ms = spec
            .end_at
            .as_deref()
            .map(|v| parse_time("end_at", "invalid_end_at", v))
            .transpose()?;
        // An end_at before start_at (or in the past) is taken: the
        // schedule has no slot, and its `next` says so (the OpenAPI
        // document cannot compare two fields, and takes it).
        let body = match &spec.body {
            Some(raw) => Body::Json(raw.get().to_string()),
            None => Body::Json("null".into()),
        };
        let catch_up = spec.catch_up.unwrap_or_default();
        let priority = spec.priority.unwrap_or(dq_core::DEFAULT_PRIORITY);
        // The body of every job it fires, checked as an enqueue checks it.
        template(body.clone(), priority).check_body(limits)?;
        let spec = wire::ScheduleSpec {
            timezone: Some(tz_name),
            catch_up: Some(catch_up),
            ..spec
        };
        Ok(Self {
            name: name.to_string(),
            spec,
            topic,
            rule,
            tz,
            start_ms,
            end_ms,
            catch_up,
            body,
            priority,
        })
    }

    /// Reads a schedule back from its stored settings.
    ///
    /// # Errors
    /// When the record is not a valid schedule (written by a newer dq?).
    pub fn from_record(name: &str, value: &str, limits: &Limits) -> Result<Self, InvalidInput> {
        let spec: wire::ScheduleSpec = serde_json::from_str(value)
            .map_err(|e| bad("invalid_schedule", format!("stored schedule {name:?}: {e}")))?;
        Self::new(name, spec, limits)
    }

    /// The settings as stored.
    pub fn to_record(&self) -> String {
        serde_json::to_string(&self.spec).expect("a schedule serializes")
    }

    /// Whether it fires nothing now.
    pub fn paused(&self) -> bool {
        self.spec.paused
    }

    /// The same schedule, paused or not.
    pub fn with_paused(&self, paused: bool) -> Self {
        let mut s = self.clone();
        s.spec.paused = paused;
        s
    }

    /// Refuses a cron rule that never fires (`0 0 30 2 *`: 30 February):
    /// looking for its slots would search centuries at every pass.
    ///
    /// # Errors
    /// `invalid_cron`.
    pub fn check_fires(&self, now: u64) -> Result<(), InvalidInput> {
        if let Rule::Cron(c) = &self.rule
            && self.cron_after(c, now).is_none()
        {
            return Err(bad(
                "invalid_cron",
                format!(
                    "cron expression {:?} never fires",
                    self.spec.cron.as_deref().unwrap_or_default()
                ),
            ));
        }
        Ok(())
    }

    /// What `catch_up` says.
    pub fn catch_up(&self) -> CatchUp {
        self.catch_up
    }

    /// The id of the job of `slot`.
    pub fn job_id(&self, slot_ms: u64) -> JobId {
        JobId::new(format!("{}@{slot_ms}", self.name)).expect("a checked name makes a valid id")
    }

    /// The job of `slot`, due then (a slot in the past is due now).
    pub fn job(&self, slot_ms: u64) -> NewJob {
        NewJob {
            id: Some(self.job_id(slot_ms)),
            when: When::DueAtMs(slot_ms),
            ..template(self.body.clone(), self.priority)
        }
    }

    /// The rule in words.
    pub fn describe(&self) -> String {
        match &self.rule {
            Rule::Cron(c) => {
                let tz = self.spec.timezone.as_deref().unwrap_or("UTC");
                format!("{} ({tz})", c.describe().trim_end_matches('.'))
            }
            Rule::Every(ms) => format!(
                "every {}",
                humantime::format_duration(Duration::from_millis(*ms))
            ),
        }
    }

    /// A slot as replies show it, in the schedule's time zone.
    pub fn slot(&self, ms: u64) -> wire::Slot {
        let at = Utc
            .timestamp_millis_opt(ms as i64)
            .single()
            .map(|t| {
                t.with_timezone(&self.tz)
                    .to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
            })
            .unwrap_or_default();
        wire::Slot { at, at_ms: ms }
    }

    /// The first slot after `t` (Unix ms), within start_at..=end_at.
    pub fn next_after(&self, t: u64) -> Option<u64> {
        let t = match self.start_ms {
            Some(s) if s > 0 && t < s => s - 1,
            _ => t,
        };
        let s = match &self.rule {
            Rule::Every(every) => {
                let anchor = self.start_ms.unwrap_or(0);
                if t < anchor {
                    anchor
                } else {
                    anchor + ((t - anchor) / every + 1) * every
                }
            }
            Rule::Cron(c) => self.cron_after(c, t)?,
        };
        self.end_ms.is_none_or(|e| s <= e).then_some(s)
    }

    /// The last slot before `t` (Unix ms), within start_at..=end_at.
    pub fn prev_before(&self, t: u64) -> Option<u64> {
        let t = match self.end_ms {
            Some(e) if t > e => e + 1,
            _ => t,
        };
        let s = match &self.rule {
            Rule::Every(every) => {
                let anchor = self.start_ms.unwrap_or(0);
                if t <= anchor {
                    return None;
                }
                anchor + (t - anchor - 1) / every * every
            }
            Rule::Cron(c) => self.cron_before(c, t)?,
        };
        self.start_ms.is_none_or(|st| s >= st).then_some(s)
    }

    /// Up to `n` slots after `t`.
    pub fn next_n(&self, t: u64, n: usize) -> Vec<u64> {
        self.forward(t).take(n).collect()
    }

    /// The slots after `t`, in order.
    fn forward(&self, t: u64) -> impl Iterator<Item = u64> + '_ {
        std::iter::successors(self.next_after(t), |s| self.next_after(*s))
    }

    /// The slots before `t`, latest first.
    fn backward(&self, t: u64) -> impl Iterator<Item = u64> + '_ {
        std::iter::successors(self.prev_before(t), |s| self.prev_before(*s))
    }

    /// The wall-clock time of instant `ms` in the schedule's zone.
    fn local(&self, ms: u64) -> Option<NaiveDateTime> {
        Utc.timestamp_millis_opt(ms as i64)
            .single()
            .map(|t| t.with_timezone(&self.tz).naive_local())
    }

    /// The instant a wall-clock slot fires at: the time itself; in a gap
    /// (spring forward) the first valid moment after it; in a fold (fall
    /// back) its first occurrence.
    fn instant(&self, local: NaiveDateTime) -> Option<u64> {
        // The first occurrence of a wall-clock time; None in a gap.
        let first = |l: &NaiveDateTime| {
            self.tz
                .from_local_datetime(l)
                .earliest()
                .and_then(|t| u64::try_from(t.timestamp_millis()).ok())
        };
        first(&local).or_else(|| {
            // Gaps are whole minutes (an hour, or 30 min) and end on a
            // minute: the first minute after that exists ends it.
            let start = local
                .with_second(0)
                .and_then(|t| t.with_nanosecond(0))
                .unwrap_or(local);
            (1..=24 * 60).find_map(|m| first(&(start + chrono::TimeDelta::minutes(m))))
        })
    }

    fn cron_after(&self, c: &Cron, t: u64) -> Option<u64> {
        // Whole seconds: the wall-clock second holding t, then later ones.
        let mut local = self.local(t - t % 1000)?;
        // A fold shows a wall-clock hour twice; its slots fire at their
        // first occurrence only, so one seen before t is passed over.
        for _ in 0..CRON_STEPS {
            let next = c.find_next_occurrence(&local, false).ok()?;
            let at = self.instant(next)?;
            if at > t {
                return Some(at);
            }
            local = next;
        }
        None
    }

    fn cron_before(&self, c: &Cron, t: u64) -> Option<u64> {
        // The second after the one holding t - 1: slots strictly before t.
        let t1 = t.checked_sub(1)?;
        let ceil = t1 - t1 % 1000 + 1000;
        let mut local = self.local(ceil)?;
        // In the second pass of a repeated hour, slots of the first pass
        // with a later wall-clock time are earlier instants: start from the
        // end of the fold.
        if let LocalResult::Ambiguous(first, second) = self.tz.from_local_datetime(&local) {
            local += second.naive_utc() - first.naive_utc();
        }
        for _ in 0..CRON_STEPS {
            let prev = c.find_previous_occurrence(&local, false).ok()?;
            let at = self.instant(prev)?;
            if at < t {
                return Some(at);
            }
            local = prev;
        }
        None
    }

    /// The slots to enqueue in a pass at `now` whose mark is `mark`, and
    /// the mark after it: every slot in (mark, now + lead]; of those before
    /// now (missed), what `catch_up` says.
    pub fn due(&self, mark: u64, now: u64, lead_ms: u64) -> (Vec<u64>, u64) {
        let horizon = now + lead_ms;
        if mark >= horizon {
            return (Vec::new(), mark);
        }
        let mut slots = Vec::new();
        // Missed: before `late`; from there on, fired as they are.
        let late = now.saturating_sub(MISSED_AFTER_MS);
        match self.catch_up {
            CatchUp::Skip => {}
            CatchUp::One => {
                if let Some(s) = self.prev_before(late).filter(|s| *s > mark) {
                    slots.push(s);
                }
            }
            CatchUp::All => {
                slots.extend(
                    self.backward(late)
                        .take_while(|s| *s > mark)
                        .take(MAX_CATCH_UP),
                );
                slots.reverse();
            }
        }
        slots.extend(
            self.forward(mark.max(late.saturating_sub(1)))
                .take_while(|s| *s <= horizon),
        );
        (slots, horizon)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> u64 {
        parse_time("t", "t", s).unwrap()
    }

    fn sched(f: impl FnOnce(&mut wire::ScheduleSpec)) -> Schedule {
        let mut spec = wire::ScheduleSpec {
            topic: "t".into(),
            ..Default::default()
        };
        f(&mut spec);
        Schedule::new("s", spec, &Limits::default()).unwrap()
    }

    fn cron(expr: &str, tz: &str) -> Schedule {
        sched(|s| {
            s.cron = Some(expr.into());
            s.timezone = Some(tz.into());
        })
    }

    fn err(f: impl FnOnce(&mut wire::ScheduleSpec)) -> InvalidInput {
        let mut spec = wire::ScheduleSpec {
            topic: "t".into(),
            cron: Some("* * * * *".into()),
            ..Default::default()
        };
        f(&mut spec);
        Schedule::new("s", spec, &Limits::default()).unwrap_err()
    }

    fn shown(s: &Schedule, slots: &[u64]) -> Vec<String> {
        slots.iter().map(|ms| s.slot(*ms).at).collect()
    }

    #[test]
    fn cron_slots_in_a_time_zone() {
        let s = cron("0 9 * * MON-FRI", "Europe/Berlin");
        // Friday 2026-12-04 10:00 Berlin: next are Mon..Fri 09:00 +01:00.
        let got = s.next_n(at("2026-12-04T09:00:00Z"), 5);
        assert_eq!(
            shown(&s, &got),
            [
                "2026-12-07T09:00:00+01:00",
                "2026-12-08T09:00:00+01:00",
                "2026-12-09T09:00:00+01:00",
                "2026-12-10T09:00:00+01:00",
                "2026-12-11T09:00:00+01:00",
            ]
        );
        assert_eq!(got[0], at("2026-12-07T08:00:00Z"));
        // Exactly at a slot: the next one is later; the previous one is
        // strictly before.
        assert_eq!(s.next_after(got[0]), Some(got[1]));
        assert_eq!(s.prev_before(got[1]), Some(got[0]));
        assert_eq!(s.prev_before(got[1] + 1), Some(got[1]));
        // Six fields, seconds first.
        let s = cron("*/20 * * * * *", "UTC");
        assert_eq!(
            s.next_n(at("2026-12-01T00:00:00.500Z"), 3),
            [
                at("2026-12-01T00:00:20Z"),
                at("2026-12-01T00:00:40Z"),
                at("2026-12-01T00:01:00Z")
            ]
        );
    }

    #[test]
    fn spring_forward_fires_once_at_the_next_valid_time() {
        // Europe/Berlin, 2026-03-29: 02:00 CET jumps to 03:00 CEST.
        let s = cron("30 2 * * *", "Europe/Berlin");
        let got = s.next_n(at("2026-03-28T12:00:00Z"), 3);
        assert_eq!(
            shown(&s, &got),
            [
                "2026-03-29T03:00:00+02:00",
                "2026-03-30T02:30:00+02:00",
                "2026-03-31T02:30:00+02:00"
            ]
        );
        // Every 15 minutes: 02:00-02:45 do not exist and fire once at 03:00.
        let s = cron("*/15 * * * *", "Europe/Berlin");
        let got = s.next_n(at("2026-03-29T00:40:00Z"), 4);
        assert_eq!(
            shown(&s, &got),
            [
                "2026-03-29T01:45:00+01:00",
                "2026-03-29T03:00:00+02:00",
                "2026-03-29T03:15:00+02:00",
                "2026-03-29T03:30:00+02:00"
            ]
        );
        // America/New_York, 2026-03-08: 02:00 EST jumps to 03:00 EDT.
        let s = cron("30 2 * * *", "America/New_York");
        let got = s.next_n(at("2026-03-07T12:00:00Z"), 2);
        assert_eq!(
            shown(&s, &got),
            ["2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"]
        );
        // Backwards across the gap, the same slots.
        let s = cron("30 2 * * *", "Europe/Berlin");
        assert_eq!(
            s.prev_before(at("2026-03-29T12:00:00Z")),
            Some(at("2026-03-29T01:00:00Z"))
        );
    }

    #[test]
    fn fall_back_fires_once() {
        // Europe/Berlin, 2026-10-25: 03:00 CEST falls back to 02:00 CET;
        // 02:30 happens twice and fires at its first occurrence only.
        let s = cron("30 2 * * *", "Europe/Berlin");
        let got = s.next_n(at("2026-10-24T12:00:00Z"), 2);
        assert_eq!(
            shown(&s, &got),
            ["2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"]
        );
        // From within the second 02:xx hour, the next is the next day.
        assert_eq!(s.next_after(at("2026-10-25T01:10:00Z")), Some(got[1]));
        // Hourly: one slot per wall-clock hour, the repeated hour once.
        let s = cron("0 * * * *", "America/New_York");
        // 2026-11-01: 02:00 EDT falls back to 01:00 EST.
        let got = s.next_n(at("2026-11-01T04:30:00Z"), 3);
        assert_eq!(
            shown(&s, &got),
            [
                "2026-11-01T01:00:00-04:00",
                "2026-11-01T02:00:00-05:00",
                "2026-11-01T03:00:00-05:00"
            ]
        );
        assert_eq!(s.prev_before(got[1]), Some(got[0]));
        // Within the second pass of the repeated hour, the last slot before
        // is the first pass's latest one (01:45 EDT), not 01:00 EDT.
        let s = cron("*/15 * * * *", "America/New_York");
        assert_eq!(
            s.prev_before(at("2026-11-01T06:10:00Z")),
            Some(at("2026-11-01T05:45:00Z"))
        );
        let (slots, _) = s.due(at("2026-11-01T05:37:00Z"), at("2026-11-01T06:10:00Z"), 0);
        assert_eq!(slots, [at("2026-11-01T05:45:00Z")], "catch-up one finds it");
        assert_eq!(s.prev_before(0), None);
    }

    #[test]
    fn every_counts_from_start_or_epoch() {
        let s = sched(|s| s.every = Some("90s".into()));
        assert_eq!(s.next_after(0), Some(90_000));
        assert_eq!(s.next_after(90_000), Some(180_000));
        assert_eq!(s.prev_before(180_000), Some(90_000));
        assert_eq!(s.prev_before(180_001), Some(180_000));
        let start = at("2026-12-01T10:00:07Z");
        let s = sched(|s| {
            s.every = Some("1h".into());
            s.start_at = Some("2026-12-01T10:00:07Z".into());
            s.end_at = Some("2026-12-01T12:00:07Z".into());
        });
        assert_eq!(
            s.next_n(0, 5),
            [start, start + 3_600_000, start + 7_200_000]
        );
        assert_eq!(s.prev_before(start), None);
        assert_eq!(s.prev_before(u64::MAX / 2), Some(start + 7_200_000));
        assert_eq!(s.describe(), "every 1h");
    }

    #[test]
    fn catch_up_modes() {
        let every = |c: CatchUp| {
            sched(|s| {
                s.every = Some("1s".into());
                s.catch_up = Some(c);
            })
        };
        let t0 = 1_000_000;
        // Down from t0 (mark t0) to t0 + 5.6 s, lead 2 s: slot 5 is more
        // than MISSED_AFTER_MS late.
        let now = t0 + 5_600;
        let upcoming = vec![t0 + 6_000, t0 + 7_000];
        let (s, m) = every(CatchUp::Skip).due(t0, now, 2_000);
        assert_eq!((s, m), (upcoming.clone(), now + 2_000));
        let (s, _) = every(CatchUp::One).due(t0, now, 2_000);
        assert_eq!(s, [vec![t0 + 5_000], upcoming.clone()].concat());
        let (s, _) = every(CatchUp::All).due(t0, now, 2_000);
        assert_eq!(
            s,
            [
                vec![t0 + 1_000, t0 + 2_000, t0 + 3_000, t0 + 4_000, t0 + 5_000],
                upcoming
            ]
            .concat()
        );
        // Bounded: the latest MAX_CATCH_UP.
        let (s, _) = every(CatchUp::All).due(t0, t0 + 10_000_000, 0);
        assert_eq!(s.len(), MAX_CATCH_UP + 1);
        assert_eq!(s[0], t0 + 10_000_000 - MAX_CATCH_UP as u64 * 1000);
        // A mark at or past the horizon: nothing.
        assert_eq!(
            every(CatchUp::All).due(now + 2_000, now, 2_000),
            (vec![], now + 2_000)
        );
    }

    #[test]
    fn bad_input_is_named() {
        let e = err(|s| s.cron = Some("61 * * * *".into()));
        assert_eq!(e.code, "invalid_cron");
        assert!(e.message.contains("field 1 (minute)"), "{}", e.message);
        let e = err(|s| s.cron = Some("0 0 9 * * FUNDAY".into()));
        assert!(e.message.contains("field 6 (day-of-week)"), "{}", e.message);
        let e = err(|s| s.cron = Some("* * *".into()));
        assert!(e.message.contains("got 3"), "{}", e.message);
        assert_eq!(
            err(|s| s.timezone = Some("Mars/Olympus".into())).code,
            "invalid_timezone"
        );
        assert_eq!(
            err(|s| s.every = Some("1s".into())).code,
            "invalid_schedule"
        );
        assert_eq!(
            err(|s| {
                s.cron = None;
            })
            .code,
            "invalid_schedule"
        );
        let every = |v: &str| {
            err(|s| {
                s.cron = None;
                s.every = Some(v.into());
            })
        };
        assert_eq!(every("999ms").code, "invalid_every");
        assert_eq!(every("3661d").code, "invalid_every");
        assert_eq!(every("584942417355y").code, "invalid_every");
        assert_eq!(every("soon").code, "invalid_every");
        // Ends before it starts: taken, without a slot.
        let ended = sched(|s| {
            s.every = Some("1h".into());
            s.start_at = Some("2026-12-02T00:00:00Z".into());
            s.end_at = Some("2026-12-01T00:00:00Z".into());
        });
        assert!(ended.next_n(0, 3).is_empty());
        assert!(ended.prev_before(u64::MAX / 2).is_none());
        // Before 1970: the epoch.
        let old = sched(|s| {
            s.every = Some("1h".into());
            s.start_at = Some("1340-08-23T05:52:20Z".into());
        });
        assert_eq!(old.next_after(0), Some(3_600_000));
        assert_eq!(
            err(|s| s.start_at = Some("tomorrow".into())).code,
            "invalid_start_at"
        );
        assert_eq!(err(|s| s.topic = "a b".into()).code, "invalid_topic");
        for name in ["", "a b", "x\n", &"n".repeat(201)] {
            let r = Schedule::new(
                name,
                wire::ScheduleSpec {
                    topic: "t".into(),
                    every: Some("1m".into()),
                    ..Default::default()
                },
                &Limits::default(),
            );
            assert_eq!(r.unwrap_err().code, "invalid_schedule_name", "{name:?}");
        }
    }
}
