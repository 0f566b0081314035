//! Backups of a data directory, and restoring one.
//!
//! A backup is SQLite's online backup API reading the live file through a
//! connection of its own, never a file copy: the copy is consistent (one
//! snapshot: the connection holds a read transaction for the whole copy),
//! and the store's writer goes on committing meanwhile — in WAL mode a reader
//! blocks no writer; the log only grows until the copy ends. Pages are
//! copied [`PAGES_PER_STEP`] at a time so progress can be shown.
//!
//! The copy is written to a temporary file beside its destination, checked
//! (`PRAGMA quick_check`), synced, and only then given its name, so a file
//! under the destination's name is always a whole backup. A backup is one
//! self-contained file (rollback-journal mode; dq switches it back to WAL
//! when it opens it).
//!
//! [`backup`] refuses a destination that exists; [`restore`] refuses a
//! data directory that is not empty unless forced, and one in use always.

use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rusqlite::backup::{Backup, StepResult};
use rusqlite::{Connection, OpenFlags};

use crate::{DB_FILE, OpenError, schema};

/// Pages (4 KiB each) copied per step: 4 MiB.
pub const PAGES_PER_STEP: i32 = 1024;

/// How far a copy is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Pages copied so far.
    pub copied: u64,
    /// Pages of the database.
    pub total: u64,
}

/// What a finished backup or restore wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// The file written.
    pub path: PathBuf,
    /// Its size.
    pub bytes: u64,
    /// Its pages.
    pub pages: u64,
    /// The schema version of the data copied.
    pub schema_version: i64,
    /// How long the copy took.
    pub took: Duration,
}

/// Why a backup or a restore did not happen.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// The data directory holds no dq data file.
    #[error("{dir} holds no dq data file ({DB_FILE}); is --data-dir right?")]
    NoStore {
        /// The directory.
        dir: PathBuf,
    },
    /// The destination exists: backups never overwrite.
    #[error("{path} exists; a backup never overwrites a file: choose a new name")]
    Exists {
        /// The destination.
        path: PathBuf,
    },
    /// A restore into a directory that is not empty, without `force`.
    #[error(
        "data directory {dir} is not empty (it holds {found}); restore into an empty directory, or pass --force to replace its data"
    )]
    NotEmpty {
        /// The directory.
        dir: PathBuf,
        /// A few of its entries.
        found: String,
    },
    /// The file (data file or backup) cannot be used: foreign, damaged,
    /// newer than this dq, or the directory is in use.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// A file cannot be created, read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// SQLite failed during the copy, or the copy did not check out.
    #[error("copying into {path} failed: {reason}")]
    Copy {
        /// The file being written.
        path: PathBuf,
        /// SQLite's words.
        reason: String,
    },
}

/// Where [`copy`] puts its finished file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// Under the destination's name only if nothing is there.
    New,
    /// Over whatever is there.
    Replace,
}

/// Copies the database of `src` into `dest` with the online backup API,
/// calling `progress` after each step; returns the pages copied.
///
/// A read transaction open on `src` is kept, so the copy is that snapshot
/// whatever other connections commit meanwhile.
pub(crate) fn copy(
    src: &Connection,
    dest: &Path,
    place: Place,
    progress: &mut dyn FnMut(Progress),
) -> Result<u64, BackupError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| BackupError::Io { path, source }
    };
    if place == Place::New && dest.symlink_metadata().is_ok() {
        return Err(BackupError::Exists {
            path: dest.to_path_buf(),
        });
    }
    let tmp = temp_beside(dest);
    // Jobs are the business's data: readable by dq's user alone, whatever
    // the umask (SQLite gives its journal the same mode).
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(io(&tmp))?;
    let result = copy_into(src, &tmp, progress).and_then(|pages| {
        File::open(&tmp)
            .and_then(|f| f.sync_all())
            .map_err(io(&tmp))?;
        match place {
            // A hard link never replaces: a file that appeared meanwhile wins.
            Place::New => std::fs::hard_link(&tmp, dest).map_err(|e| {
                if e.kind() == std::io::ErrorKind::AlreadyExists {
                    BackupError::Exists {
                        path: dest.to_path_buf(),
                    }
                } else {
                    io(dest)(e)
                }
            })?,
            Place::Replace => std::fs::rename(&tmp, dest).map_err(io(dest))?,
        }
        sync_dir(dest);
        Ok(pages)
    });
    let _ = std::fs::remove_file(&tmp);
    result
}

