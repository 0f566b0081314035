//! An ordered set that is cheap to add to in order: the writer's in-memory
//! queue orders ([`crate::ordered::Ordered`], [`crate::leases::Leases`]).
//!
//! Their entries start with a topic id and mostly arrive in order within
//! their topic: a topic's ready jobs are `(tid, priority, due, seq)` with
//! `seq` growing, the jobs of one reserve share one lease deadline, and the
//! file's scan at open reads rows by `seq`. A `BTreeSet` searches from its
//! root for every insert even when the entry goes last (what that cost:
//! docs/performance-log.md, "Appending in order, and a shorter insert").
//! Here each topic has a tail, a sorted
//! `VecDeque` that an entry larger than every other entry of its topic is
//! appended to for the cost of one comparison; any other entry goes into
//! one `BTreeSet`, the rest, and a topic's entries are read by merging its
//! tail with its part of the rest. Nothing ever moves from one to the
//! other, so no operation costs more than a B-tree's search and a shift of
//! at most [`NEAR`] slots, except the compaction below (amortized).
//!
//! Removing a tail's first or last entry pops it; any other entry is
//! marked removed where it is (no shift), and the tail is compacted when
//! more than half of it is marked (after a mark or a pop), so a read steps
//! over at most as many marked slots as it has live ones in its tail. Tails are per topic so that one topic's
//! entries that stay (a paused topic's backlog, a dead letter) never sit in
//! front of another's: a reserve reads its topic's first entries without
//! stepping over anything but its own topic's marked slots.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::iter::Peekable;
use std::ops::{Bound, RangeBounds};

/// How far from an end of its tail an entry inside the tail's range is put
/// in place (a shift of at most this many slots) rather than into the rest.
const NEAR: usize = 32;

/// A tail this long with less than a quarter of it used gives memory back.
const SHRINK_FROM: usize = 4096;

/// An entry: ordered, its topic id first.
pub(crate) trait Grouped: Ord + Copy {
    fn group(&self) -> i64;
    /// The smallest and the largest entry of topic `group`.
    fn ends(group: i64) -> (Self, Self);
}

impl Grouped for (i64, i64, i64, i64) {
    fn group(&self) -> i64 {
        self.0
    }
    fn ends(g: i64) -> (Self, Self) {
        (
            (g, i64::MIN, i64::MIN, i64::MIN),
            (g, i64::MAX, i64::MAX, i64::MAX),
        )
    }
}

impl Grouped for (i64, i64, i64) {
    fn group(&self) -> i64 {
        self.0
    }
    fn ends(g: i64) -> (Self, Self) {
        ((g, i64::MIN, i64::MIN), (g, i64::MAX, i64::MAX))
    }
}

#[cfg(test)]
impl Grouped for (i64, i64) {
    fn group(&self) -> i64 {
        self.0
    }
    fn ends(g: i64) -> (Self, Self) {
        ((g, i64::MIN), (g, i64::MAX))
    }
}

/// See the module's documentation.
#[derive(Debug)]
pub(crate) struct Sorted<K> {
    /// Each topic's tail, while it has one.
    tails: BTreeMap<i64, Tail<K>>,
    /// Every entry not in a tail.
    rest: BTreeSet<K>,
    /// For each topic with entries in the rest: how many, and the largest
    /// entry it ever held since it last had none (so an entry above it
    /// cannot be in the rest).
    in_rest: BTreeMap<i64, (usize, K)>,
}

/// One topic's tail: strictly increasing; `true` where the entry is still
/// in the set. Its first and last slots are always in it.
#[derive(Debug)]
struct Tail<K> {
    slots: VecDeque<(K, bool)>,
    /// How many slots are marked removed.
    removed: usize,
}

impl<K> Default for Sorted<K> {
    fn default() -> Self {
        Self {
            tails: BTreeMap::new(),
            rest: BTreeSet::new(),
            in_rest: BTreeMap::new(),
        }
    }
}

