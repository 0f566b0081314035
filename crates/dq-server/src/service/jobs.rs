//! Jobs: enqueue (one and batches), get, cancel, reschedule, the listings
//! of waiting jobs, and import.

use dq_core::limits::MAX_BATCH;
use dq_core::{Enqueued, InvalidInput, JobId, JobInfo, JobState, NewJob, StoreError, Topic};

use super::{JobView, Result, Service, Writer, view};

/// `invalid_batch` for an empty or oversized batch.
fn check_len(jobs: &[NewJob]) -> Result<()> {
    if jobs.is_empty() || jobs.len() > MAX_BATCH {
        return Err(InvalidInput::new(
            "invalid_batch",
            format!("a batch holds 1 to {MAX_BATCH} jobs, got {}", jobs.len()),
        )
        .into());
    }
    Ok(())
}

/// The deepest a listing in due or hand-out order goes: each page costs
/// the store about its offset in index entries (on Redis, inside one
/// script), so the pages stop here; `GET /v1/topics/{topic}/jobs` lists
/// every job.
pub(crate) const MAX_WAITING_OFFSET: usize = 10_000;

fn check_offset(offset: usize) -> Result<()> {
    if offset > MAX_WAITING_OFFSET {
        return Err(InvalidInput::new(
            "invalid_offset",
            format!(
                "listings in due order go {MAX_WAITING_OFFSET} jobs deep; list every job with GET /v1/topics/{{topic}}/jobs (dq export)"
            ),
        )
        .into());
    }
    Ok(())
}

impl Service {
    /// Enqueues one job.
    ///
    /// # Errors
    /// The first rule of [`NewJob::check`] it breaks; a store error; nothing
    /// was written.
    /// Single enqueues into one topic that arrive while another's store
    /// call is in flight share the next call (see `combine`); each gets its
    /// own outcome.
    pub async fn enqueue(&self, t: &Topic, mut job: NewJob) -> Result<Enqueued> {
        job.check(&self.limits, self.now())?;
        self.spans().enqueue(t, &mut job);
        self.enqueues.enqueue(&self.writer(), t, job).await
    }

    /// Enqueues up to [`MAX_BATCH`] jobs in one store call; a result per job,
    /// in order. Waiters are woken when any job was created or replaced.
    /// Each job is checked first ([`NewJob::check`]): every front-end gets
    /// the same answer for the same mistake.
    ///
    /// # Errors
    /// `invalid_batch` for an empty or oversized batch; the first rule a
    /// job breaks; a store error (nothing written).
    pub async fn enqueue_batch(&self, t: &Topic, mut jobs: Vec<NewJob>) -> Result<Vec<Enqueued>> {
        check_len(&jobs)?;
        let now = self.now();
        for job in &jobs {
            job.check(&self.limits, now)?;
        }
        for job in &mut jobs {
            self.spans().enqueue(t, job);
        }
        self.write_jobs(t, jobs).await
    }

    /// [`Service::enqueue_batch`] without the checks of each job: for a
    /// schedule's firings, whose settings were checked when it was put
    /// (their jobs are due [`crate::schedule::LEAD_MS`] ahead of their
    /// slot, which a `max_delay` shorter than that would refuse).
    pub(super) async fn write_jobs(&self, t: &Topic, jobs: Vec<NewJob>) -> Result<Vec<Enqueued>> {
        check_len(&jobs)?;
        self.writer().write(t, &jobs).await
    }

    /// One job with the limits in effect for it.
    ///
    /// # Errors
    /// [`StoreError::NotFound`]; a store error.
    pub async fn get(&self, t: &Topic, id: &JobId) -> Result<JobView> {
        let job = self.store.get(t, id).await?.ok_or(StoreError::NotFound)?;
        Ok(view(t, job))
    }

    /// Removes a job in any state; returns the state it was in.
    ///
    /// # Errors
    /// [`StoreError::NotFound`]; a store error.
    pub async fn cancel(&self, t: &Topic, id: &JobId) -> Result<JobState> {
        let was = self
            .store
            .cancel(t, id, self.now())
            .await?
            .ok_or(StoreError::NotFound)?;
        tracing::info!(topic = %t, id = %id, state = %was, "job cancelled");
        Ok(was)
    }

    /// Moves a waiting job to `due_at_ms`.
    ///
    /// # Errors
    /// `invalid_due_at` beyond the largest delay; [`StoreError::NotFound`],
    /// [`StoreError::NotInState`] when reserved or dead.
    pub async fn reschedule(&self, t: &Topic, id: &JobId, due_at_ms: u64) -> Result<()> {
        let now = self.now();
        self.limits.check_due_at(due_at_ms, now)?;
        let done = self.store.reschedule(t, id, due_at_ms, false, now).await;
        self.changed(t);
        done?;
        tracing::info!(topic = %t, id = %id, due_at_ms, "job rescheduled");
        Ok(())
    }

