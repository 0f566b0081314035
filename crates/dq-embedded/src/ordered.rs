//! Queue orders the writer keeps in memory instead of in a partial index:
//! the ready jobs without a flow-control key, in hand-out order
//! ([`Ready`]), each key's ready jobs ([`Lanes`]), and the dead letters,
//! oldest first ([`Dead`]).
//!
//! A reserve hands out a topic's ready jobs by `(priority, due, seq)` (the
//! keyed hand-out takes turns over the keys' lanes, each in that order),
//! and dead letters are trimmed, replayed and listed by `(died, seq)`;
//! which come first is asked here, not of an index. Each partial index on
//! the jobs table cost every statement that writes a job a cursor and the
//! test of its `WHERE`, and the ready index an entry in and out per job
//! (docs/performance-log.md, "Ready jobs and dead letters in memory"). The
//! schedule keeps its index (`jobs_sched`): its backlog (reminders days
//! ahead) is the one that may be too big for memory.
//!
//! Like [`crate::leases::Leases`], each set is built when the file is
//! opened ([`crate::memory::Memory::load`]) and follows the transaction
//! exactly: each change is logged, undone with the operation, batch item
//! or group that made it, and forgotten at commit.
//!
//! Memory: a `(tid, priority, due, seq)` key of 32 bytes per ready job,
//! held in a [`Sorted`] set: ≈ 40–80 bytes per job enqueued in order (its
//! topic's tail, a 40-byte slot in a `VecDeque` whose room grows by
//! doubling; jobs taken from the middle of it leave marked slots, at most
//! as many as the live ones, until it is compacted), ≈ 70–80 for one
//! added out of order (B-tree nodes about half full);
//! `scripts/ready-rss.py` measured 10 bytes per job less than with a
//! `BTreeSet` alone for 1,000,000 jobs enqueued in order, so 10,000,000
//! jobs ready at once (a long consumer outage) take ≈ 0.5–0.75 GB. A key's
//! lane costs its key and a set of its own (≈ 300 bytes for a key with one
//! ready job: per-user keys cost that per job). Dead letters are capped per
//! topic by `dead_cap`.

use std::collections::{BTreeMap, BTreeSet};

use crate::sorted::Sorted;

/// What the current transaction changed in one of the writer's in-memory
/// orders (these and [`crate::leases::Leases`]), newest last: undone to a
/// mark as SQLite undoes an operation's or a batch item's savepoint or the
/// whole group, forgotten at commit.
#[derive(Debug)]
pub(crate) struct UndoLog<S>(Vec<S>);

impl<S> Default for UndoLog<S> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<S> UndoLog<S> {
    pub(crate) fn push(&mut self, step: S) {
        self.0.push(step);
    }

    /// Where the log is: what [`UndoLog::undo_to`] goes back to.
    pub(crate) fn mark(&self) -> usize {
        self.0.len()
    }

    /// Hands `undo` every step since `mark`, the latest first.
    pub(crate) fn undo_to(&mut self, mark: usize, mut undo: impl FnMut(S)) {
        while self.0.len() > mark {
            undo(self.0.pop().expect("longer than mark"));
        }
    }

    /// The transaction committed: its steps stay done. Gives back the
    /// memory of a big log (a file's load, a group of thousands of jobs)
    /// rather than keeping it for good.
    pub(crate) fn forget(&mut self) {
        self.0.clear();
        self.0.shrink_to(4096);
    }
}

/// An entry: a topic id first, then the job's place in the topic's order,
/// its `seq` last.
pub(crate) trait Entry: crate::sorted::Grouped + std::fmt::Debug {
    /// The entry without its topic: `(priority, due, seq)` or `(died, seq)`.
    type Place: Copy;
    fn place(&self) -> Self::Place;
}

impl Entry for (i64, i64, i64, i64) {
    type Place = (i64, i64, i64);
    fn place(&self) -> Self::Place {
        (self.1, self.2, self.3)
    }
}

