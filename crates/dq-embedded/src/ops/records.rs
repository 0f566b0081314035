//! Named records (schedules and their progress, API keys) and named
//! counters: the store's small key-value part (`raise_mark.lua`).

use dq_core::*;
use rusqlite::{OptionalExtension, params};

use crate::writer::{Ctx, OpResult};

/// Counts `name` up by one and returns the new value (1 first).
pub(crate) fn next_seq(cx: &mut Ctx, name: &str) -> OpResult<u64> {
    let v: i64 = cx
        .conn
        .prepare_cached(
            "INSERT INTO counters (name, value) VALUES (?1, 1) \
             ON CONFLICT(name) DO UPDATE SET value = value + 1 RETURNING value",
        )?
        .query_row([name], |r| r.get(0))?;
    Ok(v as u64)
}

pub(crate) fn put_record(
    cx: &mut Ctx,
    kind: &str,
    name: &str,
    value: &str,
    mark: u64,
) -> OpResult<bool> {
    let existed = cx
        .conn
        .prepare_cached("SELECT 1 FROM records WHERE kind = ?1 AND name = ?2")?
        .exists(params![kind, name])?;
    cx.conn
        .prepare_cached(
            "INSERT INTO records (kind, name, value, mark) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (kind, name) DO UPDATE SET value = excluded.value, mark = excluded.mark",
        )?
        .execute(params![kind, name, value, mark as i64])?;
    Ok(!existed)
}

pub(crate) fn get_record(cx: &mut Ctx, kind: &str, name: &str) -> OpResult<Option<Record>> {
    Ok(cx
        .conn
        .prepare_cached("SELECT value, mark FROM records WHERE kind = ?1 AND name = ?2")?
        .query_row(params![kind, name], |r| {
            Ok(Record {
                value: r.get(0)?,
                mark: r.get::<_, i64>(1)? as u64,
            })
        })
        .optional()?)
}

pub(crate) fn list_records(cx: &mut Ctx, kind: &str) -> OpResult<Vec<(String, Record)>> {
    let mut st = cx
        .conn
        .prepare_cached("SELECT name, value, mark FROM records WHERE kind = ?1 ORDER BY name")?;
    let rows = st.query_map([kind], |r| {
        Ok((
            r.get::<_, String>(0)?,
            Record {
                value: r.get(1)?,
                mark: r.get::<_, i64>(2)? as u64,
            },
        ))
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

pub(crate) fn delete_record(cx: &mut Ctx, kind: &str, name: &str) -> OpResult<bool> {
    Ok(cx
        .conn
        .prepare_cached("DELETE FROM records WHERE kind = ?1 AND name = ?2")?
        .execute(params![kind, name])?
        > 0)
}

pub(crate) fn raise_mark(cx: &mut Ctx, kind: &str, name: &str, mark: u64) -> OpResult<Option<u64>> {
    Ok(cx
        .conn
        .prepare_cached(
            "UPDATE records SET mark = max(mark, ?3) WHERE kind = ?1 AND name = ?2 RETURNING mark",
        )?
        .query_row(params![kind, name, mark as i64], |r| r.get::<_, i64>(0))
        .optional()?
        .map(|m| m as u64))
}
