//! Per-topic settings.

use serde::{Deserialize, Serialize};

use crate::limits::{self, InvalidInput, Limits};
use crate::retry::RetryPolicy;

/// How jobs of a topic reach consumers.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "lowercase", deny_unknown_fields)]
pub enum Delivery {
    /// Consumers reserve jobs and ack them.
    #[default]
    Pull,
}

/// A topic's settings. Jobs may override `max_attempts`, `lease_ms` and `retry`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopicConfig {
    /// Hand-outs before a job goes dead.
    pub max_attempts: u32,
    /// Lease length when the reserve call names none.
    pub lease_ms: u64,
    /// Dead letters kept; the oldest are dropped beyond this.
    pub dead_cap: u64,
    /// Delay of a job enqueued with neither `delay_ms` nor `due_at_ms`.
    pub default_delay_ms: u64,
    /// Wait between failed attempts.
    pub retry: RetryPolicy,
    /// How jobs reach consumers.
    pub delivery: Delivery,
}

impl Default for TopicConfig {
    fn default() -> Self {
        Self {
            max_attempts: 5,
            lease_ms: 30_000,
            dead_cap: 10_000,
            default_delay_ms: 0,
            retry: RetryPolicy::default(),
            delivery: Delivery::Pull,
        }
    }
}

/// Most dead letters a topic may keep.
pub const MAX_DEAD_CAP: u64 = 10_000_000;

/// A partial update of a [`TopicConfig`]: fields left out keep their value.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopicConfigPatch {
    /// See [`TopicConfig::max_attempts`].
    pub max_attempts: Option<u32>,
    /// See [`TopicConfig::lease_ms`].
    pub lease_ms: Option<u64>,
    /// See [`TopicConfig::dead_cap`].
    pub dead_cap: Option<u64>,
    /// See [`TopicConfig::default_delay_ms`].
    pub default_delay_ms: Option<u64>,
    /// See [`TopicConfig::retry`].
    pub retry: Option<RetryPolicy>,
    /// See [`TopicConfig::delivery`].
    pub delivery: Option<Delivery>,
}

impl TopicConfigPatch {
    /// Checks every field given.
    ///
    /// # Errors
    /// The first field out of bounds, with its own code.
    pub fn validate(&self, limits: &Limits) -> Result<(), InvalidInput> {
        if let Some(n) = self.max_attempts {
            limits::check_max_attempts(n)?;
        }
        if let Some(ms) = self.lease_ms {
            limits::check_lease(ms)?;
        }
        if let Some(cap) = self.dead_cap
            && cap > MAX_DEAD_CAP
        {
            return Err(InvalidInput::new(
                "invalid_dead_cap",
                format!("dead_cap must be at most {MAX_DEAD_CAP}, got {cap}"),
            ));
        }
        if let Some(ms) = self.default_delay_ms {
            limits.check_delay(ms)?;
        }
        if let Some(r) = &self.retry {
            r.validate()?;
        }
        Ok(())
    }

    /// Whether the patch changes nothing.
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }

    /// `base` with this patch's fields laid over it.
    pub fn apply(&self, mut base: TopicConfig) -> TopicConfig {
        if let Some(v) = self.max_attempts {
            base.max_attempts = v;
        }
        if let Some(v) = self.lease_ms {
            base.lease_ms = v;
        }
        if let Some(v) = self.dead_cap {
            base.dead_cap = v;
        }
        if let Some(v) = self.default_delay_ms {
            base.default_delay_ms = v;
        }
        if let Some(v) = &self.retry {
            base.retry = v.clone();
        }
        if let Some(v) = &self.delivery {
            base.delivery = v.clone();
        }
        base
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patch_keeps_unnamed_fields() {
        let p: TopicConfigPatch = serde_json::from_str(r#"{"max_attempts": 3}"#).unwrap();
        let c = p.apply(TopicConfig::default());
        assert_eq!(c.max_attempts, 3);
        assert_eq!(c.lease_ms, 30_000);
    }

    #[test]
    fn patch_rejects_unknown_and_out_of_range() {
        assert!(serde_json::from_str::<TopicConfigPatch>(r#"{"max_atempts": 3}"#).is_err());
        let p = TopicConfigPatch {
            lease_ms: Some(1),
            ..Default::default()
        };
        assert_eq!(
            p.validate(&Limits::default()).unwrap_err().code,
            "invalid_lease"
        );
        let p = TopicConfigPatch {
            dead_cap: Some(MAX_DEAD_CAP + 1),
            ..Default::default()
        };
        assert_eq!(
            p.validate(&Limits::default()).unwrap_err().code,
            "invalid_dead_cap"
        );
    }

    #[test]
    fn delivery_json() {
        let d: Delivery = serde_json::from_str(r#"{"mode":"pull"}"#).unwrap();
        assert_eq!(d, Delivery::Pull);
        assert!(serde_json::from_str::<Delivery>(r#"{"mode":"carrier-pigeon"}"#).is_err());
    }
}
