//! The rules for input every front-end shares, in one place: what a new
//! job ([`NewJob::check`]) and a reserve ([`ReserveParams::check`]) may
//! ask. The service runs them, so the HTTP API, the beanstalkd protocol and
//! the scheduler refuse the same mistake with the same answer; a front-end
//! that must answer a mistake before it has built the request (a
//! protocol's own reply, a check of the raw list before each topic's name)
//! calls them itself first.

use crate::limits::{self, InvalidInput, Limits, MAX_RESERVE};
use crate::model::{Body, NewJob, When};

impl NewJob {
    /// Checks the values of a job to enqueue, in this order: its body
    /// (JSON nesting, then size), when it is due, `max_attempts`,
    /// `lease_ms`, `retry`, `dedup_ms`. Nothing is written before it passes.
    ///
    /// # Errors
    /// The first rule broken: `invalid_body`, `body_too_large`,
    /// `invalid_delay` (beyond `max_delay`), `invalid_due_at` (later than
    /// [`Limits::latest_due`] at `now_ms`), `invalid_max_attempts`,
    /// `invalid_lease`, `invalid_retry`, `invalid_dedup`.
    pub fn check(&self, limits: &Limits, now_ms: u64) -> Result<(), InvalidInput> {
        self.check_body(limits)?;
        match self.when {
            When::TopicDefault => {}
            When::DelayMs(ms) => limits.check_delay(ms)?,
            When::DueAtMs(t) => limits.check_due_at(t, now_ms)?,
        }
        if let Some(n) = self.max_attempts {
            limits::check_max_attempts(n)?;
        }
        if let Some(ms) = self.lease_ms {
            limits::check_lease(ms)?;
        }
        if let Some(r) = &self.retry {
            r.validate()?;
        }
        if let Some(ms) = self.dedup_ms {
            limits::check_dedup(ms)?;
        }
        Ok(())
    }

    /// The body's part of [`NewJob::check`]: a JSON body nests at most
    /// [`limits::MAX_JSON_DEPTH`] deep, and no body is over
    /// [`Limits::max_body_bytes`].
    ///
    /// # Errors
    /// `invalid_body`, `body_too_large`.
    pub fn check_body(&self, limits: &Limits) -> Result<(), InvalidInput> {
        if let Body::Json(text) = &self.body {
            limits::check_json_depth(text)?;
        }
        limits.check_body(self.body.len())
    }
}

/// Most topics one reserve may name.
pub const MAX_RESERVE_TOPICS: usize = 1000;

/// What a reserve asks, as its caller sent it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReserveParams {
    /// How many topics it names (duplicates counted).
    pub topics: usize,
    /// Most jobs to hand out.
    pub max: usize,
    /// The lease asked for (`None`: each topic's).
    pub lease_ms: Option<u64>,
    /// How long to wait for a job.
    pub wait_ms: u64,
}

impl ReserveParams {
    /// Checks a reserve, in this order: the number of topics, `max`,
    /// `lease_ms`, `wait_ms`.
    ///
    /// # Errors
    /// The first rule broken: `invalid_topics` (none, or more than
    /// [`MAX_RESERVE_TOPICS`]), `invalid_max` (outside 1..=[`MAX_RESERVE`]),
    /// `invalid_lease`, `invalid_wait` (beyond [`Limits::max_wait_ms`]).
    pub fn check(&self, limits: &Limits) -> Result<(), InvalidInput> {
        self.check_topics()?;
        if !(1..=MAX_RESERVE).contains(&self.max) {
            return Err(InvalidInput::new(
                "invalid_max",
                format!("max must be between 1 and {MAX_RESERVE}, got {}", self.max),
            ));
        }
        if let Some(ms) = self.lease_ms {
            limits::check_lease(ms)?;
        }
        let max_wait = limits.max_wait_ms;
        if self.wait_ms > max_wait {
            return Err(InvalidInput::new(
                "invalid_wait",
                format!(
                    "wait_ms must be at most {max_wait} (max_wait), got {}",
                    self.wait_ms
                ),
            ));
        }
        Ok(())
    }

    /// The number-of-topics part of [`ReserveParams::check`], which a
    /// front-end checks before it reads each topic's name.
    ///
    /// # Errors
    /// `invalid_topics`.
    pub fn check_topics(&self) -> Result<(), InvalidInput> {
        if self.topics == 0 || self.topics > MAX_RESERVE_TOPICS {
            return Err(InvalidInput::new(
                "invalid_topics",
                format!("topics must name 1 to {MAX_RESERVE_TOPICS} topics"),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RetryPolicy;

    fn job() -> NewJob {
        NewJob::with_generated_id(Body::Json("{}".into()), When::TopicDefault)
    }

    #[test]
    fn a_new_job_reports_the_first_rule_broken() {
        let limits = Limits::default();
        assert_eq!(job().check(&limits, 0), Ok(()));
        let code = |j: NewJob| j.check(&limits, 0).unwrap_err().code;
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        assert_eq!(
            code(NewJob {
                body: Body::Json(deep),
                lease_ms: Some(1),
                ..job()
            }),
            "invalid_body"
        );
        let big = Body::Bytes(vec![0; limits.max_body_bytes + 1]);
        assert_eq!(
            code(NewJob {
                body: big,
                when: When::DelayMs(u64::MAX),
                ..job()
            }),
            "body_too_large"
        );
        assert_eq!(
            code(NewJob {
                when: When::DelayMs(u64::MAX),
                max_attempts: Some(0),
                ..job()
            }),
            "invalid_delay"
        );
        assert_eq!(
            code(NewJob {
                when: When::DueAtMs(u64::MAX),
                ..job()
            }),
            "invalid_due_at"
        );
        assert_eq!(
            code(NewJob {
                max_attempts: Some(0),
                lease_ms: Some(1),
                ..job()
            }),
            "invalid_max_attempts"
        );
        assert_eq!(
            code(NewJob {
                lease_ms: Some(1),
                retry: Some(RetryPolicy::FixedMs(u64::MAX)),
                ..job()
            }),
            "invalid_lease"
        );
        assert_eq!(
            code(NewJob {
                retry: Some(RetryPolicy::FixedMs(u64::MAX)),
                dedup_ms: Some(u64::MAX),
                ..job()
            }),
            "invalid_retry"
        );
        assert_eq!(
            code(NewJob {
                dedup_ms: Some(u64::MAX),
                ..job()
            }),
            "invalid_dedup"
        );
    }

    #[test]
    fn a_reserve_reports_the_first_rule_broken() {
        let limits = Limits::default();
        let ok = ReserveParams {
            topics: 1,
            max: 1,
            lease_ms: None,
            wait_ms: 0,
        };
        assert_eq!(ok.check(&limits), Ok(()));
        let code = |p: ReserveParams| p.check(&limits).unwrap_err().code;
        let over = MAX_RESERVE_TOPICS + 1;
        assert_eq!(code(ReserveParams { topics: 0, ..ok }), "invalid_topics");
        assert_eq!(
            code(ReserveParams {
                topics: over,
                max: 0,
                ..ok
            }),
            "invalid_topics"
        );
        assert_eq!(
            code(ReserveParams {
                max: MAX_RESERVE + 1,
                lease_ms: Some(1),
                ..ok
            }),
            "invalid_max"
        );
        assert_eq!(
            code(ReserveParams {
                lease_ms: Some(1),
                wait_ms: u64::MAX,
                ..ok
            }),
            "invalid_lease"
        );
        assert_eq!(
            code(ReserveParams {
                wait_ms: limits.max_wait_ms + 1,
                ..ok
            }),
            "invalid_wait"
        );
    }
}
