//! Schedules: put (from the API and the config file), read, pause, resume
//! and delete; and what a pass of the scheduler does to the store (its
//! slots fired as jobs, its progress mark raised). The rules themselves
//! are [`crate::schedule`]'s.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use dq_core::{InvalidInput, NewJob};

use super::{Error, Result, Service};
use crate::schedule::{KIND, LEAD_MS, Schedule};

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pass {
    /// Jobs created (a slot another instance had enqueued already is not
    /// counted).
    pub created: u64,
    /// Schedules that could not be read or fired (logged).
    pub failed: u64,
}

/// What passes remember: each schedule parsed once per stored text, and
/// what failed last time, so a failure is logged when it starts and when it
/// ends, not at every pass.
#[derive(Default)]
pub struct PassMemory {
    parsed: HashMap<String, (String, Arc<Schedule>)>,
    failing: HashSet<String>,
    /// Whether the last pass could not list the schedules (the
    /// [`crate::scheduler::Scheduler`] logs when that starts and ends).
    pub list_failing: bool,
}

impl Service {
    /// Creates or replaces a schedule; returns whether it was created and
    /// how it stands. New or changed, its progress starts now: slots before
    /// now are not fired (a replaced schedule's coming slots already
    /// enqueued stay, and one enqueued again under the new rule is the same
    /// job). The same settings as stored change nothing.
    ///
    /// # Errors
    /// Bad settings (see [`Schedule::new`]; a cron rule
    /// that never fires is `invalid_cron`); `too_many_schedules`; a store
    /// error.
    pub async fn put_schedule(
        &self,
        name: &str,
        spec: dq_api::ScheduleSpec,
    ) -> Result<(bool, dq_api::ScheduleInfo)> {
        self.save_schedule(name, spec, false).await
    }

    /// As [`Service::put_schedule`] for the config file at start: a schedule
    /// stored with the same settings but paused (through the API) stays
    /// paused, with its progress.
    ///
    /// # Errors
    /// As [`Service::put_schedule`].
    pub async fn apply_schedule(
        &self,
        name: &str,
        spec: dq_api::ScheduleSpec,
    ) -> Result<(bool, dq_api::ScheduleInfo)> {
        self.save_schedule(name, spec, true).await
    }

    async fn save_schedule(
        &self,
        name: &str,
        spec: dq_api::ScheduleSpec,
        keep_pause: bool,
    ) -> Result<(bool, dq_api::ScheduleInfo)> {
        use crate::schedule::MAX_SCHEDULES;
        let mut sched = Schedule::new(name, spec, &self.limits)?;
        let now = self.now();
        sched.check_fires(now)?;
        let stored = self.store.get_record(KIND, name).await?;
        if let Some(rec) = &stored {
            let old = Schedule::from_record(name, &rec.value, &self.limits).ok();
            if keep_pause
                && let Some(old) = &old
                && old.paused()
                && !sched.paused()
            {
                sched = sched.with_paused(true);
            }
            // The same settings again (a restart applying dq.toml): nothing
            // changes, progress included — slots missed meanwhile are
            // caught up as `catch_up` says.
            if rec.value == sched.to_record() {
                return Ok((false, self.schedule_info(&sched, rec.mark, now).await));
            }
        } else if self.store.list_records(KIND).await?.len() >= MAX_SCHEDULES {
            return Err(InvalidInput::new(
                "too_many_schedules",
                format!("at most {MAX_SCHEDULES} schedules; delete one first"),
            )
            .into());
        }
        let value = sched.to_record();
        if value.len() > dq_core::MAX_RECORD_BYTES {
            return Err(InvalidInput::new(
                "body_too_large",
                format!(
                    "a schedule's settings are at most {} bytes, got {}",
                    dq_core::MAX_RECORD_BYTES,
                    value.len()
                ),
            )
            .into());
        }
        let created = self.store.put_record(KIND, name, &value, now).await?;
        // Its first slots at once, not at the next pass.
        if !sched.paused()
            && let Err(e) = self.fire_schedule(&sched, now, now).await
        {
            tracing::warn!(schedule = %name, error = %e, "schedule saved; its first slots are enqueued at the next pass");
        }
        tracing::info!(
            schedule = %name,
            topic = %sched.topic,
            rule = %sched.describe(),
            paused = sched.paused(),
            created,
            "schedule saved"
        );
        let info = self.schedule_info(&sched, now, now).await;
        Ok((created, info))
    }

