//! An ordered set that is cheap to add to in order: the writer's in-memory
//! queue orders ([`crate::ordered::Ordered`], [`crate::leases::Leases`]).
//!
//! Their entries mostly arrive in order: a topic's ready jobs are
//! `(tid, priority, due, seq)` with `seq` growing, the jobs of one reserve
//! share one lease deadline, and the file's scan at open reads rows by
//! `seq`. A `BTreeSet` searches from its root for every insert even when
//! the entry goes last (≈ 1,000 instructions per ready job, ≈ 600 per
//! lease: 4 % of the writer's instructions per lifecycle). Here entries
//! larger than every other one go to the end of a sorted `VecDeque`, the
//! tail, for the cost of one comparison; anything else goes into the
//! B-tree, whose entries are all smaller than the tail's.
//!
//! Removing the tail's first or last entry pops it; any other is marked
//! removed where it is (so a remove costs no shift), and the tail is
//! compacted when half of it is marked. An entry added inside the tail's
//! range, away from its ends, moves the tail into the B-tree first (each
//! entry moves at most once, so that costs no more, over time, than the
//! B-tree inserts the tail saved). The tail is one for all topics: with
//! several topics growing at once, the one with the largest id appends to
//! it and the others insert into the B-tree, as before.

use std::collections::{BTreeSet, VecDeque};
use std::ops::{Bound, RangeBounds};

/// How far from an end of the tail an entry is still put in place (a shift
/// of at most this many entries) rather than moving the tail out.
const NEAR: usize = 32;

/// A tail this long with less than a quarter of it used gives memory back.
const SHRINK_FROM: usize = 4096;

/// See the module's documentation.
#[derive(Debug)]
pub(crate) struct Sorted<K> {
    /// Every entry smaller than the tail's first.
    tree: BTreeSet<K>,
    /// Strictly increasing; `true` where the entry is still in the set.
    /// Its first and last entries are always in it.
    tail: VecDeque<(K, bool)>,
    /// How many of the tail's entries are marked removed.
    removed: usize,
}

impl<K> Default for Sorted<K> {
    fn default() -> Self {
        Self {
            tree: BTreeSet::new(),
            tail: VecDeque::new(),
            removed: 0,
        }
    }
}

impl<K: Ord + Copy> Sorted<K> {
    /// Adds `k`; whether it was not in the set.
    pub(crate) fn insert(&mut self, k: K) -> bool {
        let (Some(&(first, _)), Some(&(last, _))) = (self.tail.front(), self.tail.back()) else {
            if self.tree.last().is_some_and(|l| k <= *l) {
                return self.tree.insert(k);
            }
            self.tail.push_back((k, true));
            return true;
        };
        if k > last {
            self.tail.push_back((k, true));
            return true;
        }
        if k < first {
            return self.tree.insert(k);
        }
        match self.tail.binary_search_by(|(e, _)| e.cmp(&k)) {
            Ok(i) => {
                let kept = &mut self.tail[i].1;
                if *kept {
                    return false;
                }
                *kept = true;
                self.removed -= 1;
                true
            }
            Err(i) if i.min(self.tail.len() - i) <= NEAR => {
                self.tail.insert(i, (k, true));
                true
            }
            Err(_) => {
                self.spill();
                self.tree.insert(k)
            }
        }
    }

    /// Takes `k` out; whether it was in the set.
    pub(crate) fn remove(&mut self, k: &K) -> bool {
        let Some(&(first, _)) = self.tail.front() else {
            return self.tree.remove(k);
        };
        if *k < first {
            return self.tree.remove(k);
        }
        if *k == first {
            self.tail.pop_front();
            self.trim();
            return true;
        }
        let Ok(i) = self.tail.binary_search_by(|(e, _)| e.cmp(k)) else {
            return false;
        };
        if !self.tail[i].1 {
            return false;
        }
        if i + 1 == self.tail.len() {
            self.tail.pop_back();
            self.trim();
            return true;
        }
        self.tail[i].1 = false;
        self.removed += 1;
        if self.removed * 2 > self.tail.len() {
            self.tail.retain(|(_, kept)| *kept);
            self.removed = 0;
            self.give_back();
        }
        true
    }

    /// The entries within `range`, in order.
    pub(crate) fn range<R: RangeBounds<K>>(&self, range: R) -> impl Iterator<Item = &K> {
        let from = match range.start_bound() {
            Bound::Included(k) => self.tail.partition_point(|(e, _)| e < k),
            Bound::Excluded(k) => self.tail.partition_point(|(e, _)| e <= k),
            Bound::Unbounded => 0,
        };
        let to = match range.end_bound() {
            Bound::Included(k) => self.tail.partition_point(|(e, _)| e <= k),
            Bound::Excluded(k) => self.tail.partition_point(|(e, _)| e < k),
            Bound::Unbounded => self.tail.len(),
        };
        self.tree.range(range).chain(
            self.tail
                .range(from..to.max(from))
                .filter(|(_, kept)| *kept)
                .map(|(e, _)| e),
        )
    }

