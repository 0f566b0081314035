//! Recurring schedules: a job enqueued on a topic at every slot of a cron
//! expression or a fixed interval (docs/schedules.md).
//!
//! Each firing is an ordinary job with id `<name>@<slot ms>` and due time
//! the slot, enqueued [`LEAD_MS`] ahead of it, so it comes out at the slot
//! exactly like any delayed job — never early — with the topic's retries,
//! dead letters, push delivery and metrics. A schedule lives in the store
//! as a named record (`Store::put_record`, kind [`KIND`]): its settings as
//! JSON, and its mark — every slot up to the mark is dealt with. Every dq
//! instance runs [`crate::scheduler::Scheduler`]; each pass enqueues the slots in
//! (mark, now + lead] and then raises the mark. Two instances doing the
//! same slot at once enqueue the same id: the second finds the job waiting
//! (`created: false`), or, if it already ran, inside the job's dedup window
//! ([`FIRING_DEDUP_MS`]): one job per slot, whatever the number of
//! instances, restarts or retries.
//!
//! Slots of a cron rule are wall-clock times in the schedule's time zone.
//! A wall-clock time that does not exist (spring forward) fires once, at
//! the first valid moment after the gap; one that exists twice (fall back)
//! fires once, at its first occurrence.
//!
//! After downtime — a slot before now whose job was never enqueued —
//! `catch_up` decides: `skip` (nothing), `one` (one job, named after the
//! latest missed slot, due now), `all` (every missed slot, the latest
//! [`MAX_CATCH_UP`] at most, due now).
//!
//! Files: `rule.rs` (the rule: settings, cron and interval maths, time
//! zones; pure, and knowing nothing of the service). Storing a schedule and
//! firing its slots are the service's (`service/schedules.rs`); the loop
//! that asks for a pass every [`TICK`] is [`crate::scheduler`].

mod rule;

pub use rule::*;
