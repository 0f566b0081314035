//! What the writer keeps in memory instead of in an index: the leases
//! ([`Leases`], by deadline), the ready jobs ([`Ready`] without a key, in
//! hand-out order, and [`Lanes`], each key's) and the dead letters
//! ([`Dead`], oldest first). All are read from the file when it is opened (one scan
//! of the jobs table: [`Memory::load`]) and follow the transaction: the
//! writer marks them before each operation and batch item, undoes them to
//! the mark when SQLite undoes its savepoint or the group, and forgets the
//! logs at commit (`writer::run`, `ops::leases::per_item`).

use rusqlite::Connection;

use crate::leases::Leases;
use crate::ordered::{Dead, Lanes, Ready, died_place};

#[derive(Debug, Default)]
pub(crate) struct Memory {
    pub(crate) leases: Leases,
    pub(crate) ready: Ready,
    pub(crate) lanes: Lanes,
    pub(crate) dead: Dead,
    /// Debug builds compare the memory with the file after a commit, every
    /// `check_every` commits (more rarely as the table grows).
    #[cfg(debug_assertions)]
    check_every: u64,
    #[cfg(debug_assertions)]
    commits: u64,
}

/// A point to undo every log to.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Mark {
    leases: usize,
    ready: usize,
    lanes: usize,
    dead: usize,
}

impl Memory {
    /// The leases, ready jobs and dead letters of the file `conn` has
    /// open: one scan of the table (no index holds them), reading the
    /// columns before the body (and a ready job's key).
    pub(crate) fn load(conn: &Connection) -> rusqlite::Result<Self> {
        let mut m = Memory::default();
        let mut st = conn.prepare(&format!("{ROWS} WHERE state IN (1, 2, 3)"))?;
        let mut rows = st.query([])?;
        while let Some(r) = rows.next()? {
            m.place(&Row::read(r)?);
        }
        m.committed(None);
        Ok(m)
    }

    /// Job `seq` of topic `tid`, with key `key` (or none), is ready at
    /// `priority` and `place`.
    pub(crate) fn add_ready(
        &mut self,
        tid: i64,
        key: Option<&str>,
        priority: i64,
        place: i64,
        seq: i64,
    ) {
        match key {
            None => self.ready.add((tid, priority, place, seq)),
            Some(k) => self.lanes.add(tid, k, (priority, place, seq)),
        }
    }

    /// Job `seq` is no longer ready (if it was, there).
    pub(crate) fn remove_ready(
        &mut self,
        tid: i64,
        key: Option<&str>,
        priority: i64,
        place: i64,
        seq: i64,
    ) {
        match key {
            None => self.ready.remove((tid, priority, place, seq)),
            Some(k) => self.lanes.remove(tid, k, (priority, place, seq)),
        }
    }

    /// The job lane `key` of topic `tid` (`None`: the jobs without a key)
    /// hands out next: `(priority, place, seq)`.
    pub(crate) fn ready_head(&self, tid: i64, key: Option<&str>) -> Option<(i64, i64, i64)> {
        match key {
            None => self.ready.head(tid),
            Some(k) => self.lanes.head(tid, k),
        }
    }

    /// Puts a job's row where its state says (nowhere for a scheduled job).
    fn place(&mut self, r: &Row) {
        match r.state {
            1 => self.add_ready(r.tid, r.key.as_deref(), r.priority, r.place, r.seq),
            2 => self.leases.add(r.tid, r.seq, r.deadline),
            3 => self.dead.add((r.tid, died_place(r.died), r.seq)),
            _ => {}
        }
    }

    /// Where the logs are.
    pub(crate) fn mark(&self) -> Mark {
        Mark {
            leases: self.leases.mark(),
            ready: self.ready.mark(),
            lanes: self.lanes.mark(),
            dead: self.dead.mark(),
        }
    }

    /// Undoes every change since `mark`.
    pub(crate) fn undo_to(&mut self, mark: Mark) {
        self.leases.undo_to(mark.leases);
        self.ready.undo_to(mark.ready);
        self.lanes.undo_to(mark.lanes);
        self.dead.undo_to(mark.dead);
    }

    /// Undoes every change of the current transaction.
    pub(crate) fn undo_all(&mut self) {
        self.undo_to(Mark {
            leases: 0,
            ready: 0,
            lanes: 0,
            dead: 0,
        });
    }

    /// The transaction committed: its changes stay. In debug builds (the
    /// test suite), the memory is then compared with the file: an operation
    /// that moved a job without telling the memory fails the test that
    /// ran it.
    pub(crate) fn committed(&mut self, conn: Option<&Connection>) {
        self.leases.committed();
        self.ready.committed();
        self.lanes.committed();
        self.dead.committed();
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

    /// Panics unless the memory holds exactly the file's leases, ready
    /// jobs (without a key and in each key's lane) and dead letters;
    /// returns how many rows the file has.
    #[cfg(debug_assertions)]
    fn check(&self, conn: &Connection) -> u64 {
        let mut file = Memory::default();
        let mut rows = 0;
        let mut st = conn.prepare(ROWS).expect("check: prepare");
        let mut q = st.query([]).expect("check: query");
        while let Some(r) = q.next().expect("check: row") {
            rows += 1;
            file.place(&Row::read(r).expect("check: columns"));
        }
        let all = |m: &Memory| {
            (
                m.ready.entries().copied().collect::<Vec<_>>(),
                m.leases.entries().copied().collect::<Vec<_>>(),
                m.dead.entries().copied().collect::<Vec<_>>(),
                m.lanes.entries(),
            )
        };
        let (mine, theirs) = (all(self), all(&file));
        assert_eq!(
            mine.0, theirs.0,
            "the ready jobs in memory differ from the file's"
        );
        assert_eq!(
            mine.1, theirs.1,
            "the leases in memory differ from the file's"
        );
        assert_eq!(
            mine.2, theirs.2,
            "the dead letters in memory differ from the file's"
        );
        assert_eq!(
            mine.3, theirs.3,
            "the keys' ready jobs in memory differ from the file's"
        );
        rows
    }
}

/// The columns of a job's row that place it in memory.
/// `fkey` and `put_delay_ms` are stored after the body (columns added by
/// migrations), so they are read only for a ready job, whose place and lane
/// need them: reading them reads the row's overflow pages too. A ready
/// job's `due` is its place: its put time when it is in put order.
const ROWS: &str = "SELECT seq, tid, state, priority,
    CASE WHEN state = 1 AND put_delay_ms IS NOT NULL THEN created_ms ELSE due_ms END,
    coalesce(deadline_ms, 0), CASE WHEN state = 1 THEN fkey END, died_ms FROM jobs";

/// A job's row as [`ROWS`] reads it.
struct Row {
    seq: i64,
    tid: i64,
    state: i64,
    priority: i64,
    place: i64,
    deadline: i64,
    key: Option<String>,
    died: Option<i64>,
}

impl Row {
    fn read(r: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok(Row {
            seq: r.get(0)?,
            tid: r.get(1)?,
            state: r.get(2)?,
            priority: r.get(3)?,
            place: r.get(4)?,
            deadline: r.get(5)?,
            key: r.get(6)?,
            died: r.get(7)?,
        })
    }
}
