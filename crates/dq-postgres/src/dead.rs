//! Dead letters: replayed, purged, trimmed to their cap (`replay_dead.lua`,
//! `purge_dead.lua`).

use dq_core::*;

use crate::OpResult;
use crate::cx::{BATCH, Cx, DEAD};

/// Drops the oldest dead letters over `cap` (a bounded number per call).
pub(crate) async fn trim_dead(cx: &Cx<'_>, tid: i64, cap: u64) -> OpResult<()> {
    let dead: i64 = cx
        .one("SELECT n_dead FROM topics WHERE tid = $1", &[&tid])
        .await?
        .get(0);
    let over = (dead - cap as i64).min(BATCH);
    if over <= 0 {
        return Ok(());
    }
    let n = delete_oldest_dead(cx, tid, over).await?;
    cx.bump(tid, "dead_dropped", n).await
}

async fn delete_oldest_dead(cx: &Cx<'_>, tid: i64, max: i64) -> OpResult<i64> {
    let n = cx
        .exec(
            "DELETE FROM jobs WHERE seq IN (
               SELECT seq FROM jobs WHERE tid = $1 AND state = 3 ORDER BY died_ms, seq LIMIT $2)",
            &[&tid, &max.max(0)],
        )
        .await? as i64;
    cx.counts(tid, [0, 0, 0, -n]).await?;
    Ok(n)
}

pub(crate) async fn replay_dead(
    cx: &mut Cx<'_>,
    topic: &Topic,
    ids: Option<&[JobId]>,
    max: usize,
    now: u64,
) -> OpResult<u64> {
    let Some(tid) = cx.lock(topic).await? else {
        return Ok(0);
    };
    let seqs: Vec<i64> = match ids {
        Some(ids) => {
            let ids: Vec<&str> = ids.iter().map(JobId::as_str).collect();
            cx.q(
                "SELECT seq FROM jobs WHERE tid = $1 AND id = ANY($2) AND state = 3
                 ORDER BY died_ms, seq",
                &[&tid, &ids],
            )
            .await?
        }
        None => {
            cx.q(
                "SELECT seq FROM jobs WHERE tid = $1 AND state = 3 ORDER BY died_ms, seq LIMIT $2",
                &[&tid, &(max as i64)],
            )
            .await?
        }
    }
    .iter()
    .map(|r| r.get(0))
    .collect();
    let mut replayed = 0;
    // Its attempts start again; their hand-outs stay in its reserves
    // (`carried`).
    for seq in seqs {
        let moved = cx
            .exec(
                "UPDATE jobs SET attempts = 0, carried = carried + attempts, died_ms = NULL,
                   kicks = kicks + 1
                 WHERE seq = $1 AND state = 3",
                &[&seq],
            )
            .await?;
        if moved == 0 {
            continue;
        }
        cx.place(topic, tid, seq, Some(DEAD), now, None, now)
            .await?;
        replayed += 1;
    }
    cx.bump(tid, "replayed", replayed).await?;
    Ok(replayed as u64)
}

pub(crate) async fn purge_dead(cx: &mut Cx<'_>, topic: &Topic, max: usize) -> OpResult<u64> {
    let Some(tid) = cx.lock(topic).await? else {
        return Ok(0);
    };
    Ok(delete_oldest_dead(cx, tid, max as i64).await? as u64)
}
