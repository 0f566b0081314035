//! Delete a topic (`delete_topic.lua`): its jobs in bounded steps, each
//! state found where the store keeps it, and the topic itself once empty.

use dq_core::*;
use rusqlite::params;

use super::dead::{delete_dead, delete_row};
use super::leases::{free_slot, leased_row};
use super::{DEAD, READY, RESERVED, SCHEDULED, counts, tid};
use crate::writer::{Ctx, HotSql, OpResult};

/// Deletes up to `?2` scheduled jobs of topic `?1` (the other states are
/// found in memory). The state is written into the SQL, not bound: only a
/// literal matches the schedule's partial index `WHERE state = 0` (with
/// the query planner stability guarantee on, a bound state would read
/// every row of the topic through `jobs_id`).
const DELETE_SCHEDULED: &str =
    "DELETE FROM jobs WHERE seq IN (SELECT seq FROM jobs WHERE tid = ?1 AND state = 0 LIMIT ?2)";

/// Deletes up to `max` of topic `tid`'s reserved jobs (found in memory:
/// no index holds them), freeing their keys' slots (a delete cut short
/// leaves no key held for good); returns how many.
fn delete_leases(cx: &mut Ctx, tid: i64, max: i64) -> OpResult<i64> {
    let mut n = 0;
    for seq in cx.mem.leases.of_topic(tid, max.max(0) as usize) {
        let Some((_, key)) = leased_row(cx, tid, seq)? else {
            continue;
        };
        cx.mem.leases.remove(seq);
        cx.conn.with(HotSql::Delete, |st| st.execute([seq]))?;
        if let Some(k) = key {
            free_slot(cx, tid, &k)?;
        }
        n += 1;
    }
    Ok(n)
}

/// Deletes up to `max` of topic `tid`'s ready jobs (found in memory):
/// those without a key, then those with one; returns how many.
fn delete_ready(cx: &mut Ctx, tid: i64, max: i64) -> OpResult<i64> {
    let mut n = 0;
    for (priority, due, seq) in cx.mem.ready.first(tid, max.max(0) as usize) {
        cx.mem.ready.remove((tid, priority, due, seq));
        n += delete_row(cx, tid, READY, seq)?;
    }
    let keyed: Vec<(String, (i64, i64, i64))> = cx
        .mem
        .lanes
        .topic(tid)
        .take((max - n).max(0) as usize)
        .map(|(k, p)| (k.to_string(), p))
        .collect();
    for (k, p) in keyed {
        cx.mem.lanes.remove(tid, &k, p);
        n += delete_row(cx, tid, READY, p.2)?;
    }
    Ok(n)
}

pub(crate) fn delete_topic(cx: &mut Ctx, topic: &Topic, max: usize) -> OpResult<(u64, bool)> {
    let Some(tid) = tid(cx, topic)? else {
        return Ok((0, true));
    };
    let mut left = max as i64;
    let mut deleted = 0;
    // Leases before the jobs that wait for them (a delete cut short frees
    // the keys' slots first); ready last.
    for state in [SCHEDULED, RESERVED, DEAD, READY] {
        if left <= 0 {
            break;
        }
        let n = match state {
            SCHEDULED => cx
                .conn
                .prepare_cached(DELETE_SCHEDULED)?
                .execute(params![tid, left])? as i64,
            RESERVED => delete_leases(cx, tid, left)?,
            READY => delete_ready(cx, tid, left)?,
            _ => delete_dead(cx, tid, left)?,
        };
        let mut d = [0; 4];
        d[state as usize] = -n;
        counts(cx, tid, d)?;
        deleted += n;
        left -= n;
    }
    let rest: bool = cx
        .conn
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM jobs WHERE tid = ?1)")?
        .query_row([tid], |r| r.get(0))?;
    if rest {
        return Ok((deleted as u64, false));
    }
    cx.conn
        .prepare_cached("DELETE FROM dedup WHERE tid = ?1")?
        .execute([tid])?;
    cx.conn
        .prepare_cached("DELETE FROM fkeys WHERE tid = ?1")?
        .execute([tid])?;
    cx.conn
        .prepare_cached("DELETE FROM topics WHERE tid = ?1")?
        .execute([tid])?;
    cx.tids.remove(topic.as_str());
    Ok((deleted as u64, true))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A topic delete's scheduled step seeks the schedule's partial index,
    /// not every row of the topic (leases, ready jobs without a key and
    /// dead letters are found in memory).
    #[test]
    fn deleting_a_topic_seeks_the_schedules_index() {
        let dir = tempfile::tempdir().unwrap();
        let conn = crate::file::open(&dir.path().join("f"), None).unwrap();
        let plan: Vec<String> = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {DELETE_SCHEDULED}"))
            .unwrap()
            .query_map(params![1, 10], |r| r.get::<_, String>(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert!(plan.iter().any(|p| p.contains("jobs_sched")), "{plan:?}");
    }
}
