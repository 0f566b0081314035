//! What the listener's connections share, kept in this process (the
//! reference keeps it in its one process too): the counts of `stats`
//! (connections, producers, workers, waiters, each command), the tubes in
//! use (which connections use, watch or wait on which tube: a tube exists
//! for beanstalkd while one does, or while it holds a job), the aliases of
//! jobs whose dq id is not a number, the instance id.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use dq_core::Topic;

use super::alias::Aliases;
use super::parse::Cmd;

/// The commands `stats` counts, in its order (`cmd-<name>`). The reference
/// counts `reserve-job` and `kick-job` too but shows neither.
pub(super) const OPS: [&str; 22] = [
    "put",
    "peek",
    "peek-ready",
    "peek-delayed",
    "peek-buried",
    "reserve",
    "reserve-with-timeout",
    "delete",
    "release",
    "use",
    "watch",
    "ignore",
    "bury",
    "kick",
    "touch",
    "stats",
    "stats-job",
    "stats-tube",
    "list-tubes",
    "list-tube-used",
    "list-tubes-watched",
    "pause-tube",
];

/// The place of `cmd` among [`OPS`]; None for the commands not shown.
fn op(cmd: &Cmd) -> Option<usize> {
    use dq_core::JobState;
    Some(match cmd {
        Cmd::Put { .. } => 0,
        Cmd::Peek(_) => 1,
        Cmd::PeekState(JobState::Ready) => 2,
        Cmd::PeekState(JobState::Dead) => 4,
        Cmd::PeekState(_) => 3,
        Cmd::Reserve(_) => 5,
        Cmd::ReserveWithTimeout(_) => 6,
        Cmd::Delete(_) => 7,
        Cmd::Release { .. } => 8,
        Cmd::Use(_) => 9,
        Cmd::Watch(_) => 10,
        Cmd::Ignore(_) => 11,
        Cmd::Bury { .. } => 12,
        Cmd::Kick(_) => 13,
        Cmd::Touch(_) => 14,
        Cmd::Stats => 15,
        Cmd::StatsJob(_) => 16,
        Cmd::StatsTube(_) => 17,
        Cmd::ListTubes => 18,
        Cmd::ListTubeUsed => 19,
        Cmd::ListTubesWatched => 20,
        Cmd::PauseTube(..) => 21,
        Cmd::ReserveJob(_) | Cmd::KickJob(_) | Cmd::Quit | Cmd::Auth(_) => return None,
    })
}

/// Who uses a tube now, and its own count.
#[derive(Default, Clone, Copy)]
pub(super) struct TubeUse {
    pub(super) using: u64,
    pub(super) watching: u64,
    pub(super) waiting: u64,
    /// `pause-tube` commands on it (`cmd-pause-tube`).
    pub(super) pauses: u64,
}

impl TubeUse {
    /// Whether a connection holds the tube (so it exists, even empty).
    pub(super) fn held(&self) -> bool {
        self.using > 0 || self.watching > 0
    }
}

#[derive(Default)]
pub(super) struct Shared {
    pub(super) connections: AtomicU64,
    pub(super) total_connections: AtomicU64,
    /// Open connections that have put a job.
    pub(super) producers: AtomicU64,
    /// Open connections that have reserved (or asked to).
    pub(super) workers: AtomicU64,
    /// Connections waiting in a reserve now.
    pub(super) waiting: AtomicU64,
    ops: [AtomicU64; OPS.len()],
    tubes: Mutex<HashMap<Topic, TubeUse>>,
    pub(super) aliases: Aliases,
    /// This listener's random id (`stats`'s `id`, as the reference's).
    pub(super) id: String,
}

impl Shared {
    /// A new table, with a random instance id.
    pub(super) fn new() -> Self {
        Shared {
            id: format!("{:016x}", rand::random::<u64>()),
            ..Shared::default()
        }
    }

    /// Counts a command the parser took (the reference counts it once its
    /// arguments read, whatever it answers).
    pub(super) fn count(&self, cmd: &Cmd) {
        if let Some(i) = op(cmd) {
            self.ops[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Each shown command's count, in [`OPS`] order.
    pub(super) fn op_counts(&self) -> Vec<(&'static str, u64)> {
        OPS.iter()
            .zip(&self.ops)
            .map(|(n, c)| (*n, c.load(Ordering::Relaxed)))
            .collect()
    }

    /// Changes `t`'s use by `f`; forgets a tube no one holds any more and
    /// that was never paused.
    pub(super) fn tube(&self, t: &Topic, f: impl FnOnce(&mut TubeUse)) {
        let mut tubes = self.tubes.lock().expect("tube table");
        let u = tubes.entry(t.clone()).or_default();
        f(u);
        if !u.held() && u.waiting == 0 && u.pauses == 0 {
            tubes.remove(t);
        }
    }

    /// `t`'s use now (zeros when no one holds it).
    pub(super) fn tube_use(&self, t: &Topic) -> TubeUse {
        let tubes = self.tubes.lock().expect("tube table");
        tubes.get(t).copied().unwrap_or_default()
    }

    /// The tubes some connection holds now.
    pub(super) fn held_tubes(&self) -> Vec<Topic> {
        let tubes = self.tubes.lock().expect("tube table");
        tubes
            .iter()
            .filter(|(_, u)| u.held())
            .map(|(t, _)| t.clone())
            .collect()
    }
}

/// A connection's wait in a reserve, counted while it lasts (on each
/// watched tube and in all).
pub(super) struct Waiting<'a> {
    shared: &'a Shared,
    tubes: Vec<Topic>,
}

impl<'a> Waiting<'a> {
    pub(super) fn start(shared: &'a Shared, tubes: &[Topic]) -> Self {
        shared.waiting.fetch_add(1, Ordering::Relaxed);
        for t in tubes {
            shared.tube(t, |u| u.waiting += 1);
        }
        Waiting {
            shared,
            tubes: tubes.to_vec(),
        }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.shared.waiting.fetch_sub(1, Ordering::Relaxed);
        for t in &self.tubes {
            self.shared
                .tube(t, |u| u.waiting = u.waiting.saturating_sub(1));
        }
    }
}