impl Entry for (i64, i64, i64) {
    type Place = (i64, i64);
    fn place(&self) -> Self::Place {
        (self.1, self.2)
    }
}

/// Every ready job without a key: `(tid, priority, due_ms, seq)`.
pub(crate) type Ready = Ordered<(i64, i64, i64, i64)>;
/// Every dead letter: `(tid, died_ms, seq)`, its death time as
/// [`died_place`] places it.
pub(crate) type Dead = Ordered<(i64, i64, i64)>;

/// A dead letter's death time in [`Dead`]'s order: a dead letter imported
/// without one comes first, as SQLite orders its NULL.
pub(crate) fn died_place(died_ms: Option<i64>) -> i64 {
    died_ms.unwrap_or(i64::MIN)
}

/// One order: entries of every topic, each topic's in a row.
#[derive(Debug)]
pub(crate) struct Ordered<K> {
    order: Sorted<K>,
    log: UndoLog<Step<K>>,
}

impl<K> Default for Ordered<K> {
    fn default() -> Self {
        Self {
            order: Sorted::default(),
            log: UndoLog::default(),
        }
    }
}

#[derive(Debug)]
enum Step<K> {
    Added(K),
    Removed(K),
}

impl<K: Entry> Ordered<K> {
    /// The job is in this order now (for a job already there, nothing changes).
    pub(crate) fn add(&mut self, k: K) {
        if self.order.insert(k) {
            self.log.push(Step::Added(k));
        }
    }

    /// The job is no longer in this order (if it was, at that place).
    pub(crate) fn remove(&mut self, k: K) {
        if self.order.remove(&k) {
            self.log.push(Step::Removed(k));
        }
    }

    /// Topic `tid`'s entries in order: their places.
    pub(crate) fn topic(&self, tid: i64) -> impl Iterator<Item = K::Place> + '_ {
        self.order.range_in(tid, ..).map(Entry::place)
    }

    /// The first `max` of topic `tid`'s entries: their places.
    pub(crate) fn first(&self, tid: i64, max: usize) -> Vec<K::Place> {
        self.topic(tid).take(max).collect()
    }

    /// Topic `tid`'s first entry.
    pub(crate) fn head(&self, tid: i64) -> Option<K::Place> {
        self.topic(tid).next()
    }

    /// How many entries, in all topics.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.order.len()
    }

    /// Every entry, for comparing with the file (`Memory::check`).
    #[cfg(debug_assertions)]
    pub(crate) fn entries(&self) -> impl Iterator<Item = &K> {
        self.order.iter()
    }

    /// Where the log is: what [`Ordered::undo_to`] goes back to.
    pub(crate) fn mark(&self) -> usize {
        self.log.mark()
    }

    /// Undoes every change since `mark`, the latest first.
    pub(crate) fn undo_to(&mut self, mark: usize) {
        let order = &mut self.order;
        self.log.undo_to(mark, |step| match step {
            Step::Added(k) => {
                order.remove(&k);
            }
            Step::Removed(k) => {
                order.insert(k);
            }
        });
    }

    /// The transaction committed: its changes stay.
    pub(crate) fn committed(&mut self) {
        self.log.forget();
    }
}

/// A ready job's place in its key's lane: `(priority, due_ms, seq)`.
pub(crate) type Place = (i64, i64, i64);

/// The ready jobs with a flow-control key: each key's lane in hand-out
/// order, the keys of a topic in key order (the keyed hand-out takes turns
/// over them: `ops::reserve::keyed::reserve_keyed`).
#[derive(Debug, Default)]
pub(crate) struct Lanes {
    /// tid → key → the lane.
    of: LaneMap,
    log: UndoLog<LaneStep>,
}

type LaneMap = BTreeMap<i64, BTreeMap<Box<str>, BTreeSet<Place>>>;

#[derive(Debug)]
enum LaneStep {
    Added(i64, Box<str>, Place),
    Removed(i64, Box<str>, Place),
}

