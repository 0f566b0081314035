//! Named records (schedules: a value and a mark per name, in one hash per
//! kind) and named counters: put_record, get_record, list_records,
//! delete_record, raise_mark (`lua/raise_mark.lua`), next_seq. Plain
//! commands but for raise_mark.

use std::collections::HashMap;

use dq_core::store::StoreResult;
use dq_core::*;

use crate::RedisStore;
use crate::conn::unavailable;

pub(crate) async fn put_record(
    store: &RedisStore,
    kind: &str,
    name: &str,
    value: &str,
    mark: u64,
) -> StoreResult<bool> {
    let mut conn = store.conn.clone();
    // One HSET of both fields: atomic; it counts the fields it added.
    let added: u64 = redis::cmd("HSET")
        .arg(store.keys.records(kind))
        .arg(format!("v:{name}"))
        .arg(value)
        .arg(format!("m:{name}"))
        .arg(mark)
        .query_async(&mut conn)
        .await
        .map_err(unavailable)?;
    Ok(added > 0)
}

pub(crate) async fn get_record(
    store: &RedisStore,
    kind: &str,
    name: &str,
) -> StoreResult<Option<Record>> {
    let mut conn = store.conn.clone();
    let (value, mark): (Option<String>, Option<u64>) = redis::cmd("HMGET")
        .arg(store.keys.records(kind))
        .arg(format!("v:{name}"))
        .arg(format!("m:{name}"))
        .query_async(&mut conn)
        .await
        .map_err(unavailable)?;
    Ok(value.map(|value| Record {
        value,
        mark: mark.unwrap_or(0),
    }))
}

pub(crate) async fn list_records(
    store: &RedisStore,
    kind: &str,
) -> StoreResult<Vec<(String, Record)>> {
    let mut conn = store.conn.clone();
    let all: HashMap<String, String> = redis::cmd("HGETALL")
        .arg(store.keys.records(kind))
        .query_async(&mut conn)
        .await
        .map_err(unavailable)?;
    let mut out: Vec<(String, Record)> = all
        .iter()
        .filter_map(|(k, v)| {
            let name = k.strip_prefix("v:")?;
            let mark = all
                .get(&format!("m:{name}"))
                .and_then(|m| m.parse().ok())
                .unwrap_or(0);
            Some((
                name.to_string(),
                Record {
                    value: v.clone(),
                    mark,
                },
            ))
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

pub(crate) async fn delete_record(store: &RedisStore, kind: &str, name: &str) -> StoreResult<bool> {
    let mut conn = store.conn.clone();
    let n: u64 = redis::cmd("HDEL")
        .arg(store.keys.records(kind))
        .arg(format!("v:{name}"))
        .arg(format!("m:{name}"))
        .query_async(&mut conn)
        .await
        .map_err(unavailable)?;
    Ok(n > 0)
}

pub(crate) async fn raise_mark(
    store: &RedisStore,
    kind: &str,
    name: &str,
    mark: u64,
) -> StoreResult<Option<u64>> {
    let mut conn = store.conn.clone();
    let v: i64 = store
        .scripts
        .raise_mark
        .key(store.keys.records(kind))
        .arg(name)
        .arg(mark)
        .invoke_async(&mut conn)
        .await
        .map_err(unavailable)?;
    // NOT_FOUND (negative): no such record.
    Ok(u64::try_from(v).ok())
}

pub(crate) async fn next_seq(store: &RedisStore, name: &str) -> StoreResult<u64> {
    let mut conn = store.conn.clone();
    redis::cmd("INCR")
        .arg(store.keys.seq(name))
        .query_async(&mut conn)
        .await
        .map_err(unavailable)
}
