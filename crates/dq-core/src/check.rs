//! The rules for input every front-end shares, in one place: what a new
//! job ([`NewJob::check`]) and a reserve ([`ReserveParams::check`]) may
//! ask. The service runs them, so the HTTP API, the beanstalkd protocol and
//! the scheduler refuse the same mistake with the same answer; a front-end
//! that must answer a mistake before it has built the request (a
//! protocol's own reply, a check of the raw list before each topic's name)
//! calls them itself first.

use crate::limits::{self, InvalidInput, Limits, MAX_RESERVE};
use crate::model::{Body, Expiry, NewJob, When};

impl NewJob {
    /// Checks the values of a job to enqueue, in this order: its body
    /// (JSON nesting, then size), when it is due, when it expires,
    /// `max_attempts`, `lease_ms`, `retry`, `dedup_ms`. Nothing is written
    /// before it passes.
    ///
    /// # Errors
    /// The first rule broken: `invalid_body`, `body_too_large`,
    /// `invalid_delay` (beyond `max_delay`), `invalid_due_at` (later than
    /// [`Limits::latest_due`] at `now_ms`), `invalid_expiry` (see
    /// [`NewJob::check_expiry`]), `invalid_max_attempts`, `invalid_lease`,
    /// `invalid_retry`, `invalid_dedup`.
    pub fn check(&self, limits: &Limits, now_ms: u64) -> Result<(), InvalidInput> {
        self.check_body(limits)?;
        match self.when {
            When::TopicDefault => {}
            When::DelayMs(ms) => limits.check_delay(ms)?,
            When::DueAtMs(t) => limits.check_due_at(t, now_ms)?,
        }
        self.check_expiry(limits, now_ms)?;
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

    /// The expiry's part of [`NewJob::check`]: `expires_in_ms` within
    /// `max_delay`, `expires_at_ms` no later than [`Limits::latest_due`],
    /// and either one later than the job's due time (its own `delay_ms` or
    /// `due_at_ms`, else now: a topic's default delay is not known here, and
    /// a job it makes due after its expiry goes dead when it comes due).
    ///
    /// # Errors
    /// `invalid_expiry`.
    pub fn check_expiry(&self, limits: &Limits, now_ms: u64) -> Result<(), InvalidInput> {
        let Some(exp) = self.expires else {
            return Ok(());
        };
        let bad = |m: String| Err(InvalidInput::new("invalid_expiry", m));
        match exp {
            Expiry::InMs(ms) if ms > limits.max_delay_ms => {
                return bad(format!(
                    "expires_in_ms of {} is over the limit of {} (max_delay)",
                    limits::human_ms(ms),
                    limits::human_ms(limits.max_delay_ms)
                ));
            }
            Expiry::AtMs(t) if t > limits.latest_due(now_ms) => {
                return bad(format!(
                    "expires_at_ms {t} is later than {}, the latest time taken now (max_delay)",
                    limits.latest_due(now_ms)
                ));
            }
            _ => {}
        }
        let (due, due_is) = match self.when {
            When::TopicDefault => (now_ms, "now".to_string()),
            When::DelayMs(d) => (now_ms.saturating_add(d), format!("delay_ms {d} from now")),
            When::DueAtMs(t) => (t.max(now_ms), format!("due_at_ms {}", t.max(now_ms))),
        };
        let at = exp.at(now_ms);
        if at <= due {
            let sent = match exp {
                Expiry::InMs(ms) => format!("expires_in_ms {ms} (at {at})"),
                Expiry::AtMs(t) => format!("expires_at_ms {t}"),
            };
            return bad(format!(
                "{sent} is not later than the job's due time ({due_is}, at {due}): it would never be handed out"
            ));
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
    fn an_expiry_is_bounded_and_later_than_the_due_time() {
        let limits = Limits::default();
        let now = 1_000_000;
        let with = |when: When, e: Expiry| NewJob {
            when,
            expires: Some(e),
            ..job()
        };
        let ok = |j: NewJob| j.check(&limits, now);
        let code = |j: NewJob| j.check(&limits, now).unwrap_err().code;
        assert_eq!(ok(with(When::TopicDefault, Expiry::InMs(1))), Ok(()));
        assert_eq!(ok(with(When::DelayMs(10), Expiry::InMs(11))), Ok(()));
        assert_eq!(
            ok(with(When::DueAtMs(now + 5), Expiry::AtMs(now + 6))),
            Ok(())
        );
        // A due time in the past is now.
        assert_eq!(ok(with(When::DueAtMs(1), Expiry::AtMs(now + 1))), Ok(()));
        for bad in [
            with(When::TopicDefault, Expiry::InMs(0)),
            with(When::DelayMs(10), Expiry::InMs(10)),
            with(When::DelayMs(10), Expiry::AtMs(now + 10)),
            with(When::DueAtMs(now + 5), Expiry::InMs(5)),
            with(When::TopicDefault, Expiry::AtMs(now)),
            with(When::TopicDefault, Expiry::AtMs(1)),
            with(When::TopicDefault, Expiry::InMs(limits.max_delay_ms + 1)),
            with(When::TopicDefault, Expiry::AtMs(limits.latest_due(now) + 1)),
        ] {
            assert_eq!(code(bad.clone()), "invalid_expiry", "{bad:?}");
        }
        // The due time's own bounds come first, then the expiry's.
        assert_eq!(
            code(with(When::DelayMs(u64::MAX), Expiry::InMs(0))),
            "invalid_delay"
        );
        assert_eq!(
            code(NewJob {
                max_attempts: Some(0),
                ..with(When::TopicDefault, Expiry::InMs(0))
            }),
            "invalid_expiry"
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