impl<K: Grouped> Sorted<K> {
    /// Adds `k`; whether it was not in the set.
    pub(crate) fn insert(&mut self, k: K) -> bool {
        let g = k.group();
        let above_rest = self.in_rest.get(&g).is_none_or(|(_, max)| k > *max);
        let Some(tail) = self.tails.get_mut(&g) else {
            if !above_rest {
                return self.put_in_rest(k);
            }
            let mut slots = VecDeque::new();
            slots.push_back((k, true));
            self.tails.insert(g, Tail { slots, removed: 0 });
            return true;
        };
        let (first, last) = (tail.slots[0].0, tail.slots[tail.slots.len() - 1].0);
        if k > last && above_rest {
            tail.slots.push_back((k, true));
            return true;
        }
        if k < first || k > last {
            return self.put_in_rest(k);
        }
        match tail.slots.binary_search_by(|(e, _)| e.cmp(&k)) {
            Ok(i) => {
                let kept = &mut tail.slots[i].1;
                if *kept {
                    return false;
                }
                *kept = true;
                tail.removed -= 1;
                true
            }
            // Not in the tail, so in the rest or nowhere.
            Err(i) if above_rest && i.min(tail.slots.len() - i) <= NEAR => {
                tail.slots.insert(i, (k, true));
                true
            }
            Err(_) => self.put_in_rest(k),
        }
    }

    /// Takes `k` out; whether it was in the set.
    pub(crate) fn remove(&mut self, k: &K) -> bool {
        let g = k.group();
        if let Some(tail) = self.tails.get_mut(&g) {
            let last = tail.slots.len() - 1;
            if *k == tail.slots[0].0 {
                tail.slots.pop_front();
                self.trim(g);
                return true;
            }
            if *k > tail.slots[0].0
                && *k <= tail.slots[last].0
                && let Ok(i) = tail.slots.binary_search_by(|(e, _)| e.cmp(k))
            {
                if !tail.slots[i].1 {
                    return false;
                }
                if i == last {
                    tail.slots.pop_back();
                    self.trim(g);
                    return true;
                }
                tail.slots[i].1 = false;
                tail.removed += 1;
                if tail.compact_past_half() {
                    tail.give_back();
                }
                return true;
            }
        }
        if !self.rest.remove(k) {
            return false;
        }
        if let Some((n, _)) = self.in_rest.get_mut(&g) {
            *n -= 1;
            if *n == 0 {
                self.in_rest.remove(&g);
            }
        }
        true
    }

    /// Topic `group`'s entries within `range`, in order (an unbounded end
    /// is the topic's end; bounds of another topic mean nothing here).
    pub(crate) fn range_in<R: RangeBounds<K>>(
        &self,
        group: i64,
        range: R,
    ) -> impl Iterator<Item = &K> {
        let (lo, hi) = K::ends(group);
        let start = match range.start_bound() {
            Bound::Unbounded => Bound::Included(lo),
            b => b.cloned(),
        };
        let end = match range.end_bound() {
            Bound::Unbounded => Bound::Included(hi),
            b => b.cloned(),
        };
        let tail = self.tails.get(&group).map(|tail| {
            let slots = &tail.slots;
            let from = match start {
                Bound::Excluded(k) => slots.partition_point(|(e, _)| *e <= k),
                Bound::Included(k) => slots.partition_point(|(e, _)| *e < k),
                Bound::Unbounded => 0,
            };
            let to = match end {
                Bound::Included(k) => slots.partition_point(|(e, _)| *e <= k),
                Bound::Excluded(k) => slots.partition_point(|(e, _)| *e < k),
                Bound::Unbounded => slots.len(),
            };
            slots.range(from..to.max(from))
        });
        // An empty or reversed range reads nothing (`BTreeSet::range` would
        // panic on it).
        let reversed = match (start, end) {
            (Bound::Included(a), Bound::Included(b)) => a > b,
            (Bound::Included(a) | Bound::Excluded(a), Bound::Included(b) | Bound::Excluded(b)) => {
                a >= b
            }
            _ => false,
        };
        let rest =
            (self.in_rest.contains_key(&group) && !reversed).then(|| self.rest.range((start, end)));
        Merge {
            a: tail
                .into_iter()
                .flatten()
                .filter(|(_, kept)| *kept)
                .map(|(e, _)| e)
                .peekable(),
            b: rest.into_iter().flatten().peekable(),
        }
    }

