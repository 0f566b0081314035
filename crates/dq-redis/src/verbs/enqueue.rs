//! New jobs: enqueue (`lua/enqueue.lua`, in its full or compact form) and
//! import_jobs (`lua/import_jobs.lua`), both on the connection for new jobs
//! and durable as configured (`RedisStore::enqueue_durably`).

use dq_core::limits::clip_error;
use dq_core::store::StoreResult;
use dq_core::*;
use redis::Value;

use super::{n, opt};
use crate::RedisStore;
use crate::decode::{array, int, protocol, state_of, string};

pub(crate) async fn enqueue(
    store: &RedisStore,
    topic: &Topic,
    jobs: &[NewJob],
    now_ms: u64,
) -> StoreResult<Vec<Enqueued>> {
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    if jobs.iter().any(|j| j.expires.is_some()) {
        return Err(super::topics::expiry_unsupported());
    }
    store.register(topic).await?;
    let ids: Vec<JobId> = jobs
        .iter()
        .map(|j| j.id.clone().unwrap_or_else(JobId::generate))
        .collect();
    // The compact form (see enqueue.lua) when no job sets an override,
    // a dedup window, a key, replace, put order or a trace context, and
    // every body is below 4 GiB (`packed_kind_body`).
    let compact = jobs.iter().all(|j| {
        j.max_attempts.is_none()
            && j.lease_ms.is_none()
            && j.retry.is_none()
            && !j.replace
            && !j.put_order
            && j.dedup_ms.is_none()
            && j.key.is_none()
            && j.trace.is_none()
            && u32::try_from(j.body.as_bytes().len()).is_ok()
    });
    let mut args: Vec<Vec<u8>> = Vec::with_capacity(2 + jobs.len() * if compact { 5 } else { 13 });
    args.push(store.now_arg(now_ms));
    args.push(if compact {
        b"c".to_vec()
    } else {
        b"f".to_vec()
    });
    for (j, id) in jobs.iter().zip(&ids) {
        let (kind, value) = match j.when {
            When::DelayMs(d) => ("d", d),
            When::DueAtMs(t) => ("a", t),
            When::TopicDefault => ("t", 0),
        };
        args.push(id.as_str().as_bytes().to_vec());
        args.push(kind.as_bytes().to_vec());
        args.push(n(value));
        args.push(n(j.priority as u64));
        if compact {
            args.push(packed_kind_body(j.body.is_json(), j.body.as_bytes()));
            continue;
        }
        args.push(opt(j.max_attempts));
        args.push(opt(j.lease_ms));
        args.push(opt(j.retry.as_ref().map(RetryPolicy::encode)));
        args.push(if j.body.is_json() {
            b"j".to_vec()
        } else {
            b"b".to_vec()
        });
        args.push(j.body.as_bytes().to_vec());
        // The flags: 1 replace + 2 put order.
        args.push(match (j.replace, j.put_order) {
            (false, false) => b"0".to_vec(),
            (true, false) => b"1".to_vec(),
            (false, true) => b"2".to_vec(),
            (true, true) => b"3".to_vec(),
        });
        args.push(opt(j.dedup_ms));
        args.push(opt(j.key.as_ref().map(JobKey::as_str)));
        args.push(stored_trace(j.trace.as_ref()));
    }
    let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
    let v = store.enqueue_durably(topic, &refs).await?;
    decode_enqueued(v, ids)
}

/// A job's kind (`j` JSON, `b` bytes) and body as its record stores them
/// (values 7 and 8, common.lua): two MessagePack strings, each with the
/// header cmsgpack.pack writes for its length (fixstr below 32 bytes, then
/// str 8, 16, 32), so a record that enqueue.lua's compact form splices
/// from this is the record cmsgpack.pack would have written, byte for byte.
fn packed_kind_body(json: bool, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + 7);
    out.extend_from_slice(&[0xa1, if json { b'j' } else { b'b' }]);
    let len = body.len();
    if len < 32 {
        out.push(0xa0 | len as u8);
    } else if let Ok(l) = u8::try_from(len) {
        out.extend_from_slice(&[0xd9, l]);
    } else if let Ok(l) = u16::try_from(len) {
        out.push(0xda);
        out.extend_from_slice(&l.to_be_bytes());
    } else {
        // The compact form takes bodies below 4 GiB only.
        let l = u32::try_from(len).unwrap_or(u32::MAX);
        out.push(0xdb);
        out.extend_from_slice(&l.to_be_bytes());
    }
    out.extend_from_slice(body);
    out
}