    /// Every entry, in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &K> {
        self.range(..)
    }

    /// How many entries.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.tree.len() + self.tail.len() - self.removed
    }

    /// Drops the entries marked removed from both ends of the tail.
    fn trim(&mut self) {
        while self.tail.front().is_some_and(|(_, kept)| !kept) {
            self.tail.pop_front();
            self.removed -= 1;
        }
        while self.tail.back().is_some_and(|(_, kept)| !kept) {
            self.tail.pop_back();
            self.removed -= 1;
        }
        self.give_back();
    }

    /// A long tail mostly taken out gives back its memory.
    fn give_back(&mut self) {
        if self.tail.capacity() >= SHRINK_FROM && self.tail.len() < self.tail.capacity() / 4 {
            self.tail.shrink_to(self.tail.len() * 2);
        }
    }

    /// Moves the tail into the B-tree.
    fn spill(&mut self) {
        self.tree.extend(
            self.tail
                .drain(..)
                .filter(|(_, kept)| *kept)
                .map(|(e, _)| e),
        );
        self.removed = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checks the invariants the operations rely on.
    fn check(s: &Sorted<(i64, i64)>) {
        for w in s.tail.iter().collect::<Vec<_>>().windows(2) {
            assert!(w[0].0 < w[1].0, "the tail is strictly increasing");
        }
        if let (Some(t), Some(f)) = (s.tree.last(), s.tail.front()) {
            assert!(*t < f.0, "the tree's entries are below the tail's");
        }
        if let (Some(f), Some(b)) = (s.tail.front(), s.tail.back()) {
            assert!(f.1 && b.1, "the tail's ends are in the set");
        }
        assert_eq!(s.removed, s.tail.iter().filter(|(_, kept)| !kept).count());
    }

    /// Random inserts, removes and range reads, mostly in order as the
    /// queue's are, some anywhere: the set answers as a `BTreeSet` does.
    #[test]
    fn answers_as_a_btree_set_does() {
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..40 {
            let mut s = Sorted::default();
            let mut model = BTreeSet::new();
            let mut counter = 0i64;
            for _ in 0..3_000 {
                let r = next();
                let tid = (r % 3) as i64;
                match (r >> 8) % 10 {
                    // In order: the next `seq`, in one of three topics.
                    0..=3 => {
                        counter += 1;
                        let k = (tid + round % 2, counter);
                        assert_eq!(s.insert(k), model.insert(k), "insert {k:?}");
                    }
                    // Anywhere, often an entry that is there or was.
                    4 => {
                        let k = (tid, (next() % (counter as u64 + 2)) as i64);
                        assert_eq!(s.insert(k), model.insert(k), "insert {k:?}");
                    }
                    // The first of a topic, as a reserve takes it.
                    5..=6 => {
                        let lo = (tid, i64::MIN);
                        let first = model.range(lo..).next().copied();
                        if let Some(k) = first {
                            assert_eq!(s.remove(&k), model.remove(&k), "remove {k:?}");
                        }
                    }
                    // Anywhere.
                    7..=8 => {
                        let k = (tid, (next() % (counter as u64 + 2)) as i64);
                        assert_eq!(s.remove(&k), model.remove(&k), "remove {k:?}");
                    }
                    _ => {
                        let (lo, hi) = ((tid, i64::MIN), (tid, i64::MAX));
                        assert!(s.range(lo..=hi).eq(model.range(lo..=hi)));
                        let cut = (tid, (next() % (counter as u64 + 2)) as i64);
                        assert!(s.range(lo..cut).eq(model.range(lo..cut)));
                        assert!(s.range(cut..).eq(model.range(cut..)));
                    }
                }
                check(&s);
                assert_eq!(s.len(), model.len());
            }
            assert!(s.iter().eq(model.iter()));
        }
    }

    #[test]
    fn entries_in_order_stay_in_the_tail_and_leave_from_its_front() {
        let mut s = Sorted::default();
        for seq in 0..10_000 {
            assert!(s.insert((1i64, seq)));
        }
        assert!(s.tree.is_empty());
        assert_eq!(s.tail.len(), 10_000);
        // Removed in the order they went in, and a few from the middle.
        for seq in [5_000, 5_001, 7_000] {
            assert!(s.remove(&(1, seq)));
            assert!(!s.remove(&(1, seq)));
        }
        for seq in 0..10_000 {
            assert_eq!(s.remove(&(1, seq)), ![5_000, 5_001, 7_000].contains(&seq));
        }
        assert_eq!(s.len(), 0);
        assert!(s.tail.is_empty());
        assert_eq!(s.removed, 0);
        // Its memory given back once it emptied.
        assert!(s.tail.capacity() < SHRINK_FROM);
        // One far inside the tail's range: the tail moves into the tree.
        for seq in 0..1_000 {
            s.insert((1, seq * 2));
        }
        assert!(s.insert((1, 1_001)));
        assert_eq!(s.tail.len(), 0);
        assert_eq!(s.tree.len(), 1_001);
        // Larger than everything: the tail again.
        assert!(s.insert((2, 0)));
        assert_eq!(s.tail.len(), 1);
        check(&s);
    }
}
