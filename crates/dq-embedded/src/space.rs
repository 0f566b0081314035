//! Room to drain a full disk: the reserve file.
//!
//! A store whose disk fills up must still take the calls that free space —
//! acks, cancels, purges of dead letters, topic deletes — and the reserves and
//! nacks that let consumers drain it. SQLite needs free pages for those too
//! (its write-ahead log grows before the file shrinks), so the store keeps a
//! file of zeros, `dq.reserve` ([`Options::disk_reserve_bytes`], 8 MiB by
//! default), in the data directory:
//!
//! - Before each group of calls the writer reads the disk's free space
//!   (`statvfs`, about a microsecond). Below half the reserve's size, or when
//!   SQLite reports the disk full, the reserve is deleted: its space is what
//!   the draining calls use.
//! - While the reserve is released, the write-ahead log is checkpointed
//!   into the file and truncated after each group of calls, so that it
//!   holds no more than one group's pages: the disk the store does not use
//!   for its pages is free, and the drained jobs' pages are free pages of
//!   the file at once. (Otherwise the log keeps its size, 1,000 pages and
//!   more, which can be more than a small reserve: a store drained on a
//!   small disk refused enqueues until an operator deleted other files, and
//!   a store released with a short log filled the disk growing it while it
//!   drained, issue #53.)
//! - While the reserve is released, enqueues are refused with 503
//!   `store_full` unless the disk has the reserve's size free (for the
//!   draining calls' log) and the room left is at least one and a half
//!   times the reserve's size, the point at which it was released. The room
//!   is the free disk space plus the database's own free pages (which the
//!   drained jobs leave behind), less what the file still has to grow by to
//!   take the pages that are only in the log (a checkpoint that could not
//!   finish). Every other call runs.
//! - When the disk has the reserve's size twice over free again (an operator
//!   freed space), the reserve is written back and enqueues are admitted as
//!   before.
//!
//! [`Options::disk_reserve_bytes`]: crate::Options::disk_reserve_bytes

use std::io::Write;
use std::path::{Path, PathBuf};

use rusqlite::Connection;

/// The reserve file's name inside the data directory.
pub const RESERVE_FILE: &str = "dq.reserve";

/// The reserve file and whether it is held.
pub(crate) struct Space {
    dir: PathBuf,
    file: PathBuf,
    /// The database file.
    db: PathBuf,
    /// Its write-ahead log.
    log: PathBuf,
    size: u64,
    /// The reserve is released: the disk is (nearly) full.
    released: bool,
}

impl Space {
    /// Takes the reserve in `dir`, beside the database file `db` (writing it
    /// if it is missing or short). A disk without room for it starts
    /// released.
    pub(crate) fn open(dir: &Path, db: &Path, size: u64) -> Self {
        let mut s = Self {
            dir: dir.to_path_buf(),
            file: dir.join(RESERVE_FILE),
            db: db.to_path_buf(),
            log: crate::schema::wal_path(db),
            size,
            released: false,
        };
        if size == 0 {
            let _ = std::fs::remove_file(&s.file);
        } else if !s.write() {
            tracing::warn!(
                dir = %dir.display(),
                bytes = size,
                "no room for the embedded store's disk reserve: enqueues are refused until the disk has space"
            );
            s.released = true;
        }
        s
    }

    /// Before a group of calls: releases the reserve when the disk is nearly
    /// full, writes it back when there is room again.
    pub(crate) fn check(&mut self) {
        if self.size == 0 {
            return;
        }
        let Some(free) = self.free() else { return };
        if !self.released && free < self.size / 2 {
            self.release("the disk is nearly full");
        } else if self.released && free >= 2 * self.size && self.write() {
            self.released = false;
            tracing::info!(
                dir = %self.dir.display(),
                "the embedded store's disk has room again: reserve re-created, enqueues admitted"
            );
        }
    }

    /// Releases the reserve (once): its space is for the calls that drain.
    pub(crate) fn release(&mut self, why: &str) {
        if self.size == 0 || self.released {
            return;
        }
        self.released = true;
        let _ = std::fs::remove_file(&self.file);
        tracing::warn!(
            dir = %self.dir.display(),
            bytes = self.size,
            reason = why,
            "embedded store: disk reserve released; enqueues get 503 store_full until space is freed, acks, cancels, purges and deletes keep working"
        );
    }

    /// Whether an enqueue may run now.
    pub(crate) fn admits_growth(&self, conn: &Connection) -> bool {
        if !self.released || self.size == 0 {
            return true;
        }
        let free = self.free().unwrap_or(0);
        let room = free
            .saturating_add(free_pages_bytes(conn))
            .saturating_sub(self.pending_growth(conn));
        free >= self.size && room >= self.size + self.size / 2
    }

    /// After a group of calls, outside a transaction: while the reserve is
    /// released, copies the write-ahead log into the file and truncates it.
    /// A checkpoint that cannot finish (no room for the file to grow, which
    /// SQLite undoes) is tried again after the next group.
    pub(crate) fn after_group(&self, conn: &Connection) {
        if !self.released
            || self.size == 0
            || std::fs::metadata(&self.log).map_or(0, |m| m.len()) == 0
        {
            return;
        }
        match conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
            r.get::<_, i64>(0)
        }) {
            Ok(0) => {}
            Ok(_) => tracing::debug!("embedded store: a reader kept the log from being truncated"),
            Err(e) => {
                tracing::debug!(error = %e, "embedded store: checkpoint on a full disk failed")
            }
        }
    }

    /// Bytes the database file still has to grow by to hold its pages that
    /// are only in the write-ahead log (the next checkpoint writes them).
    fn pending_growth(&self, conn: &Connection) -> u64 {
        let Ok(file) = std::fs::metadata(&self.db) else {
            return 0;
        };
        pragma(conn, "page_count", 0)
            .saturating_mul(pragma(conn, "page_size", 4096))
            .saturating_sub(file.len())
    }

    /// Bytes the file system lets an unprivileged writer use.
    fn free(&self) -> Option<u64> {
        rustix::fs::statvfs(&self.dir)
            .ok()
            .map(|s| s.f_bavail.saturating_mul(s.f_frsize))
    }

    /// Writes the reserve file in full (zeros, synced); false if the disk has
    /// no room for it (a partial file is removed).
    fn write(&self) -> bool {
        if std::fs::metadata(&self.file).is_ok_and(|m| m.len() >= self.size) {
            return true;
        }
        let written = (|| -> std::io::Result<()> {
            let mut f = std::fs::File::create(&self.file)?;
            let chunk = vec![0u8; 64 * 1024];
            let mut left = self.size;
            while left > 0 {
                let n = left.min(chunk.len() as u64) as usize;
                f.write_all(&chunk[..n])?;
                left -= n as u64;
            }
            f.sync_all()
        })();
        if written.is_err() {
            let _ = std::fs::remove_file(&self.file);
        }
        written.is_ok()
    }
}

/// The database file's free pages, in bytes: room an enqueue can use without
/// the file growing.
fn free_pages_bytes(conn: &Connection) -> u64 {
    pragma(conn, "freelist_count", 0).saturating_mul(pragma(conn, "page_size", 4096))
}

/// A pragma's number (`PRAGMA <name>`), or `default` if it cannot be read.
fn pragma(conn: &Connection, name: &str, default: u64) -> u64 {
    conn.query_row(&format!("PRAGMA {name}"), [], |r| r.get::<_, i64>(0))
        .map_or(default, |v| v.max(0) as u64)
}
