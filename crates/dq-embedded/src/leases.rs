//! The reserved jobs' deadlines, kept in memory by the writer.
//!
//! A reserved job's row holds its token and deadline; which leases end
//! first is asked here, not of an index: the partial index on
//! `(tid, deadline_ms) WHERE state = 2` cost every lease an insert and every
//! ack a delete in a B-tree (what this set saves: docs/performance-log.md,
//! "Leases in memory"). The set is built from the
//! table when the file is opened (one scan of the jobs table, the only
//! cost: [`crate::memory::Memory::load`]) and kept in step by every operation that starts,
//! moves or ends a lease.
//!
//! It follows the transaction exactly: each change is logged, and what an
//! operation's savepoint or a group's transaction undoes in SQLite,
//! [`Leases::undo_to`] undoes here; a commit forgets the log
//! ([`Leases::committed`]). The writer calls these (see `writer::run`); an
//! operation only adds and removes.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::ordered::UndoLog;
use crate::sorted::Sorted;

/// Every lease the file holds: job `seq` of topic `tid` reserved until
/// `deadline` (ms).
#[derive(Debug, Default)]
pub(crate) struct Leases {
    /// `(tid, deadline, seq)`: each topic's leases in the order they end.
    order: Sorted<(i64, i64, i64)>,
    /// `seq` → `(tid, deadline)`.
    of: HashMap<i64, (i64, i64), BuildHasherDefault<RowIdHasher>>,
    log: UndoLog<Step>,
}

/// Hashes a row id with one multiplication (Fibonacci hashing): row ids
/// are SQLite's, not a client's, so no hash flooding to fear, and the map
/// is on every lease's path (docs/performance-log.md, "Leases in memory").
#[derive(Default)]
pub(crate) struct RowIdHasher(u64);