    /// Every schedule, by name. One whose stored settings this dq cannot
    /// read is left out (and logged; it can still be deleted).
    ///
    /// # Errors
    /// A store error.
    pub async fn schedules(&self) -> Result<Vec<dq_api::ScheduleInfo>> {
        let now = self.now();
        let mut out = Vec::new();
        for (name, rec) in self.store.list_records(KIND).await? {
            match Schedule::from_record(&name, &rec.value, &self.limits) {
                Ok(s) => out.push(self.schedule_info(&s, rec.mark, now).await),
                Err(e) => {
                    tracing::warn!(schedule = %name, error = %e.message, "stored schedule is not valid")
                }
            }
        }
        Ok(out)
    }

    /// One schedule.
    ///
    /// # Errors
    /// [`Error::ScheduleNotFound`]; a store error.
    pub async fn schedule(&self, name: &str) -> Result<dq_api::ScheduleInfo> {
        let (sched, mark) = self.load_schedule(name).await?;
        Ok(self.schedule_info(&sched, mark, self.now()).await)
    }

    /// Pauses (`true`) or resumes a schedule. A pause stops the slots not
    /// enqueued yet: the jobs already enqueued ahead (due within
    /// [`crate::schedule::LEAD_MS`]) still run. Resuming starts from now
    /// (slots passed while paused are not fired).
    ///
    /// # Errors
    /// [`Error::ScheduleNotFound`]; a store error.
    pub async fn pause_schedule(&self, name: &str, paused: bool) -> Result<dq_api::ScheduleInfo> {
        let (sched, mark) = self.load_schedule(name).await?;
        let now = self.now();
        let sched = sched.with_paused(paused);
        let mark = if paused { mark.max(now) } else { now };
        self.store
            .put_record(KIND, name, &sched.to_record(), mark)
            .await?;
        if !paused && let Err(e) = self.fire_schedule(&sched, mark, now).await {
            tracing::warn!(schedule = %name, error = %e, "schedule resumed; its next slots are enqueued at the next pass");
        }
        tracing::info!(schedule = %name, paused, "schedule {}", if paused { "paused" } else { "resumed" });
        Ok(self.schedule_info(&sched, mark, now).await)
    }

    /// Deletes a schedule (one this dq cannot read too). The jobs already
    /// enqueued ahead for its coming slots (due within
    /// [`crate::schedule::LEAD_MS`]) still run: a schedule put again under
    /// the same name finds them, one job per slot.
    ///
    /// # Errors
    /// [`Error::ScheduleNotFound`]; a store error.
    pub async fn delete_schedule(&self, name: &str) -> Result<()> {
        crate::schedule::check_name(name)?;
        if !self
            .store
            .delete_record(crate::schedule::KIND, name)
            .await?
        {
            return Err(Error::ScheduleNotFound(name.to_string()));
        }
        tracing::info!(schedule = %name, "schedule deleted");
        Ok(())
    }

    async fn load_schedule(&self, name: &str) -> Result<(Schedule, u64)> {
        crate::schedule::check_name(name)?;
        let rec = self
            .store
            .get_record(KIND, name)
            .await?
            .ok_or_else(|| Error::ScheduleNotFound(name.to_string()))?;
        let sched = Schedule::from_record(name, &rec.value, &self.limits)?;
        Ok((sched, rec.mark))
    }

