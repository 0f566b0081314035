//! beanstalkd numbers for dq jobs. A job put through this listener has a
//! number for its dq id (from the store's counter). A job put over HTTP may
//! have any id (a UUIDv7 when the producer gave none): beanstalkd clients
//! name jobs by a number (≤ i64::MAX: PHP clients cast it to an int), so
//! such a job is shown under an alias, a number of its own at or above
//! [`ALIAS_BASE`], far beyond any counter value.
//!
//! The alias is a hash of the job's tube and id, so every instance sharing
//! a store shows the same number for the same job, and a restart keeps it.
//! To find a job by its alias (`delete`, `peek`, `stats-job`, …), the
//! listener remembers the aliases it has shown (up to [`REMEMBERED`], the
//! oldest forgotten first; a forgotten job gets the same alias again when
//! it is next shown). Two jobs whose hashes meet: the second takes the next
//! free number.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use dq_core::{JobId, Topic};

/// The first alias: 2^62. Counter numbers stay below it.
pub(super) const ALIAS_BASE: u64 = 1 << 62;
/// Aliases remembered for lookup by number.
const REMEMBERED: usize = 100_000;

/// How the listener names a dq job, and the job a number names.
#[derive(Default)]
pub(super) struct Aliases {
    inner: Mutex<Table>,
}

#[derive(Default)]
struct Table {
    by_number: HashMap<u64, (Topic, JobId)>,
    by_job: HashMap<(Topic, JobId), u64>,
    /// Numbers in the order they were first shown (for forgetting).
    order: VecDeque<u64>,
}

/// What a number names.
#[derive(Debug, PartialEq)]
pub(super) enum Named {
    /// A job whose dq id is this number, in whichever tube.
    Id(JobId),
    /// An alias this listener has shown: the job of that tube.
    Alias(Topic, JobId),
    /// An alias this listener does not know (not shown, or forgotten).
    Unknown,
}

/// The number a dq id is when it is one (canonical decimal, below
/// [`ALIAS_BASE`]).
fn native(id: &JobId) -> Option<u64> {
    let s = id.as_str();
    let n: u64 = s.parse().ok()?;
    (n < ALIAS_BASE && n.to_string() == s).then_some(n)
}

/// FNV-1a (64 bits) of the tube, a NUL, and the id: stable across
/// processes and versions (std's hasher promises neither).
fn hash(topic: &Topic, id: &JobId) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let bytes = topic
        .as_str()
        .bytes()
        .chain(std::iter::once(0))
        .chain(id.as_str().bytes());
    for b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

impl Aliases {
    /// The number beanstalkd clients see for the job `id` of `topic`.
    pub(super) fn number(&self, topic: &Topic, id: &JobId) -> u64 {
        if let Some(n) = native(id) {
            return n;
        }
        let mut t = self.inner.lock().expect("alias table");
        let key = (topic.clone(), id.clone());
        if let Some(n) = t.by_job.get(&key) {
            return *n;
        }
        let mut n = ALIAS_BASE | (hash(topic, id) & (ALIAS_BASE - 1));
        while t.by_number.contains_key(&n) {
            n = ALIAS_BASE | (n.wrapping_add(1) & (ALIAS_BASE - 1));
        }
        if t.order.len() >= REMEMBERED
            && let Some(old) = t.order.pop_front()
            && let Some(job) = t.by_number.remove(&old)
        {
            t.by_job.remove(&job);
        }
        t.by_number.insert(n, key.clone());
        t.by_job.insert(key, n);
        t.order.push_back(n);
        n
    }

    /// The job a number names.
    pub(super) fn named(&self, n: u64) -> Named {
        if n < ALIAS_BASE {
            return Named::Id(JobId::new(n.to_string()).expect("a number is a valid id"));
        }
        let t = self.inner.lock().expect("alias table");
        match t.by_number.get(&n) {
            Some((topic, id)) => Named::Alias(topic.clone(), id.clone()),
            None => Named::Unknown,
        }
    }

    /// Forgets the alias of a job that is gone (deleted through here).
    pub(super) fn forget(&self, n: u64) {
        if n < ALIAS_BASE {
            return;
        }
        let mut t = self.inner.lock().expect("alias table");
        if let Some(job) = t.by_number.remove(&n) {
            t.by_job.remove(&job);
            t.order.retain(|o| *o != n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(t: &str, id: &str) -> (Topic, JobId) {
        (Topic::new(t).unwrap(), JobId::new(id).unwrap())
    }

    #[test]
    fn numbers_are_their_own_name_and_other_ids_get_a_stable_alias() {
        let a = Aliases::default();
        let (t, id) = job("mail", "42");
        assert_eq!(a.number(&t, &id), 42);
        assert_eq!(a.named(42), Named::Id(id));
        let (t, uuid) = job("mail", "0192f0a4-5b6c-7d8e-9f00-112233445566");
        let n = a.number(&t, &uuid);
        assert!(
            (ALIAS_BASE..=i64::MAX as u64).contains(&n),
            "{n} is an alias a PHP int holds"
        );
        assert_eq!(a.number(&t, &uuid), n, "the same job, the same number");
        assert_eq!(a.named(n), Named::Alias(t.clone(), uuid.clone()));
        assert_eq!(
            Aliases::default().number(&t, &uuid),
            n,
            "another instance shows the same number"
        );
        let (t2, _) = job("other", "x");
        assert_ne!(a.number(&t2, &uuid), n, "the tube is part of the job");
        a.forget(n);
        assert_eq!(a.named(n), Named::Unknown);
    }

    #[test]
    fn ids_that_only_look_like_numbers_get_an_alias() {
        let a = Aliases::default();
        for id in ["007", "+7", "4611686018427387904", "99999999999999999999"] {
            let (t, id) = job("t", id);
            assert!(a.number(&t, &id) >= ALIAS_BASE, "{id}");
        }
    }

    #[test]
    fn the_oldest_alias_is_forgotten_first() {
        let a = Aliases::default();
        let t = Topic::new("t").unwrap();
        let first = a.number(&t, &JobId::new("j0").unwrap());
        for i in 1..=REMEMBERED {
            a.number(&t, &JobId::new(format!("j{i}")).unwrap());
        }
        assert_eq!(a.named(first), Named::Unknown);
        assert_eq!(
            a.number(&t, &JobId::new("j0").unwrap()),
            first,
            "shown again, the same alias"
        );
    }
}