    /// Every entry, in order (for checks: debug builds and tests).
    #[cfg(any(debug_assertions, test))]
    pub(crate) fn iter(&self) -> impl Iterator<Item = &K> {
        Merge {
            a: self
                .tails
                .values()
                .flat_map(|t| t.slots.iter())
                .filter(|(_, kept)| *kept)
                .map(|(e, _)| e)
                .peekable(),
            b: self.rest.iter().peekable(),
        }
    }

    /// How many entries.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.rest.len()
            + self
                .tails
                .values()
                .map(|t| t.slots.len() - t.removed)
                .sum::<usize>()
    }

    /// Puts `k` into the rest; whether it was not there.
    fn put_in_rest(&mut self, k: K) -> bool {
        if !self.rest.insert(k) {
            return false;
        }
        let e = self.in_rest.entry(k.group()).or_insert((0, k));
        e.0 += 1;
        e.1 = e.1.max(k);
        true
    }

    /// Drops the slots marked removed from both ends of topic `g`'s tail,
    /// and the tail when it is empty.
    fn trim(&mut self, g: i64) {
        let Some(tail) = self.tails.get_mut(&g) else {
            return;
        };
        while tail.slots.front().is_some_and(|(_, kept)| !kept) {
            tail.slots.pop_front();
            tail.removed -= 1;
        }
        while tail.slots.back().is_some_and(|(_, kept)| !kept) {
            tail.slots.pop_back();
            tail.removed -= 1;
        }
        if tail.slots.is_empty() {
            self.tails.remove(&g);
        } else {
            tail.compact_past_half();
            tail.give_back();
        }
    }
}

impl<K> Tail<K> {
    /// Drops the marked slots once they are more than half the tail (so a
    /// read steps over at most as many marked slots as live ones); whether
    /// it did.
    fn compact_past_half(&mut self) -> bool {
        if self.removed * 2 <= self.slots.len() {
            return false;
        }
        self.slots.retain(|(_, kept)| *kept);
        self.removed = 0;
        true
    }

    /// A long tail mostly taken out gives back its memory.
    fn give_back(&mut self) {
        if self.slots.capacity() >= SHRINK_FROM && self.slots.len() < self.slots.capacity() / 4 {
            self.slots.shrink_to(self.slots.len() * 2);
        }
    }
}

/// Two increasing iterators of disjoint entries, merged.
struct Merge<'k, K: 'k, A: Iterator<Item = &'k K>, B: Iterator<Item = &'k K>> {
    a: Peekable<A>,
    b: Peekable<B>,
}

