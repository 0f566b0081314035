//! Import: jobs written as they were in another store ([`ImportJob`]).

use super::{Body, JobId, JobKey, JobState};
use crate::limits::InvalidInput;
use crate::retry::RetryPolicy;

/// A job to write as it was elsewhere ([`crate::Store::import_jobs`]): its
/// due time, attempts and dead letter kept, unlike an enqueue.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportJob {
    /// Its id.
    pub id: JobId,
    /// [`JobState::Dead`] for a dead letter; else (scheduled or ready) the
    /// job waits: ready when `due_at_ms` has passed, scheduled until then.
    /// Never [`JobState::Reserved`] (see [`ImportJob::check`]).
    pub state: JobState,
    /// When it is (or was) due.
    pub due_at_ms: u64,
    /// Its priority.
    pub priority: u32,
    /// Hand-outs so far.
    pub attempts: u32,
    /// Its own `max_attempts` override.
    pub max_attempts: Option<u32>,
    /// Its own lease override.
    pub lease_ms: Option<u64>,
    /// Its own retry policy.
    pub retry: Option<RetryPolicy>,
    /// Its dedup window.
    pub dedup_ms: Option<u64>,
    /// The payload.
    pub body: Body,
    /// The last failure's text.
    pub last_error: Option<String>,
    /// Its kept failed attempts, oldest first (at most
    /// [`crate::ERRORS_KEPT`]).
    pub errors: Vec<crate::AttemptError>,
    /// When it was first enqueued.
    pub created_at_ms: u64,
    /// When it died (dead letters; required for them).
    pub died_at_ms: Option<u64>,
    /// Its flow-control key.
    pub key: Option<JobKey>,
    /// The trace context it was enqueued with.
    pub trace: Option<crate::TraceContext>,
}

impl ImportJob {
    /// Checks the fields a store relies on.
    ///
    /// # Errors
    /// `invalid_state` for a reserved job (a lease belongs to a consumer of
    /// the store it was taken from: export it as ready at its deadline),
    /// `invalid_died_at` for a dead job without `died_at_ms` or a waiting
    /// one with it, the body, lease, attempts and dedup checks of an
    /// enqueue, `invalid_due_at` for a job due further ahead than an
    /// enqueue may ask ([`crate::Limits::latest_due`]), `invalid_time` for a time past
    /// 2^53 ms (no store keeps it exactly), `invalid_attempts` over
    /// [`crate::limits::MAX_ATTEMPTS`], `invalid_error` for a `last_error`
    /// over [`crate::limits::MAX_ERROR_BYTES`].
    pub fn check(&self, limits: &crate::Limits, now_ms: u64) -> Result<(), InvalidInput> {
        use crate::limits;
        /// The largest integer a double (a Lua number) holds exactly.
        const MAX_TIME_MS: u64 = (1 << 53) - 1;
        for (name, t) in [
            ("due_at_ms", Some(self.due_at_ms)),
            ("created_at_ms", Some(self.created_at_ms)),
            ("died_at_ms", self.died_at_ms),
        ] {
            if t.is_some_and(|t| t > MAX_TIME_MS) {
                return Err(InvalidInput::new(
                    "invalid_time",
                    format!("job {}: {name} must be at most {MAX_TIME_MS}", self.id),
                ));
            }
        }
        // An error's time as a Lua number prints exactly to 14 digits
        // (Redis keeps the errors as JSON it re-encodes): beyond year 5000.
        const MAX_ERROR_AT_MS: u64 = 99_999_999_999_999;
        if let Some(e) = self
            .errors
            .iter()
            .find(|e| e.at_ms > MAX_ERROR_AT_MS || e.attempt > limits::MAX_ATTEMPTS)
        {
            return Err(InvalidInput::new(
                "invalid_error",
                format!(
                    "job {}: an error's at_ms must be at most {MAX_ERROR_AT_MS} and its attempt at most {}, got {} and {}",
                    self.id,
                    limits::MAX_ATTEMPTS,
                    e.at_ms,
                    e.attempt
                ),
            ));
        }
        limits.check_due_at(self.due_at_ms, now_ms)?;
        match (self.state, self.died_at_ms) {
            (JobState::Reserved, _) => {
                return Err(InvalidInput::new(
                    "invalid_state",
                    format!(
                        "job {}: state reserved cannot be imported (its lease belongs to the store it came from): import it as ready, due at its lease deadline",
                        self.id
                    ),
                ));
            }
            (JobState::Dead, None) => {
                return Err(InvalidInput::new(
                    "invalid_died_at",
                    format!("job {}: a dead job needs died_at_ms", self.id),
                ));
            }
            (JobState::Scheduled | JobState::Ready, Some(_)) => {
                return Err(InvalidInput::new(
                    "invalid_died_at",
                    format!("job {}: died_at_ms is only for dead jobs", self.id),
                ));
            }
            _ => {}
        }
        limits.check_body(self.body.len())?;
        if let Some(n) = self.max_attempts {
            limits::check_max_attempts(n)?;
        }
        if let Some(ms) = self.lease_ms {
            limits::check_lease(ms)?;
        }
        if let Some(ms) = self.dedup_ms {
            limits::check_dedup(ms)?;
        }
        if let Some(r) = &self.retry {
            r.validate()?;
        }
        if self.attempts > limits::MAX_ATTEMPTS {
            return Err(InvalidInput::new(
                "invalid_attempts",
                format!(
                    "job {}: attempts must be at most {}, got {}",
                    self.id,
                    limits::MAX_ATTEMPTS,
                    self.attempts
                ),
            ));
        }
        if self.errors.len() > crate::ERRORS_KEPT {
            return Err(InvalidInput::new(
                "invalid_error",
                format!(
                    "job {}: at most {} errors are kept, got {}",
                    self.id,
                    crate::ERRORS_KEPT,
                    self.errors.len()
                ),
            ));
        }
        if self
            .last_error
            .iter()
            .chain(self.errors.iter().map(|e| &e.error))
            .any(|e| e.len() > limits::MAX_ERROR_BYTES)
        {
            return Err(InvalidInput::new(
                "invalid_error",
                format!(
                    "job {}: last_error or an error of errors is longer than {} bytes",
                    self.id,
                    limits::MAX_ERROR_BYTES
                ),
            ));
        }
        Ok(())
    }
}

/// What an import did with one job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Imported {
    /// The job's id.
    pub id: JobId,
    /// True when the job was written; false when a job with this id
    /// exists (it is left as it is) or the id is in its dedup window.
    pub created: bool,
    /// True when nothing was written because a job with this id ended
    /// within its dedup window here.
    pub deduplicated: bool,
    /// The job's state after the call (the existing job's when not
    /// created; meaningless when deduplicated).
    pub state: JobState,
}