impl Hasher for RowIdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_i64(&mut self, v: i64) {
        self.0 = (v as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

#[derive(Debug)]
enum Step {
    Added(i64),
    Removed { seq: i64, tid: i64, deadline: i64 },
}

impl Leases {
    /// Job `seq` of topic `tid` is reserved until `deadline` (a lease made,
    /// or one extended: the entry before is replaced).
    pub(crate) fn add(&mut self, tid: i64, seq: i64, deadline: i64) {
        if let Some((tid, deadline)) = self.of.insert(seq, (tid, deadline)) {
            self.order.remove(&(tid, deadline, seq));
            self.log.push(Step::Removed { seq, tid, deadline });
        }
        self.order.insert((tid, deadline, seq));
        self.log.push(Step::Added(seq));
    }

    /// Job `seq`'s lease ended (if it had one).
    pub(crate) fn remove(&mut self, seq: i64) {
        if let Some((tid, deadline)) = self.of.remove(&seq) {
            self.order.remove(&(tid, deadline, seq));
            self.log.push(Step::Removed { seq, tid, deadline });
        }
    }

    /// Up to `max` of topic `tid`'s leases that ended before `now`, the
    /// earliest first: their jobs' `seq`.
    pub(crate) fn expired(&self, tid: i64, now: i64, max: usize) -> Vec<i64> {
        self.order
            .range_in(tid, (tid, i64::MIN, i64::MIN)..(tid, now, i64::MIN))
            .take(max)
            .map(|&(_, _, seq)| seq)
            .collect()
    }

    /// Topic `tid`'s leases, the earliest to end first.
    fn topic(&self, tid: i64) -> impl Iterator<Item = &(i64, i64, i64)> {
        self.order.range_in(tid, ..)
    }

    /// Up to `max` of topic `tid`'s leases, any of them: their jobs' `seq`.
    pub(crate) fn of_topic(&self, tid: i64, max: usize) -> Vec<i64> {
        self.topic(tid).take(max).map(|&(_, _, seq)| seq).collect()
    }

    /// When topic `tid`'s first lease ends.
    pub(crate) fn next_deadline(&self, tid: i64) -> Option<u64> {
        self.topic(tid)
            .next()
            .map(|&(_, deadline, _)| deadline.max(0) as u64)
    }

    /// Every entry, for comparing with the file (`Memory::check`).
    #[cfg(debug_assertions)]
    pub(crate) fn entries(&self) -> impl Iterator<Item = &(i64, i64, i64)> {
        self.order.iter()
    }

    /// How many leases are held, in all topics.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.of.len()
    }

    /// Where the log is: what [`Leases::undo_to`] goes back to.
    pub(crate) fn mark(&self) -> usize {
        self.log.mark()
    }

    /// Undoes every change since `mark`, the latest first.
    pub(crate) fn undo_to(&mut self, mark: usize) {
        let (order, of) = (&mut self.order, &mut self.of);
        self.log.undo_to(mark, |step| match step {
            Step::Added(seq) => {
                if let Some((tid, deadline)) = of.remove(&seq) {
                    order.remove(&(tid, deadline, seq));
                }
            }
            Step::Removed { seq, tid, deadline } => {
                order.insert((tid, deadline, seq));
                of.insert(seq, (tid, deadline));
            }
        });
    }

    /// The transaction committed: its changes stay.
    pub(crate) fn committed(&mut self) {
        self.log.forget();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(l: &Leases) -> Vec<(i64, i64, i64)> {
        assert_eq!(l.order.len(), l.of.len(), "both views hold the same leases");
        for &(tid, deadline, seq) in l.order.iter() {
            assert_eq!(l.of.get(&seq), Some(&(tid, deadline)));
        }
        l.order.iter().copied().collect()
    }

    #[test]
    fn expired_leases_come_earliest_first_within_their_topic_only() {
        let mut l = Leases::default();
        l.add(1, 10, 500);
        l.add(1, 11, 100);
        l.add(2, 12, 50);
        l.add(1, 13, 100);
        // Strictly before `now`: a deadline of 500 has not ended at 500.
        assert_eq!(l.expired(1, 500, 10), [11, 13]);
        assert_eq!(l.expired(1, 501, 10), [11, 13, 10]);
        assert_eq!(l.expired(1, 501, 1), [11]);
        assert_eq!(l.expired(1, 100, 10), Vec::<i64>::new());
        assert_eq!(l.expired(3, 1000, 10), Vec::<i64>::new());
        assert_eq!(l.next_deadline(1), Some(100));
        assert_eq!(l.next_deadline(2), Some(50));
        assert_eq!(l.next_deadline(0), None);
        assert_eq!(l.next_deadline(3), None);
        assert_eq!(l.of_topic(1, 10), [11, 13, 10]);
        assert_eq!(l.of_topic(1, 2), [11, 13]);
        assert_eq!(l.of_topic(2, 10), [12]);
        assert_eq!(l.of_topic(0, 10), Vec::<i64>::new());
    }

    #[test]
    fn an_extended_lease_replaces_its_entry() {
        let mut l = Leases::default();
        l.add(1, 10, 100);
        l.add(1, 10, 900);
        assert_eq!(all(&l), [(1, 900, 10)]);
        assert_eq!(l.expired(1, 500, 10), Vec::<i64>::new());
    }

    #[test]
    fn undo_puts_back_exactly_what_was_there_at_the_mark() {
        let mut l = Leases::default();
        l.add(1, 10, 100);
        l.add(1, 11, 200);
        l.committed();
        let before = all(&l);
        let mark = l.mark();
        l.add(1, 12, 300); // a new lease
        l.add(1, 10, 400); // an extended one
        l.remove(11); // an ended one
        l.remove(99); // no lease: nothing to undo
        l.add(2, 11, 50); // the same job leased again
        assert_eq!(all(&l), [(1, 300, 12), (1, 400, 10), (2, 50, 11)]);
        l.undo_to(mark);
        assert_eq!(all(&l), before);
        // A savepoint inside: only the operation's own changes go.
        l.add(1, 12, 300);
        let inner = l.mark();
        l.remove(10);
        l.undo_to(inner);
        assert_eq!(all(&l), [(1, 100, 10), (1, 200, 11), (1, 300, 12)]);
        l.committed();
        l.undo_to(0);
        assert_eq!(all(&l), [(1, 100, 10), (1, 200, 11), (1, 300, 12)]);
        assert_eq!(l.len(), 3);
    }
}