    /// Makes a scheduled job due now and counts it in the job's `kicks`
    /// (beanstalkd's `kick` of a delayed job).
    ///
    /// # Errors
    /// [`StoreError::NotFound`], [`StoreError::NotInState`] when reserved or dead.
    pub async fn kick(&self, t: &Topic, id: &JobId) -> Result<()> {
        let now = self.now();
        // Due at a time already past: the store makes it due at its own
        // now (this instance's clock may run a little ahead of Redis's,
        // which would leave the job delayed for that long).
        let done = self.store.reschedule(t, id, 0, true, now).await;
        self.changed(t);
        done?;
        tracing::debug!(topic = %t, id = %id, "job kicked");
        Ok(())
    }

    /// Up to `limit` (≤ 1000) scheduled jobs after the first `offset`,
    /// earliest due first ([`Store::list_scheduled`](dq_core::Store::list_scheduled)).
    ///
    /// # Errors
    /// `invalid_offset` beyond [`MAX_WAITING_OFFSET`]; a store error.
    pub async fn list_scheduled(
        &self,
        t: &Topic,
        offset: usize,
        limit: usize,
    ) -> Result<Vec<JobInfo>> {
        check_offset(offset)?;
        Ok(self
            .store
            .list_scheduled(t, offset, limit.min(1000))
            .await?)
    }

    /// Up to `limit` (≤ 1000) ready jobs after the first `offset`, in
    /// hand-out order.
    ///
    /// # Errors
    /// As [`Service::list_scheduled`].
    pub async fn list_ready(&self, t: &Topic, offset: usize, limit: usize) -> Result<Vec<JobInfo>> {
        check_offset(offset)?;
        Ok(self.store.list_ready(t, offset, limit.min(1000)).await?)
    }

    /// One page of a topic's jobs (or those in `state`) for an export; see
    /// [`Store::list_jobs`](dq_core::Store::list_jobs) for the cursor and what happens to jobs that
    /// change meanwhile.
    ///
    /// # Errors
    /// `invalid_limit` outside 1–[`MAX_BATCH`]; `invalid_cursor`;
    /// [`Error::TopicNotFound`](super::Error::TopicNotFound); a store error.
    pub async fn list_jobs(
        &self,
        t: &Topic,
        state: Option<JobState>,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<dq_core::JobPage> {
        if !(1..=MAX_BATCH).contains(&limit) {
            return Err(InvalidInput::new(
                "invalid_limit",
                format!("limit must be between 1 and {MAX_BATCH}, got {limit}"),
            )
            .into());
        }
        self.known_topic(t).await?;
        Ok(self.store.list_jobs(t, state, cursor, limit).await?)
    }

    /// Writes up to [`MAX_BATCH`] jobs as another store had them (an
    /// import): idempotent by id, due times, attempts and dead letters
    /// kept; a result per job, in order. Every job is checked first: one
    /// bad job refuses the whole batch, nothing written.
    ///
    /// # Errors
    /// `invalid_batch` for an empty or oversized batch; the first bad job's
    /// error ([`dq_core::ImportJob::check`]), its index in the message; a
    /// store error.
    pub async fn import_jobs(
        &self,
        t: &Topic,
        jobs: Vec<dq_core::ImportJob>,
    ) -> Result<Vec<dq_core::Imported>> {
        if jobs.is_empty() || jobs.len() > MAX_BATCH {
            return Err(InvalidInput::new(
                "invalid_batch",
                format!("a batch holds 1 to {MAX_BATCH} jobs, got {}", jobs.len()),
            )
            .into());
        }
        let now = self.now();
        for (i, j) in jobs.iter().enumerate() {
            j.check(&self.limits, now).map_err(|e| InvalidInput {
                message: format!("jobs[{i}]: {}", e.message),
                ..e
            })?;
        }
        let out = self.store.import_jobs(t, &jobs, now).await;
        self.changed(t);
        let out = out?;
        let created = out.iter().filter(|i| i.created).count();
        tracing::info!(topic = %t, jobs = out.len(), created, "jobs imported");
        Ok(out)
    }
}

impl Writer {
    /// One store call writing `jobs` (checked) into `t`; the waiters here
    /// stop skipping `t` at once, whether the call succeeded or not (a
    /// failed call may have written).
    pub(super) async fn write(&self, t: &Topic, jobs: &[NewJob]) -> Result<Vec<Enqueued>> {
        let out = self.store.enqueue(t, jobs, self.clock.now_ms()).await;
        self.wakers.changed(t.as_str());
        let out = out?;
        let changed = out.iter().filter(|e| e.created || e.replaced).count();
        tracing::debug!(topic = %t, jobs = out.len(), changed, "jobs enqueued");
        Ok(out)
    }
}
