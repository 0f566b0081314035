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
//! - While the reserve is released, enqueues are refused with 503
//!   `store_full` unless the room left (free disk space plus the database's
//!   own free pages, which the drained jobs leave behind) is more than twice
//!   the reserve's size. Every other call runs.
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
    size: u64,
    /// The reserve is released: the disk is (nearly) full.
    released: bool,
}

impl Space {
    /// Takes the reserve in `dir` (writing it if it is missing or short). A
    /// disk without room for it starts released.
    pub(crate) fn open(dir: &Path, size: u64) -> Self {
        let mut s = Self {
            dir: dir.to_path_buf(),
            file: dir.join(RESERVE_FILE),
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
        free.saturating_add(free_pages_bytes(conn)) >= 2 * self.size
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
    let pages: i64 = conn
        .query_row("PRAGMA freelist_count", [], |r| r.get(0))
        .unwrap_or(0);
    let size: i64 = conn
        .query_row("PRAGMA page_size", [], |r| r.get(0))
        .unwrap_or(4096);
    (pages.max(0) as u64).saturating_mul(size.max(0) as u64)
}
