//! Named records (schedules and their progress, API keys), named counters
//! and the dispatchers' membership: the store's small key-value part.

use dq_core::*;

use crate::OpResult;
use crate::cx::Cx;

pub(crate) async fn next_seq(cx: &mut Cx<'_>, name: &str) -> OpResult<u64> {
    let v: i64 = cx
        .one(
            "INSERT INTO counters (name, value) VALUES ($1, 1)
             ON CONFLICT (name) DO UPDATE SET value = counters.value + 1 RETURNING value",
            &[&name],
        )
        .await?
        .get(0);
    Ok(v as u64)
}

pub(crate) async fn put_record(
    cx: &mut Cx<'_>,
    kind: &str,
    name: &str,
    value: &str,
    mark: u64,
) -> OpResult<bool> {
    // `xmax = 0`: the row was inserted, not updated.
    let created: bool = cx
        .one(
            "INSERT INTO records (kind, name, value, mark) VALUES ($1, $2, $3, $4)
             ON CONFLICT (kind, name) DO UPDATE SET value = excluded.value, mark = excluded.mark
             RETURNING (xmax = 0)",
            &[&kind, &name, &value, &(mark as i64)],
        )
        .await?
        .get(0);
    Ok(created)
}

pub(crate) async fn get_record(
    cx: &mut Cx<'_>,
    kind: &str,
    name: &str,
) -> OpResult<Option<Record>> {
    Ok(cx
        .opt(
            "SELECT value, mark FROM records WHERE kind = $1 AND name = $2",
            &[&kind, &name],
        )
        .await?
        .map(|r| Record {
            value: r.get(0),
            mark: r.get::<_, i64>(1) as u64,
        }))
}

pub(crate) async fn list_records(cx: &mut Cx<'_>, kind: &str) -> OpResult<Vec<(String, Record)>> {
    Ok(cx
        .q(
            "SELECT name, value, mark FROM records WHERE kind = $1 ORDER BY name",
            &[&kind],
        )
        .await?
        .iter()
        .map(|r| {
            (
                r.get(0),
                Record {
                    value: r.get(1),
                    mark: r.get::<_, i64>(2) as u64,
                },
            )
        })
        .collect())
}

pub(crate) async fn delete_record(cx: &mut Cx<'_>, kind: &str, name: &str) -> OpResult<bool> {
    Ok(cx
        .exec(
            "DELETE FROM records WHERE kind = $1 AND name = $2",
            &[&kind, &name],
        )
        .await?
        > 0)
}

pub(crate) async fn raise_mark(
    cx: &mut Cx<'_>,
    kind: &str,
    name: &str,
    mark: u64,
) -> OpResult<Option<u64>> {
    Ok(cx
        .opt(
            "UPDATE records SET mark = greatest(mark, $3) WHERE kind = $1 AND name = $2 RETURNING mark",
            &[&kind, &name, &(mark as i64)],
        )
        .await?
        .map(|r| r.get::<_, i64>(0) as u64))
}

/// Records that dispatcher `me` is alive at `now` and returns every one
/// seen within `ttl` (sorted, `me` included); forgets the others.
pub(crate) async fn members(
    cx: &mut Cx<'_>,
    me: &str,
    now: i64,
    ttl: i64,
) -> OpResult<Vec<String>> {
    cx.exec(
        "INSERT INTO members (name, seen_ms) VALUES ($1, $2)
         ON CONFLICT (name) DO UPDATE SET seen_ms = greatest(members.seen_ms, excluded.seen_ms)",
        &[&me, &now],
    )
    .await?;
    cx.exec("DELETE FROM members WHERE seen_ms <= $1", &[&(now - ttl)])
        .await?;
    Ok(cx
        .q("SELECT name FROM members ORDER BY name COLLATE \"C\"", &[])
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect())
}
