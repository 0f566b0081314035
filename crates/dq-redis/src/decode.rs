//! Script replies to dq types, and script status codes to [`StoreError`]s:
//! the one place that knows what each script returns, and the one place
//! that decodes the codes of `codes.rs`.

use dq_core::store::StoreResult;
use dq_core::*;
use redis::Value;

use crate::codes::{NOT_FOUND, NOT_IN_STATE, TARGET_REFUSED, TOKEN_MISMATCH};

pub(crate) fn protocol(what: &str) -> StoreError {
    StoreError::Unavailable(format!("unexpected reply from Redis: {what}"))
}

pub(crate) fn int(v: &Value) -> StoreResult<i64> {
    match v {
        Value::Int(i) => Ok(*i),
        Value::BulkString(b) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| protocol("not an integer")),
        _ => Err(protocol("not an integer")),
    }
}

pub(crate) fn bytes(v: Value) -> StoreResult<Vec<u8>> {
    match v {
        Value::BulkString(b) => Ok(b),
        Value::SimpleString(s) => Ok(s.into_bytes()),
        Value::Int(i) => Ok(i.to_string().into_bytes()),
        _ => Err(protocol("not a string")),
    }
}

pub(crate) fn string(v: &Value) -> StoreResult<String> {
    String::from_utf8(bytes(v.clone())?).map_err(|_| protocol("not UTF-8"))
}

/// A job's trace context as its record keeps it (common.lua's `tc`, and
/// get's reply: empty for none). A text that is not one dq wrote is none
/// too: tracing never costs a job.
pub(crate) fn stored_trace(raw: &[u8]) -> Option<TraceContext> {
    if raw.is_empty() {
        return None;
    }
    std::str::from_utf8(raw)
        .ok()
        .and_then(TraceContext::from_stored)
}

pub(crate) fn array(v: Value) -> StoreResult<Vec<Value>> {
    match v {
        Value::Array(a) => Ok(a),
        _ => Err(protocol("not an array")),
    }
}

/// [`NONE`](crate::codes::NONE) (any negative) means "none".
pub(crate) fn opt_time(v: i64) -> Option<u64> {
    (v >= 0).then_some(v as u64)
}

pub(crate) fn state_of(letter: &str) -> StoreResult<JobState> {
    match letter {
        "s" => Ok(JobState::Scheduled),
        "y" => Ok(JobState::Ready),
        "r" => Ok(JobState::Reserved),
        "d" => Ok(JobState::Dead),
        _ => Err(protocol("unknown job state")),
    }
}

/// Decodes the `{code, ...}` replies of ack, nack, touch and
/// reschedule: positive codes are success (the items are returned), a
/// refusal code its error (NOT_IN_STATE with the state after it).
pub(crate) fn status(v: &Value) -> StoreResult<Vec<Value>> {
    let items = array(v.clone())?;
    let code = int(items.first().ok_or_else(|| protocol("empty status"))?)?;
    match code {
        c if c > 0 => Ok(items),
        NOT_FOUND => Err(StoreError::NotFound),
        TOKEN_MISMATCH => Err(StoreError::LeaseMismatch),
        NOT_IN_STATE => Err(StoreError::NotInState(state_of(&string(
            items.get(1).ok_or_else(|| protocol("state missing"))?,
        )?)?)),
        _ => Err(protocol("unknown status code")),
    }
}

/// ack_batch's per-job status: 1 acked, or a bare refusal code
/// (NOT_IN_STATE: dead).
pub(crate) fn ack_status(v: &Value) -> StoreResult<()> {
    match int(v)? {
        1 => Ok(()),
        NOT_FOUND => Err(StoreError::NotFound),
        TOKEN_MISMATCH => Err(StoreError::LeaseMismatch),
        NOT_IN_STATE => Err(StoreError::NotInState(JobState::Dead)),
        _ => Err(protocol("unknown ack status")),
    }
}

/// forward's per-job status: `{TARGET_REFUSED, error}` when the target
/// refused the write, else ack's (see [`status`]).
pub(crate) fn forward_status(v: &Value) -> StoreResult<()> {
    match v {
        Value::Array(a)
            if a.first()
                .is_some_and(|c| matches!(c, Value::Int(TARGET_REFUSED))) =>
        {
            let why = a.get(1).map(|m| match m {
                Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                Value::SimpleString(s) => s.clone(),
                other => format!("{other:?}"),
            });
            Err(StoreError::Storage {
                code: dq_core::forward::TARGET_REFUSED,
                message: format!("the target refused the write: {}", why.unwrap_or_default()),
            })
        }
        other => status(other).map(|_| ()),
    }
}