fn copy_into(
    src: &Connection,
    tmp: &Path,
    progress: &mut dyn FnMut(Progress),
) -> Result<u64, BackupError> {
    let failed = |e: rusqlite::Error| BackupError::Copy {
        path: tmp.to_path_buf(),
        reason: e.to_string(),
    };
    let mut dst = Connection::open(tmp).map_err(failed)?;
    let pages = {
        let backup = Backup::new(src, &mut dst).map_err(failed)?;
        loop {
            let step = backup.step(PAGES_PER_STEP).map_err(failed)?;
            let p = backup.progress();
            let total = u64::try_from(p.pagecount).unwrap_or(0);
            let copied = total.saturating_sub(u64::try_from(p.remaining).unwrap_or(0));
            progress(Progress { copied, total });
            match step {
                StepResult::Done => break total,
                StepResult::More => {}
                // Another connection holds a lock a moment: try again.
                _ => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    };
    // One self-contained file: no -wal beside it.
    dst.pragma_update(None, "journal_mode", "DELETE")
        .map_err(failed)?;
    let check: String = dst
        .query_row("PRAGMA quick_check", [], |r| r.get(0))
        .map_err(failed)?;
    if check != "ok" {
        return Err(BackupError::Copy {
            path: tmp.to_path_buf(),
            reason: format!("the copy does not check out: {check}"),
        });
    }
    dst.close().map_err(|(_, e)| failed(e))?;
    Ok(pages)
}

/// A new name beside `dest` for the file being written.
fn temp_beside(dest: &Path) -> PathBuf {
    let mut name = dest.as_os_str().to_os_string();
    name.push(format!(
        ".partial-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    ));
    name.into()
}

/// Syncs the directory holding `file`, so its new name survives a crash.
fn sync_dir(file: &Path) {
    if let Some(dir) = file.parent() {
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
    }
}

fn report(path: &Path, pages: u64, schema_version: i64, started: Instant) -> Report {
    Report {
        path: path.to_path_buf(),
        bytes: std::fs::metadata(path).map(|m| m.len()).unwrap_or(0),
        pages,
        schema_version,
        took: started.elapsed(),
    }
}

/// Opens an existing dq file without creating one, and checks it is ours.
fn open_existing(file: &Path, flags: OpenFlags) -> Result<(Connection, i64), BackupError> {
    let corrupt = |e: rusqlite::Error| OpenError::Corrupt {
        file: file.to_path_buf(),
        reason: e.to_string(),
    };
    let conn = Connection::open_with_flags(file, flags).map_err(corrupt)?;
    conn.busy_timeout(Duration::from_secs(5)).map_err(corrupt)?;
    let version = schema::check(&conn, file)?.ok_or_else(|| OpenError::Foreign {
        file: file.to_path_buf(),
        reason: "an empty database".into(),
    })?;
    Ok((conn, version))
}

/// Backs up the store in `data_dir` (served by a running dq or not) into
/// the new file `out`, calling `progress` after each step.
///
/// # Errors
/// [`BackupError::NoStore`] without a data file; [`BackupError::Exists`]
/// when `out` exists; [`BackupError::Open`] for a file that is not dq's;
/// [`BackupError::Io`] / [`BackupError::Copy`] when writing fails (nothing
/// is left under `out`).
pub fn backup(
    data_dir: &Path,
    out: &Path,
    progress: &mut dyn FnMut(Progress),
) -> Result<Report, BackupError> {
    let started = Instant::now();
    let db = data_dir.join(DB_FILE);
    if !db.is_file() {
        return Err(BackupError::NoStore {
            dir: data_dir.to_path_buf(),
        });
    }
    if out.symlink_metadata().is_ok() {
        return Err(BackupError::Exists {
            path: out.to_path_buf(),
        });
    }
    // Read-write (the WAL index is shared memory it may have to set up),
    // never create.
    let (src, version) = open_existing(
        &db,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    let failed = |e: rusqlite::Error| BackupError::Copy {
        path: out.to_path_buf(),
        reason: e.to_string(),
    };
    // The snapshot: one read transaction for the whole copy, so the copy
    // never starts over however busy the writer is.
    src.execute_batch("BEGIN DEFERRED; SELECT count(*) FROM sqlite_master;")
        .map_err(failed)?;
    let pages = copy(&src, out, Place::New, progress);
    let _ = src.execute_batch("COMMIT");
    let pages = pages?;
    Ok(report(out, pages, version, started))
}

/// [`dq_core::Store::backup`] of the store serving `data_dir`: [`backup`]
/// on a blocking thread, its answer in the contract's terms (the path in
/// messages is the directory's canonical one, as `dq serve` shows it).
pub(crate) async fn backup_live(
    data_dir: &Path,
    out: &Path,
) -> Result<dq_core::BackupReport, dq_core::BackupError> {
    let (dir, out) = (data_dir.to_path_buf(), out.to_path_buf());
    // Runs to the end even if the caller goes away: a file under `out` is
    // always a whole backup.
    let done = tokio::task::spawn_blocking(move || {
        let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
        backup(&dir, &out, &mut |_| {})
    })
    .await
    .map_err(|e| dq_core::BackupError::Failed(e.to_string()))?;
    match done {
        Ok(r) => Ok(dq_core::BackupReport {
            bytes: r.bytes,
            pages: r.pages,
            schema_version: r.schema_version,
            took: r.took,
        }),
        Err(e @ BackupError::Exists { .. }) => Err(dq_core::BackupError::Exists(e.to_string())),
        Err(e) => Err(dq_core::BackupError::Failed(e.to_string())),
    }
}

/// Restores the backup `file` as the store of `data_dir` (created if
/// missing). A directory that is not empty is refused unless `force`, which
/// replaces its data file; a directory a dq process holds is always refused.
/// A backup of an older schema is migrated when dq next opens it.
///
/// # Errors
/// [`BackupError::NotEmpty`]; [`BackupError::Open`] for a backup that is
/// not dq's or is newer than this dq, and [`OpenError::Locked`] for a
/// directory in use; [`BackupError::Io`] / [`BackupError::Copy`].
pub fn restore(
    file: &Path,
    data_dir: &Path,
    force: bool,
    progress: &mut dyn FnMut(Progress),
) -> Result<Report, BackupError> {
    let started = Instant::now();
    if !file.is_file() {
        return Err(BackupError::Io {
            path: file.to_path_buf(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such backup file"),
        });
    }
    let (src, version) = open_existing(
        file,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| BackupError::Io { path, source }
    };
    std::fs::create_dir_all(data_dir).map_err(io(data_dir))?;
    let mut entries: Vec<String> = std::fs::read_dir(data_dir)
        .map_err(io(data_dir))?
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    if !entries.is_empty() && !force {
        entries.sort();
        let more = entries.len().saturating_sub(3);
        let mut found = entries.into_iter().take(3).collect::<Vec<_>>().join(", ");
        if more > 0 {
            found.push_str(&format!(" and {more} more"));
        }
        return Err(BackupError::NotEmpty {
            dir: data_dir.to_path_buf(),
            found,
        });
    }
    // Held until the restore is done: no dq may serve the directory meanwhile.
    let _lock = crate::lock_dir(data_dir)?;
    let db = data_dir.join(DB_FILE);
    // Copied whole before anything of the old data is touched.
    let mut staged = db.as_os_str().to_os_string();
    staged.push(".restoring");
    let staged = PathBuf::from(staged);
    let pages = copy(&src, &staged, Place::Replace, progress)?;
    // A log left beside the old file would be replayed into the new one.
    for stale in [schema::wal_path(&db), shm_path(&db)] {
        match std::fs::remove_file(&stale) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(&stale)(e)),
            _ => {}
        }
    }
    std::fs::rename(&staged, &db).map_err(io(&db))?;
    sync_dir(&db);
    Ok(report(&db, pages, version, started))
}

/// The shared-memory index beside the database file `db`.
fn shm_path(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_os_string();
    name.push("-shm");
    name.into()
}
