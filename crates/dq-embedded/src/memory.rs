//! What the writer keeps in memory instead of in an index: the leases
//! ([`Leases`], by deadline) and the ready jobs without a key ([`Ready`], in
//! hand-out order). Both are read from the file when it is opened (one scan
//! of the jobs table: [`Memory::load`]) and follow the transaction: the
//! writer marks them before each operation and batch item, undoes them to
//! the mark when SQLite undoes its savepoint or the group, and forgets the
//! logs at commit (`writer::run`, `ops::per_item`).

use rusqlite::Connection;

use crate::leases::Leases;
use crate::ready::Ready;

#[derive(Debug, Default)]
pub(crate) struct Memory {
    pub(crate) leases: Leases,
    pub(crate) ready: Ready,
    /// Debug builds compare the memory with the file after a commit, every
    /// `check_every` commits (more rarely as the table grows).
    #[cfg(debug_assertions)]
    check_every: u64,
    #[cfg(debug_assertions)]
    commits: u64,
}

/// A point to undo both logs to.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Mark {
    leases: usize,
    ready: usize,
}

impl Memory {
    /// The leases and ready jobs of the file `conn` has open: one scan of
    /// the table (no index holds them), reading the columns before the body.
    pub(crate) fn load(conn: &Connection) -> rusqlite::Result<Self> {
        let mut m = Memory::default();
        let mut st = conn.prepare(
            "SELECT seq, tid, state, priority, due_ms, coalesce(deadline_ms, 0), fkey IS NULL
             FROM jobs WHERE state IN (1, 2)",
        )?;
        let mut rows = st.query([])?;
        while let Some(r) = rows.next()? {
            let (seq, tid, state): (i64, i64, i64) = (r.get(0)?, r.get(1)?, r.get(2)?);
            if state == 2 {
                m.leases.add(tid, seq, r.get(5)?);
            } else if r.get::<_, bool>(6)? {
                m.ready.add(tid, r.get(3)?, r.get(4)?, seq);
            }
        }
        m.committed(None);
        Ok(m)
    }

    /// Where both logs are.
    pub(crate) fn mark(&self) -> Mark {
        Mark {
            leases: self.leases.mark(),
            ready: self.ready.mark(),
        }
    }

    /// Undoes every change since `mark`.
    pub(crate) fn undo_to(&mut self, mark: Mark) {
        self.leases.undo_to(mark.leases);
        self.ready.undo_to(mark.ready);
    }

    /// Undoes every change of the current transaction.
    pub(crate) fn undo_all(&mut self) {
        self.undo_to(Mark {
            leases: 0,
            ready: 0,
        });
    }

    /// The transaction committed: its changes stay. In debug builds (the
    /// test suite), the memory is then compared with the file: an operation
    /// that moved a job without telling the memory fails the test that
    /// ran it.
    pub(crate) fn committed(&mut self, conn: Option<&Connection>) {
        self.leases.committed();
        self.ready.committed();
        #[cfg(debug_assertions)]
        if let Some(conn) = conn {
            self.commits += 1;
            if self.commits >= self.check_every {
                self.commits = 0;
                let rows = self.check(conn);
                self.check_every = (rows / 5_000).max(1);
            }
        }
        #[cfg(not(debug_assertions))]
        let _ = conn;
    }

    /// Panics unless the memory holds exactly the file's leases and ready
    /// jobs without a key; returns how many rows the file has.
    #[cfg(debug_assertions)]
    fn check(&self, conn: &Connection) -> u64 {
        let mut ready = Vec::new();
        let mut leases = Vec::new();
        let mut rows = 0;
        let mut st = conn
            .prepare(
                "SELECT seq, tid, state, priority, due_ms, coalesce(deadline_ms, 0), fkey IS NULL FROM jobs",
            )
            .expect("check: prepare");
        let mut q = st.query([]).expect("check: query");
        while let Some(r) = q.next().expect("check: row") {
            rows += 1;
            let get = |i| r.get::<_, i64>(i).expect("check: column");
            match get(2) {
                1 if get(6) == 1 => ready.push((get(1), get(3), get(4), get(0))),
                2 => leases.push((get(1), get(5), get(0))),
                _ => {}
            }
        }
        ready.sort_unstable();
        leases.sort_unstable();
        let mem_ready: Vec<_> = self.ready.entries().copied().collect();
        let mem_leases: Vec<_> = self.leases.entries().copied().collect();
        assert_eq!(
            mem_ready, ready,
            "the ready jobs in memory differ from the file's"
        );
        assert_eq!(
            mem_leases, leases,
            "the leases in memory differ from the file's"
        );
        rows
    }
}