/// Puts `p` into key `key`'s lane; whether it was not there.
fn put(of: &mut LaneMap, tid: i64, key: &str, p: Place) -> bool {
    of.entry(tid)
        .or_default()
        .entry(key.into())
        .or_default()
        .insert(p)
}

/// Takes `p` out of key `key`'s lane, and the lane (and the topic) out
/// when that empties it; whether it was there.
fn take(of: &mut LaneMap, tid: i64, key: &str, p: Place) -> bool {
    let Some(keys) = of.get_mut(&tid) else {
        return false;
    };
    let Some(lane) = keys.get_mut(key) else {
        return false;
    };
    let was = lane.remove(&p);
    if lane.is_empty() {
        keys.remove(key);
        if keys.is_empty() {
            of.remove(&tid);
        }
    }
    was
}

impl Lanes {
    /// The job at `p` of key `key`'s lane is ready.
    pub(crate) fn add(&mut self, tid: i64, key: &str, p: Place) {
        if put(&mut self.of, tid, key, p) {
            self.log.push(LaneStep::Added(tid, key.into(), p));
        }
    }

    /// The job at `p` of key `key`'s lane is no longer ready.
    pub(crate) fn remove(&mut self, tid: i64, key: &str, p: Place) {
        if take(&mut self.of, tid, key, p) {
            self.log.push(LaneStep::Removed(tid, key.into(), p));
        }
    }

    /// Whether topic `tid` has a ready job with a key.
    pub(crate) fn any(&self, tid: i64) -> bool {
        self.of.contains_key(&tid)
    }

    /// Topic `tid`'s keys with ready jobs, in key order.
    pub(crate) fn keys(&self, tid: i64) -> Vec<String> {
        self.of
            .get(&tid)
            .map(|k| k.keys().map(|k| k.to_string()).collect())
            .unwrap_or_default()
    }

    /// The job key `key`'s lane hands out next.
    pub(crate) fn head(&self, tid: i64, key: &str) -> Option<Place> {
        self.of.get(&tid)?.get(key)?.first().copied()
    }