    async fn schedule_info(&self, sched: &Schedule, mark: u64, now: u64) -> dq_api::ScheduleInfo {
        let last = sched.prev_before(mark.min(now) + 1);
        let last_job = match last {
            Some(s) if !sched.paused() => {
                let id = sched.job_id(s);
                let state = self
                    .store
                    .get(&sched.topic, &id)
                    .await
                    .ok()
                    .flatten()
                    .map(|j| j.state);
                Some(dq_api::LastJob {
                    id: id.to_string(),
                    state,
                })
            }
            _ => None,
        };
        let next = if sched.paused() {
            Vec::new()
        } else {
            sched
                .next_n(now, crate::schedule::NEXT_SHOWN)
                .into_iter()
                .map(|s| sched.slot(s))
                .collect()
        };
        dq_api::ScheduleInfo {
            name: sched.name.clone(),
            spec: sched.spec.clone(),
            rule: sched.describe(),
            last: last.map(|s| sched.slot(s)),
            last_job,
            next,
        }
    }

    /// One pass of the scheduler: enqueues what every schedule owes. `now`
    /// is read for each schedule, so a slow one does not make the next
    /// ones' slots look missed.
    ///
    /// # Errors
    /// When the schedules cannot be listed.
    pub async fn schedules_pass(
        &self,
        now: &(dyn Fn() -> u64 + Sync),
        mem: &mut PassMemory,
    ) -> Result<Pass> {
        let records = self.store.list_records(KIND).await?;
        let names: HashSet<&str> = records.iter().map(|(n, _)| n.as_str()).collect();
        mem.parsed.retain(|name, _| names.contains(name.as_str()));
        mem.failing.retain(|name| names.contains(name.as_str()));
        let mut out = Pass::default();
        for (name, rec) in records {
            let sched = match mem.parsed.get(&name) {
                Some((v, s)) if *v == rec.value => Some(s.clone()),
                _ => match Schedule::from_record(&name, &rec.value, &self.limits) {
                    Ok(s) => {
                        let s = Arc::new(s);
                        mem.parsed
                            .insert(name.clone(), (rec.value.clone(), s.clone()));
                        Some(s)
                    }
                    Err(e) => {
                        if mem.failing.insert(name.clone()) {
                            tracing::warn!(schedule = %name, error = %e.message, "stored schedule is not valid; skipped");
                        }
                        None
                    }
                },
            };
            let Some(sched) = sched else {
                out.failed += 1;
                continue;
            };
            if sched.paused() {
                continue;
            }
            match self.fire_schedule(&sched, rec.mark, now()).await {
                Ok(n) => {
                    out.created += n;
                    if mem.failing.remove(&name) {
                        tracing::info!(schedule = %name, "schedule fires again");
                    }
                }
                Err(e) => {
                    out.failed += 1;
                    if mem.failing.insert(name.clone()) {
                        tracing::warn!(schedule = %name, error = %e, "schedule not fired; trying again at each pass");
                    }
                }
            }
        }
        Ok(out)
    }

    /// Enqueues what `sched` owes at `now`, then raises its mark. A failure
    /// leaves the mark: the next pass enqueues the same ids again.
    async fn fire_schedule(&self, sched: &Schedule, mark: u64, now: u64) -> Result<u64> {
        let (slots, new_mark) = sched.due(mark, now, LEAD_MS);
        // Nothing due: the mark may stay (no slot lies between it and the
        // horizon), which saves a store call per idle schedule and pass.
        if new_mark <= mark || slots.is_empty() {
            return Ok(0);
        }
        let missed = slots.iter().filter(|s| **s < now).count();
        let mut created = 0;
        for chunk in slots.chunks(dq_core::limits::MAX_BATCH) {
            let jobs: Vec<NewJob> = chunk.iter().map(|s| sched.job(*s)).collect();
            let done = self.write_jobs(&sched.topic, jobs).await?;
            created += done.iter().filter(|e| e.created).count() as u64;
        }
        if missed > 0 {
            tracing::info!(
                schedule = %sched.name,
                catch_up = sched.catch_up().as_str(),
                missed_fired = missed,
                "schedule caught up with slots missed while no instance ran"
            );
        }
        self.store.raise_mark(KIND, &sched.name, new_mark).await?;
        if created > 0 {
            tracing::debug!(schedule = %sched.name, topic = %sched.topic, created, "schedule fired");
        }
        Ok(created)
    }
}