impl<'k, K: Ord + 'k, A: Iterator<Item = &'k K>, B: Iterator<Item = &'k K>> Iterator
    for Merge<'k, K, A, B>
{
    type Item = &'k K;

    fn next(&mut self) -> Option<&'k K> {
        match (self.a.peek(), self.b.peek()) {
            (Some(a), Some(b)) if b < a => self.b.next(),
            (Some(_), _) => self.a.next(),
            (None, _) => self.b.next(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checks the invariants the operations rely on.
    fn check(s: &Sorted<(i64, i64)>) {
        for (g, t) in &s.tails {
            assert!(!t.slots.is_empty(), "an empty tail is dropped");
            for w in t.slots.iter().collect::<Vec<_>>().windows(2) {
                assert!(w[0].0 < w[1].0, "a tail is strictly increasing");
            }
            assert!(t.slots.iter().all(|(e, _)| e.0 == *g), "of its topic");
            assert!(
                t.slots[0].1 && t.slots[t.slots.len() - 1].1,
                "its ends are in the set"
            );
            assert_eq!(t.removed, t.slots.iter().filter(|(_, kept)| !kept).count());
            assert!(t.removed * 2 <= t.slots.len(), "compacted past half");
            for (e, _) in &t.slots {
                assert!(!s.rest.contains(e), "{e:?} in a tail and the rest");
            }
        }
        let mut counts: BTreeMap<i64, usize> = BTreeMap::new();
        for e in &s.rest {
            *counts.entry(e.0).or_default() += 1;
            assert!(
                *e <= s.in_rest[&e.0].1,
                "the rest's largest of {e:?}'s topic"
            );
        }
        let known: BTreeMap<i64, usize> = s.in_rest.iter().map(|(g, (n, _))| (*g, *n)).collect();
        assert_eq!(counts, known);
    }

    /// Random inserts, removes and range reads over four topics, mostly in
    /// order within a topic as the queue's are, some anywhere: the set
    /// answers as a `BTreeSet` does.
    #[test]
    fn answers_as_a_btree_set_does() {
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..30 {
            let mut s = Sorted::default();
            let mut model = BTreeSet::new();
            let mut counter = [0i64; 4];
            // Some rounds mostly append and take from either end, others
            // (`anywhere` 3) insert and take anywhere, so that marks pile up
            // and tails are compacted.
            let anywhere = next() % 4;
            for _ in 0..4_000 {
                let r = next();
                let g = (r % 4) as i64;
                let pick = |n: u64, c: i64| (n % (c as u64 + 3)) as i64 - 1;
                match (r >> 8) % 12 {
                    0..=3 => {
                        counter[g as usize] += 1 + (next() % 2) as i64;
                        let k = (g, counter[g as usize]);
                        assert_eq!(s.insert(k), model.insert(k), "insert {k:?}");
                    }
                    4..=5 => {
                        if next() % 4 < anywhere {
                            let k = (g, pick(next(), counter[g as usize]));
                            assert_eq!(s.insert(k), model.insert(k), "insert {k:?}");
                        }
                    }
                    6..=7 if anywhere < 3 => {
                        let first = model.range((g, i64::MIN)..=(g, i64::MAX)).next().copied();
                        if let Some(k) = first {
                            assert!(s.remove(&k), "remove {k:?}");
                            model.remove(&k);
                        }
                    }
                    6..=9 => {
                        let k = (g, pick(next(), counter[g as usize]));
                        assert_eq!(s.remove(&k), model.remove(&k), "remove {k:?}");
                    }
                    10 if anywhere < 3 => {
                        let last = model
                            .range((g, i64::MIN)..=(g, i64::MAX))
                            .next_back()
                            .copied();
                        if let Some(k) = last {
                            assert!(s.remove(&k), "remove {k:?}");
                            model.remove(&k);
                        }
                    }
                    10 => {}
                    _ => {
                        let (lo, hi) = ((g, i64::MIN), (g, i64::MAX));
                        assert!(s.range_in(g, lo..=hi).eq(model.range(lo..=hi)));
                        let cut = (g, pick(next(), counter[g as usize]));
                        assert!(s.range_in(g, lo..cut).eq(model.range(lo..cut)));
                        assert!(s.range_in(g, cut..=hi).eq(model.range(cut..=hi)));
                        let after = (Bound::Excluded(cut), Bound::Included(hi));
                        assert!(s.range_in(g, after).eq(model.range(after)));
                    }
                }
                check(&s);
                assert_eq!(s.len(), model.len());
            }
            assert!(s.iter().eq(model.iter()));
        }
    }

    #[test]
    fn entries_in_order_stay_in_their_tail_and_leave_from_its_front() {
        let mut s = Sorted::default();
        for seq in 0..10_000 {
            assert!(s.insert((1i64, seq)));
        }
        assert!(s.rest.is_empty());
        assert_eq!(s.tails[&1].slots.len(), 10_000);
        // Most taken from the middle: marked, then compacted past half.
        for seq in (1..9_999).filter(|seq| seq % 10 != 0) {
            assert!(s.remove(&(1, seq)));
            assert!(!s.remove(&(1, seq)));
            check(&s);
        }
        assert!(s.tails[&1].slots.len() <= 2 * 1_001);
        assert_eq!(s.len(), 1_001);
        // A marked slot comes back.
        assert!(s.insert((1, 9_995)));
        assert!(!s.insert((1, 9_995)));
        assert!(s.range_in(1, ..).any(|e| *e == (1, 9_995)));
        check(&s);
        for seq in 0..10_000 {
            let was = seq % 10 == 0 || seq == 9_999 || seq == 9_995;
            assert_eq!(s.remove(&(1, seq)), was, "{seq}");
        }
        assert_eq!(s.len(), 0);
        assert!(s.tails.is_empty());
        // One topic's entry that stays in front of the tail's range takes
        // nothing from another topic's tail: taking topic 2's first entries
        // pops them.
        assert!(s.insert((1, 0)));
        for seq in 0..5_000 {
            assert!(s.insert((2, seq)));
        }
        for seq in 0..4_000 {
            assert_eq!(s.range_in(2, (2, i64::MIN)..).next(), Some(&(2, seq)));
            assert!(s.remove(&(2, seq)));
        }
        assert_eq!(s.tails[&2].removed, 0);
        assert_eq!(s.tails[&2].slots.len(), 1_000);
        // Memory given back as the tail emptied.
        assert!(s.tails[&2].slots.capacity() < SHRINK_FROM);
        // Inside the tail's range, away from its ends: into the rest.
        for seq in 0..1_000 {
            assert!(s.insert((3, seq * 2)));
        }
        assert!(s.insert((3, 1_001)));
        assert_eq!(s.tails[&3].slots.len(), 1_000);
        assert!(s.rest.contains(&(3, 1_001)));
        // Near an end: in place.
        assert!(s.insert((3, 1_995)));
        assert_eq!(s.tails[&3].slots.len(), 1_001);
        // Above the tail but not above the rest of its topic: an entry
        // put into the rest from inside the tail's range, then the tail's
        // end taken below it.
        let mut t = Sorted::default();
        for seq in 0..100 {
            assert!(t.insert((5, seq * 10)));
        }
        assert!(t.insert((5, 505)));
        assert!(t.rest.contains(&(5, 505)));
        for seq in (40..100).rev() {
            assert!(t.remove(&(5, seq * 10)));
        }
        assert_eq!(t.tails[&5].slots.back(), Some(&((5, 390), true)));
        assert!(!t.insert((5, 505)), "already in the rest");
        assert!(t.insert((5, 400)), "above the tail, below the rest's 505");
        assert!(t.rest.contains(&(5, 400)));
        assert!(t.insert((5, 600)));
        assert_eq!(t.tails[&5].slots.back(), Some(&((5, 600), true)));
        let top: Vec<_> = t.range_in(5, (5, 385)..).copied().collect();
        assert_eq!(top, [(5, 390), (5, 400), (5, 505), (5, 600)]);
        // The tail gone while the rest holds some of its topic.
        for seq in 0..40 {
            assert!(t.remove(&(5, seq * 10)));
        }
        assert!(t.remove(&(5, 600)));
        assert!(t.tails.is_empty());
        assert!(!t.insert((5, 400)), "already in the rest");
        assert!(t.insert((5, 700)));
        assert!(t.range_in(5, ..).eq([(5, 400), (5, 505), (5, 700)].iter()));
        check(&t);
        check(&s);

        // Marks left past half by popping an end are compacted too.
        let mut m = Sorted::default();
        for seq in 0..=5 {
            assert!(m.insert((1, seq)));
        }
        for seq in [2, 3, 4, 0] {
            assert!(m.remove(&(1, seq)));
            check(&m);
        }
        assert_eq!(m.tails[&1].removed, 0);
        assert!(m.range_in(1, ..).eq([(1, 1), (1, 5)].iter()));

        // A range of one topic never reads another's entries, in its tail
        // or in the rest, whatever its bounds; an empty or reversed range
        // reads nothing.
        let mut r = Sorted::default();
        for seq in 0..100 {
            assert!(r.insert((1, seq * 10)));
            assert!(r.insert((2, seq * 10)));
        }
        for k in [(1, 505), (2, 505), (2, -5), (0, 7), (3, 1)] {
            assert!(r.insert(k));
        }
        assert!(!r.rest.is_empty());
        let one: Vec<_> = r.range_in(1, ..).copied().collect();
        assert_eq!(one.len(), 101);
        assert!(one.iter().all(|e| e.0 == 1));
        assert!(one.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(
            r.range_in(2, ..(2, 0)).copied().collect::<Vec<_>>(),
            [(2, -5)]
        );
        assert_eq!(r.range_in(2, (2, 990)..).count(), 1);
        assert_eq!(r.range_in(2, (2, 600)..(2, 500)).count(), 0);
        assert_eq!(r.range_in(2, (2, 505)..(2, 505)).count(), 0);
        let empty = (Bound::Excluded((2, 505)), Bound::Excluded((2, 505)));
        assert_eq!(r.range_in(2, empty).count(), 0);
        assert_eq!(r.range_in(2, (2, 505)..=(2, 505)).count(), 1);
        check(&r);
    }
}