    /// The job each of topic `tid`'s lanes hands out next.
    pub(crate) fn heads(&self, tid: i64) -> impl Iterator<Item = Place> + '_ {
        self.of
            .get(&tid)
            .into_iter()
            .flat_map(|keys| keys.values().filter_map(|lane| lane.first().copied()))
    }

    /// Topic `tid`'s ready jobs with a key, by key then in each lane's
    /// order.
    pub(crate) fn topic(&self, tid: i64) -> impl Iterator<Item = (&str, Place)> + '_ {
        self.of.get(&tid).into_iter().flat_map(|keys| {
            keys.iter()
                .flat_map(|(k, lane)| lane.iter().map(move |p| (&**k, *p)))
        })
    }

    /// Every entry as `(tid, key, priority, due, seq)`, for comparing with
    /// the file (`Memory::check`).
    #[cfg(debug_assertions)]
    pub(crate) fn entries(&self) -> Vec<(i64, String, i64, i64, i64)> {
        self.of
            .iter()
            .flat_map(|(&tid, keys)| {
                keys.iter().flat_map(move |(k, lane)| {
                    lane.iter()
                        .map(move |&(p, d, s)| (tid, k.to_string(), p, d, s))
                })
            })
            .collect()
    }

    /// Where the log is: what [`Lanes::undo_to`] goes back to.
    pub(crate) fn mark(&self) -> usize {
        self.log.mark()
    }

    /// Undoes every change since `mark`, the latest first.
    pub(crate) fn undo_to(&mut self, mark: usize) {
        let of = &mut self.of;
        self.log.undo_to(mark, |step| match step {
            LaneStep::Added(tid, k, p) => {
                take(of, tid, &k, p);
            }
            LaneStep::Removed(tid, k, p) => {
                put(of, tid, &k, p);
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

    fn all<K: Entry>(r: &Ordered<K>) -> Vec<K> {
        r.order.iter().copied().collect()
    }

    #[test]
    fn a_topic_hands_out_by_priority_then_due_then_seq_and_alone() {
        let mut r = Ready::default();
        r.add((1, 5, 100, 10));
        r.add((1, 0, 300, 11));
        r.add((2, 0, 0, 12));
        r.add((1, 0, 300, 9));
        r.add((1, 0, 200, 13));
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
        r.remove((1, 5, 101, 10));
        assert_eq!(r.len(), 5);
        r.remove((1, 5, 100, 10));
        assert_eq!(r.first(1, 10).len(), 3);
    }

    #[test]
    fn dead_letters_come_oldest_first_within_their_topic_only() {
        let mut d = Dead::default();
        d.add((1, 500, 10));
        d.add((1, 100, 12));
        d.add((2, 50, 13));
        d.add((1, 100, 11));
        d.add((1, i64::MIN, 14));
        assert_eq!(
            d.first(1, 10),
            [(i64::MIN, 14), (100, 11), (100, 12), (500, 10)]
        );
        assert_eq!(
            d.topic(1).skip(1).take(2).collect::<Vec<_>>(),
            [(100, 11), (100, 12)]
        );
        assert_eq!(d.head(2), Some((50, 13)));
        assert_eq!(d.head(0), None);
    }

    #[test]
    fn lanes_keep_each_keys_order_and_undo_to_the_mark() {
        let mut l = Lanes::default();
        l.add(1, "b", (0, 100, 10));
        l.add(1, "a", (5, 50, 11));
        l.add(1, "a", (0, 90, 12));
        l.add(2, "a", (0, 0, 13));
        l.committed();
        assert!(l.any(1) && l.any(2) && !l.any(3));
        assert_eq!(l.keys(1), ["a", "b"]);
        assert_eq!(l.head(1, "a"), Some((0, 90, 12)));
        assert_eq!(l.head(1, "c"), None);
        assert_eq!(
            l.topic(1).collect::<Vec<_>>(),
            [("a", (0, 90, 12)), ("a", (5, 50, 11)), ("b", (0, 100, 10))]
        );
        let before = l.entries();
        let mark = l.mark();
        l.remove(1, "b", (0, 100, 10)); // the lane empties: the key goes
        l.remove(1, "b", (0, 100, 10)); // not there: nothing to undo
        l.add(1, "c", (0, 1, 14));
        l.remove(2, "a", (0, 0, 13)); // the topic empties
        assert_eq!(l.keys(1), ["a", "c"]);
        assert!(!l.any(2));
        l.undo_to(mark);
        assert_eq!(l.entries(), before);
        assert_eq!(l.keys(1), ["a", "b"]);
    }

    #[test]
    fn undo_puts_back_exactly_what_was_there_at_the_mark() {
        let mut r = Ready::default();
        r.add((1, 0, 100, 10));
        r.add((1, 0, 200, 11));
        r.committed();
        let before = all(&r);
        let mark = r.mark();
        r.add((1, 0, 300, 12)); // enqueued
        r.remove((1, 0, 100, 10)); // reserved
        r.remove((1, 0, 999, 99)); // not there: nothing to undo
        r.add((1, 0, 200, 11)); // there already: nothing to undo
        r.remove((1, 0, 200, 11)); // rescheduled…
        r.add((1, 0, 50, 11)); // …to another due time
        assert_eq!(all(&r), [(1, 0, 50, 11), (1, 0, 300, 12)]);
        r.undo_to(mark);
        assert_eq!(all(&r), before);
        // A savepoint inside: only the operation's own changes go.
        r.add((1, 0, 300, 12));
        let inner = r.mark();
        r.remove((1, 0, 100, 10));
        r.undo_to(inner);
        assert_eq!(all(&r), [(1, 0, 100, 10), (1, 0, 200, 11), (1, 0, 300, 12)]);
        r.committed();
        r.undo_to(0);
        assert_eq!(r.len(), 3);
    }
}