/// A job's trace context as its record keeps it (value 25, `tc` in
/// common.lua), or empty for none.
fn stored_trace(trace: Option<&TraceContext>) -> Vec<u8> {
    trace
        .map(TraceContext::to_stored)
        .unwrap_or_default()
        .into_bytes()
}

fn decode_enqueued(v: Value, ids: Vec<JobId>) -> StoreResult<Vec<Enqueued>> {
    let items = array(v)?;
    if items.len() != ids.len() * 3 {
        return Err(protocol("enqueue reply length"));
    }
    items
        .chunks(3)
        .zip(ids)
        .map(|(c, id)| {
            let outcome = int(&c[0])?;
            Ok(Enqueued {
                id,
                created: outcome == 1,
                replaced: outcome == 2,
                deduplicated: outcome == 3,
                due_at_ms: int(&c[1])? as u64,
                state: state_of(&string(&c[2])?)?,
            })
        })
        .collect()
}

pub(crate) async fn import_jobs(
    store: &RedisStore,
    topic: &Topic,
    jobs: &[ImportJob],
    now_ms: u64,
) -> StoreResult<Vec<Imported>> {
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    store.register(topic).await?;
    let mut args: Vec<Vec<u8>> = Vec::with_capacity(1 + jobs.len() * 18);
    args.push(store.now_arg(now_ms));
    for j in jobs {
        let dead = j.state == JobState::Dead;
        args.push(j.id.as_str().as_bytes().to_vec());
        args.push(if dead { b"d".to_vec() } else { b"w".to_vec() });
        args.push(n(j.due_at_ms));
        args.push(n(u64::from(j.priority)));
        args.push(n(u64::from(j.attempts)));
        args.push(opt(j.max_attempts));
        args.push(opt(j.lease_ms));
        args.push(opt(j.retry.as_ref().map(RetryPolicy::encode)));
        args.push(opt(j.dedup_ms));
        args.push(if j.body.is_json() {
            b"j".to_vec()
        } else {
            b"b".to_vec()
        });
        args.push(j.body.as_bytes().to_vec());
        args.push(
            j.last_error
                .as_deref()
                .map(|e| clip_error(e).as_bytes().to_vec())
                .unwrap_or_default(),
        );
        args.push(n(j.created_at_ms));
        args.push(opt(j.died_at_ms.filter(|_| dead)));
        args.push(if j.last_error.is_some() {
            b"1".to_vec()
        } else {
            b"0".to_vec()
        });
        args.push(opt(j.key.as_ref().map(JobKey::as_str)));
        args.push(opt(dq_core::errors_to_json(&j.errors)));
        args.push(stored_trace(j.trace.as_ref()));
    }
    let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
    let v = store
        .enqueue_durably_with(&store.scripts.import_jobs, topic, &refs)
        .await?;
    let ids: Vec<JobId> = jobs.iter().map(|j| j.id.clone()).collect();
    decode_imported(v, &ids)
}

/// import_jobs's `{outcome, state}` per job.
fn decode_imported(v: Value, ids: &[JobId]) -> StoreResult<Vec<Imported>> {
    let items = array(v)?;
    if items.len() != ids.len() * 2 {
        return Err(protocol("import_jobs reply length"));
    }
    items
        .chunks(2)
        .zip(ids)
        .map(|(c, id)| {
            let outcome = int(&c[0])?;
            Ok(Imported {
                id: id.clone(),
                created: outcome == 1,
                deduplicated: outcome == 3,
                state: state_of(&string(&c[1])?)?,
            })
        })
        .collect()
}
