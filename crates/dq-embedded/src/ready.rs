//! The ready jobs without a flow-control key, in hand-out order, kept in
//! memory by the writer.
//!
//! A reserve hands out a topic's ready jobs by `(priority, due, seq)`; which
//! come first is asked here, not of an index: the partial index on
//! `(tid, fkey, priority, due_ms, seq) WHERE state = 1` cost every job an
//! entry in and an entry out (docs/performance.md, "Ready jobs in memory").
//! The jobs with a key keep theirs (`jobs_kready`): their lanes take turns
//! by key, which the index answers (`crate::ops`' keyed hand-out).
//!
//! Like [`crate::leases::Leases`], the set is built when the file is opened
//! ([`crate::memory::Memory::load`]) and follows the transaction exactly:
//! each change is logged, undone with the operation, batch item or group
//! that made it, and forgotten at commit.
//!
//! Memory: one `(tid, priority, due, seq)` entry per ready job, ≈ 45–50
//! bytes with the B-tree's nodes (10,000,000 jobs ready at once, a long
//! consumer outage, ≈ 0.5 GB).

use std::collections::BTreeSet;

/// `(tid, priority, due_ms, seq)`: a ready job's place in its topic's order.
type Key = (i64, i64, i64, i64);

/// Every ready job without a key: job `seq` of topic `tid`, of `priority`,
/// due at `due` (ms).
#[derive(Debug, Default)]
pub(crate) struct Ready {
    order: BTreeSet<Key>,
    /// What the current transaction changed, to undo it.
    log: Vec<Step>,
}

#[derive(Debug)]
enum Step {
    Added(Key),
    Removed(Key),
}

impl Ready {
    /// Job `seq` of topic `tid` is ready (for a job already there, nothing changes).
    pub(crate) fn add(&mut self, tid: i64, priority: i64, due: i64, seq: i64) {
        let k = (tid, priority, due, seq);
        if self.order.insert(k) {
            self.log.push(Step::Added(k));
        }
    }

    /// Job `seq` is no longer ready (if it was, with that priority and due time).
    pub(crate) fn remove(&mut self, tid: i64, priority: i64, due: i64, seq: i64) {
        let k = (tid, priority, due, seq);
        if self.order.remove(&k) {
            self.log.push(Step::Removed(k));
        }
    }

    /// Topic `tid`'s ready jobs in hand-out order: `(priority, due, seq)`.
    fn topic(&self, tid: i64) -> impl Iterator<Item = (i64, i64, i64)> + '_ {
        self.order
            .range((tid, i64::MIN, i64::MIN, i64::MIN)..=(tid, i64::MAX, i64::MAX, i64::MAX))
            .map(|&(_, p, d, s)| (p, d, s))
    }

    /// The first `max` of topic `tid`'s ready jobs: `(priority, due, seq)`.
    pub(crate) fn first(&self, tid: i64, max: usize) -> Vec<(i64, i64, i64)> {
        self.topic(tid).take(max).collect()
    }

    /// The job topic `tid` hands out next.
    pub(crate) fn head(&self, tid: i64) -> Option<(i64, i64, i64)> {
        self.topic(tid).next()
    }

    /// How many jobs are ready, in all topics.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.order.len()
    }

    /// Every entry, for comparing with the file (`Memory::check`).
    #[cfg(debug_assertions)]
    pub(crate) fn entries(&self) -> impl Iterator<Item = &Key> {
        self.order.iter()
    }

    /// Where the log is: what [`Ready::undo_to`] goes back to.
    pub(crate) fn mark(&self) -> usize {
        self.log.len()
    }

    /// Undoes every change since `mark`, the latest first.
    pub(crate) fn undo_to(&mut self, mark: usize) {
        while self.log.len() > mark {
            match self.log.pop().expect("longer than mark") {
                Step::Added(k) => {
                    self.order.remove(&k);
                }
                Step::Removed(k) => {
                    self.order.insert(k);
                }
            }
        }
    }

    /// The transaction committed: its changes stay.
    pub(crate) fn committed(&mut self) {
        self.log.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(r: &Ready) -> Vec<Key> {
        r.order.iter().copied().collect()
    }

    #[test]
    fn a_topic_hands_out_by_priority_then_due_then_seq_and_alone() {
        let mut r = Ready::default();
        r.add(1, 5, 100, 10);
        r.add(1, 0, 300, 11);
        r.add(2, 0, 0, 12);
        r.add(1, 0, 300, 9);
        r.add(1, 0, 200, 13);
        assert_eq!(
            r.first(1, 10),
            [(0, 200, 13), (0, 300, 9), (0, 300, 11), (5, 100, 10)]
        );
        assert_eq!(r.first(1, 2), [(0, 200, 13), (0, 300, 9)]);
        assert_eq!(r.head(1), Some((0, 200, 13)));
        assert_eq!(r.head(2), Some((0, 0, 12)));
        assert_eq!(r.head(0), None);
        assert_eq!(r.head(3), None);
        assert_eq!(r.first(3, 10), Vec::<(i64, i64, i64)>::new());
        // Removing needs the job's place: a wrong one changes nothing.
        r.remove(1, 5, 101, 10);
        assert_eq!(r.len(), 5);
        r.remove(1, 5, 100, 10);
        assert_eq!(r.first(1, 10).len(), 3);
    }

    #[test]
    fn undo_puts_back_exactly_what_was_there_at_the_mark() {
        let mut r = Ready::default();
        r.add(1, 0, 100, 10);
        r.add(1, 0, 200, 11);
        r.committed();
        let before = all(&r);
        let mark = r.mark();
        r.add(1, 0, 300, 12); // enqueued
        r.remove(1, 0, 100, 10); // reserved
        r.remove(1, 0, 999, 99); // not there: nothing to undo
        r.add(1, 0, 200, 11); // there already: nothing to undo
        r.remove(1, 0, 200, 11); // rescheduled…
        r.add(1, 0, 50, 11); // …to another due time
        assert_eq!(all(&r), [(1, 0, 50, 11), (1, 0, 300, 12)]);
        r.undo_to(mark);
        assert_eq!(all(&r), before);
        // A savepoint inside: only the operation's own changes go.
        r.add(1, 0, 300, 12);
        let inner = r.mark();
        r.remove(1, 0, 100, 10);
        r.undo_to(inner);
        assert_eq!(all(&r), [(1, 0, 100, 10), (1, 0, 200, 11), (1, 0, 300, 12)]);
        r.committed();
        r.undo_to(0);
        assert_eq!(r.len(), 3);
    }
}
