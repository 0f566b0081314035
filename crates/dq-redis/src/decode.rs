//! Script replies to dq types, and script status codes to [`StoreError`]s:
//! the one place that knows what each script returns, and the one place
//! that decodes the codes of `codes.rs`.

use dq_core::store::StoreResult;
use dq_core::*;
use redis::Value;

use crate::codes::{NOT_FOUND, NOT_IN_STATE, TARGET_REFUSED, TOKEN_MISMATCH};

fn protocol(what: &str) -> StoreError {
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

/// A `{1, time}` status reply's time (touch's deadline, release's due).
pub(crate) fn status_time(v: &Value) -> StoreResult<u64> {
    let items = status(v)?;
    int(items
        .get(1)
        .ok_or_else(|| protocol("status without a time"))?)
    .map(|t| t as u64)
}

/// nack's `{1, due, attempt}` or `{2, attempt}`.
pub(crate) fn decode_nacked(items: &[Value]) -> StoreResult<NackOutcome> {
    let at = |i: usize| int(items.get(i).ok_or_else(|| protocol("nack reply length"))?);
    match at(0)? {
        1 => Ok(NackOutcome::Retry {
            due_at_ms: at(1)? as u64,
            attempt: at(2)? as u32,
        }),
        _ => Ok(NackOutcome::Dead {
            attempt: at(1)? as u32,
        }),
    }
}

/// requeue_expired's `{retried, dead, next, (id, attempt, due|-1)*}`.
pub(crate) fn decode_requeued(v: Value) -> StoreResult<Requeued> {
    let items = array(v)?;
    if items.len() < 3 || !(items.len() - 3).is_multiple_of(3) {
        return Err(protocol("requeue_expired reply length"));
    }
    let mut jobs = Vec::with_capacity((items.len() - 3) / 3);
    for c in items[3..].chunks(3) {
        let id = JobId::new(string(&c[0])?).map_err(|_| protocol("bad id"))?;
        let attempt = int(&c[1])? as u32;
        let outcome = match opt_time(int(&c[2])?) {
            Some(due_at_ms) => NackOutcome::Retry { due_at_ms, attempt },
            None => NackOutcome::Dead { attempt },
        };
        jobs.push((id, outcome));
    }
    Ok(Requeued {
        retried: int(&items[0])? as u64,
        dead: int(&items[1])? as u64,
        next_deadline_ms: opt_time(int(&items[2])?),
        jobs,
    })
}

pub(crate) fn decode_enqueued(v: Value, ids: Vec<JobId>) -> StoreResult<Vec<Enqueued>> {
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

/// The reserve and reserve_job scripts' reply: the next due time, then 4
/// values per lease: id, token, lease deadline, and the job's record as
/// stored (its due time, priority, attempts before this lease, kind and
/// body are read from it here: 4 reply values per job fewer for Redis to
/// turn into RESP).
pub(crate) fn decode_reserved(topic: &Topic, v: Value) -> StoreResult<Reservation> {
    let mut items = array(v)?.into_iter();
    let next = int(&items.next().ok_or_else(|| protocol("empty reserve"))?)?;
    let rest: Vec<Value> = items.collect();
    if !rest.len().is_multiple_of(4) {
        return Err(protocol("reserve reply length"));
    }
    let mut leases = Vec::with_capacity(rest.len() / 4);
    let mut it = rest.into_iter();
    while let Some(id) = it.next() {
        let mut next_val = || it.next().ok_or_else(|| protocol("reserve reply length"));
        let token = string(&next_val()?)?;
        let deadline = int(&next_val()?)? as u64;
        let mut raw = bytes(next_val()?)?;
        let head = RecordHead::read(&raw)?;
        // The body cut out of the record in place (no second buffer).
        raw.truncate(head.body.end);
        raw.drain(..head.body.start);
        let id = JobId::new(string(&id)?).map_err(|_| protocol("bad id"))?;
        leases.push(Lease {
            topic: topic.clone(),
            id,
            token,
            attempt: head.attempts.saturating_add(1),
            due_at_ms: head.due_ms,
            lease_deadline_ms: deadline,
            priority: head.priority,
            body: Body::from_stored(raw, head.json),
        });
    }
    Ok(Reservation {
        leases,
        next_due_ms: opt_time(next),
    })
}

/// The first eight values of a job record (common.lua: due, priority, seq,
/// attempts, state, created, kind, body), as cmsgpack writes them: what a
/// lease needs. Every value a record can hold is read (integers of each
/// width, floats, nil, booleans, strings and binaries). Numbers convert as
/// Lua's did when it answered them one by one (a reply integer): a
/// fraction is cut off, and a number out of range saturates (a due past
/// u64::MAX, which cmsgpack writes as a float, is u64::MAX), so one odd
/// value never fails a reserve whose leases Redis has already written. A
/// record whose structure is wrong (cut short, a type no record holds, a
/// kind other than j or b) is an error: cmsgpack.unpack would have failed
/// the script on it before.
pub(crate) struct RecordHead {
    pub(crate) due_ms: u64,
    pub(crate) priority: u32,
    pub(crate) attempts: u32,
    pub(crate) json: bool,
    /// Where the body's bytes are in the record.
    pub(crate) body: std::ops::Range<usize>,
}

/// One MessagePack value of a record.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Mp<'a> {
    Nil,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(&'a [u8]),
}

impl RecordHead {
    pub(crate) fn read(raw: &[u8]) -> StoreResult<Self> {
        let mut at = 0;
        let mut vals = [Mp::Nil; 8];
        for v in &mut vals {
            *v = mp_value(raw, &mut at)?;
        }
        let json = match vals[6] {
            Mp::Str(b"j") => true,
            Mp::Str(b"b") => false,
            _ => return Err(protocol("record: kind")),
        };
        // The body is the last value read: it ends where reading stopped.
        let body = match vals[7] {
            Mp::Str(b) => at - b.len()..at,
            _ => return Err(protocol("record: body")),
        };
        Ok(RecordHead {
            due_ms: uint(&vals[0], "due")?,
            priority: u32::try_from(uint(&vals[1], "priority")?).unwrap_or(u32::MAX),
            attempts: u32::try_from(uint(&vals[3], "attempts")?).unwrap_or(u32::MAX),
            json,
            body,
        })
    }
}

/// A record's number as a u64, as a Lua number answered in a reply was
/// (fraction cut off, out of range saturated; nil is 0: attempts left off).
fn uint(v: &Mp<'_>, what: &str) -> StoreResult<u64> {
    match *v {
        Mp::Int(i) => Ok(u64::try_from(i.max(0)).unwrap_or(u64::MAX)),
        // `as` saturates (NaN is 0).
        Mp::Float(f) => Ok(f as u64),
        Mp::Nil => Ok(0),
        _ => Err(protocol(&format!("record: {what}"))),
    }
}

/// The MessagePack value at `*at` in `raw`; `*at` moves past it.
fn mp_value<'a>(raw: &'a [u8], at: &mut usize) -> StoreResult<Mp<'a>> {
    let short = || protocol("record: truncated");
    let mut take = |n: usize| -> StoreResult<&'a [u8]> {
        let end = at
            .checked_add(n)
            .filter(|&e| e <= raw.len())
            .ok_or_else(short)?;
        let b = &raw[*at..end];
        *at = end;
        Ok(b)
    };
    let be = |b: &[u8]| b.iter().fold(0u64, |acc, &x| (acc << 8) | u64::from(x));
    let marker = take(1)?[0];
    Ok(match marker {
        0x00..=0x7f => Mp::Int(i128::from(marker)),
        0xe0..=0xff => Mp::Int(i128::from(marker as i8)),
        0xc0 => Mp::Nil,
        0xc2 => Mp::Bool(false),
        0xc3 => Mp::Bool(true),
        0xcc..=0xcf => Mp::Int(i128::from(be(take(1 << (marker - 0xcc))?))),
        0xd0 => Mp::Int(i128::from(take(1)?[0] as i8)),
        0xd1 => Mp::Int(i128::from(i16::from_be_bytes(
            take(2)?.try_into().map_err(|_| short())?,
        ))),
        0xd2 => Mp::Int(i128::from(i32::from_be_bytes(
            take(4)?.try_into().map_err(|_| short())?,
        ))),
        0xd3 => Mp::Int(i128::from(i64::from_be_bytes(
            take(8)?.try_into().map_err(|_| short())?,
        ))),
        0xca => Mp::Float(f64::from(f32::from_be_bytes(
            take(4)?.try_into().map_err(|_| short())?,
        ))),
        0xcb => Mp::Float(f64::from_be_bytes(
            take(8)?.try_into().map_err(|_| short())?,
        )),
        0xa0..=0xbf => Mp::Str(take(usize::from(marker & 0x1f))?),
        0xd9 | 0xc4 => {
            let n = be(take(1)?);
            Mp::Str(take(n as usize)?)
        }
        0xda | 0xc5 => {
            let n = be(take(2)?);
            Mp::Str(take(n as usize)?)
        }
        0xdb | 0xc6 => {
            let n = be(take(4)?);
            Mp::Str(take(usize::try_from(n).map_err(|_| short())?)?)
        }
        _ => return Err(protocol("record: a value of an unknown type")),
    })
}

/// The `get` script's reply (14 values per job) to [`JobInfo`]s.
pub(crate) fn decode_jobs(v: Value) -> StoreResult<Vec<JobInfo>> {
    let items = array(v)?;
    if !items.len().is_multiple_of(19) {
        return Err(protocol("get reply length"));
    }
    items.chunks(19).map(job_info).collect()
}

/// The 19 values of one job in get's (and list_jobs's) reply.
fn job_info(c: &[Value]) -> StoreResult<JobInfo> {
    let opt = |v: &Value| -> StoreResult<Option<u64>> { Ok(opt_time(int(v)?)) };
    let id = JobId::new(string(&c[0])?).map_err(|_| protocol("bad id"))?;
    let kind = string(&c[6])?;
    Ok(JobInfo {
        id,
        state: state_of(&string(&c[1])?)?,
        due_at_ms: int(&c[2])? as u64,
        priority: int(&c[3])? as u32,
        attempts: int(&c[4])? as u32,
        created_at_ms: int(&c[5])? as u64,
        body: Body::from_stored(bytes(c[7].clone())?, kind == "j"),
        max_attempts: int(&c[8])? as u32,
        lease_ms: int(&c[9])? as u64,
        lease_deadline_ms: opt(&c[10])?,
        died_at_ms: opt(&c[11])?,
        last_error: if int(&c[12])? == 1 {
            Some(String::from_utf8_lossy(&bytes(c[13].clone())?).into_owned())
        } else {
            None
        },
        counts: JobCounts {
            timeouts: int(&c[14])? as u32,
            releases: int(&c[15])? as u32,
            buries: int(&c[16])? as u32,
            kicks: int(&c[17])? as u32,
        },
        key: match string(&c[18])? {
            k if k.is_empty() => None,
            k => Some(JobKey::new(k).map_err(|_| protocol("bad key"))?),
        },
    })
}

/// list_jobs's `{cursor, (23 per job)*}`: the jobs and the next HSCAN
/// cursor (`None` when the scan is complete).
pub(crate) fn decode_page(v: Value) -> StoreResult<(Vec<ListedJob>, Option<String>)> {
    let mut items = array(v)?;
    if items.is_empty() || !(items.len() - 1).is_multiple_of(23) {
        return Err(protocol("list_jobs reply length"));
    }
    let cursor = string(&items[0])?;
    let rest = items.split_off(1);
    let jobs = rest
        .chunks(23)
        .map(|c| {
            let retry = string(&c[21])?;
            Ok(ListedJob {
                info: job_info(&c[..19])?,
                max_attempts: opt_time(int(&c[19])?).map(|n| n as u32),
                lease_ms: opt_time(int(&c[20])?),
                retry: (!retry.is_empty())
                    .then(|| RetryPolicy::decode(&retry))
                    .flatten(),
                dedup_ms: opt_time(int(&c[22])?),
            })
        })
        .collect::<StoreResult<_>>()?;
    Ok((jobs, (cursor != "0").then_some(cursor)))
}

/// import_jobs's `{outcome, state}` per job.
pub(crate) fn decode_imported(v: Value, ids: &[JobId]) -> StoreResult<Vec<Imported>> {
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

/// The topic config hash to a [`TopicConfig`], defaults for missing fields.
pub(crate) fn decode_config(fields: &[(String, String)]) -> TopicConfig {
    let mut c = TopicConfig::default();
    for (k, v) in fields {
        match k.as_str() {
            "max_attempts" => c.max_attempts = v.parse().unwrap_or(c.max_attempts),
            "lease_ms" => c.lease_ms = v.parse().unwrap_or(c.lease_ms),
            "dead_cap" => c.dead_cap = v.parse().unwrap_or(c.dead_cap),
            "default_delay_ms" => c.default_delay_ms = v.parse().unwrap_or(c.default_delay_ms),
            "partitions" => c.partitions = v.parse().unwrap_or(c.partitions),
            "dedup_ms" => c.dedup_ms = v.parse().unwrap_or(c.dedup_ms),
            "paused" => c.paused = v == "1",
            "rate_limit" => c.rate_limit = RateLimit::decode(v),
            "key_rate_limit" => c.key_rate_limit = RateLimit::decode(v),
            "key_concurrency" => c.key_concurrency = v.parse().ok(),
            "retry" => {
                if let Some(r) = RetryPolicy::decode(v) {
                    c.retry = r;
                }
            }
            "delivery" => {
                if let Ok(d) = serde_json::from_str(v) {
                    c.delivery = d;
                }
            }
            _ => {}
        }
    }
    c
}

/// The due time encoded at the front of a ready-set member.
pub(crate) fn ready_member_due(member: &str) -> Option<u64> {
    u64::from_str_radix(member.get(..11)?, 16).ok()
}

#[cfg(test)]
mod record_tests {
    use super::*;

    /// A record as cmsgpack writes a job just enqueued: due and created as
    /// uint 64, priority as uint 16, seq and attempts as fixints, state,
    /// kind and body as fixstr, then a value after the eighth (ignored).
    fn enqueued(body: &[u8]) -> Vec<u8> {
        let mut r = vec![0xcf];
        r.extend_from_slice(&1_700_000_000_123u64.to_be_bytes());
        r.extend_from_slice(&[0xcd, 0x04, 0x00, 0x05, 0x02, 0xa1, b'y', 0xcf]);
        r.extend_from_slice(&1_700_000_000_000u64.to_be_bytes());
        r.extend_from_slice(&[0xa1, b'j', 0xa0 | body.len() as u8]);
        r.extend_from_slice(body);
        r.push(0xc0);
        r
    }

    /// (due, priority, attempts, json, body) of `raw`.
    fn lease_values(raw: &[u8]) -> (u64, u32, u32, bool, &[u8]) {
        let h = RecordHead::read(raw).unwrap();
        (h.due_ms, h.priority, h.attempts, h.json, &raw[h.body])
    }

    #[test]
    fn reads_what_a_lease_needs() {
        let raw = enqueued(br#"{"a":1}"#);
        assert_eq!(
            lease_values(&raw),
            (1_700_000_000_123, 1024, 2, true, &br#"{"a":1}"#[..])
        );
    }

    /// Each encoding a record's values may have reads as that value: every
    /// integer width and sign (u32::MAX as uint 32, attempts as uint 8,
    /// int 8/16/32/64 and negative fixints), a due as a float 32 (what
    /// cmsgpack writes for a number it cannot write as an integer) and a
    /// double, attempts left off (nil), bodies as fixstr, str 8/16/32 and
    /// bin 8/16/32, bytes of every value.
    #[test]
    fn reads_every_encoding_of_a_value() {
        let body: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
        let mut due_double = vec![0xcb];
        due_double.extend_from_slice(&1_700_000_000_000f64.to_be_bytes());
        let mut due_float = vec![0xca];
        due_float.extend_from_slice(&1_700_000_000_000f32.to_be_bytes());
        let float_due = 1_700_000_000_000f32 as u64;
        let mut due_i64 = vec![0xd3];
        due_i64.extend_from_slice(&1_700_000_000_000i64.to_be_bytes());
        // (due, priority, attempts as encoded; what they read as)
        type Numbers = (Vec<u8>, Vec<u8>, Vec<u8>, (u64, u32, u32));
        let numbers: [Numbers; 6] = [
            (
                due_double.clone(),
                vec![0xce, 0xff, 0xff, 0xff, 0xff],
                vec![0xc0],
                (1_700_000_000_000, u32::MAX, 0),
            ),
            (
                due_float,
                vec![0xcc, 0xc8],
                vec![0xcc, 0x80],
                (float_due, 200, 128),
            ),
            (
                due_i64,
                vec![0xd2, 0, 1, 0, 0],
                vec![0xd0, 0x7f],
                (1_700_000_000_000, 65_536, 127),
            ),
            (
                due_double.clone(),
                vec![0xd1, 0x01, 0x00],
                vec![0xce, 0, 1, 0, 0],
                (1_700_000_000_000, 256, 65_536),
            ),
            (
                due_double.clone(),
                vec![0x7f],
                vec![0x00],
                (1_700_000_000_000, 127, 0),
            ),
            // Out of range: a negative fixint and int 8 read as 0.
            (
                due_double,
                vec![0xff],
                vec![0xd0, 0x80],
                (1_700_000_000_000, 0, 0),
            ),
        ];
        let bodies: [(Vec<u8>, usize); 8] = [
            (vec![0xa0 | 31], 31),
            (vec![0xd9, 200], 200),
            (vec![0xda, 0x01, 0x00], 256),
            (vec![0xdb, 0x00, 0x01, 0x11, 0x70], 70_000),
            (vec![0xc4, 3], 3),
            (vec![0xc5, 0x01, 0x00], 256),
            (vec![0xc6, 0x00, 0x01, 0x11, 0x70], 70_000),
            (vec![0xa0], 0),
        ];
        for (due, priority, attempts, want) in &numbers {
            for (header, len) in &bodies {
                let mut r = due.clone();
                r.extend_from_slice(priority);
                r.push(0xd3); // seq as int 64
                r.extend_from_slice(&5i64.to_be_bytes());
                r.extend_from_slice(attempts);
                r.extend_from_slice(&[0xa1, b's', 0x00, 0xa1, b'b']);
                r.extend_from_slice(header);
                r.extend_from_slice(&body[..*len]);
                assert_eq!(
                    lease_values(&r),
                    (want.0, want.1, want.2, false, &body[..*len]),
                    "{:x?}",
                    &r[..r.len().min(40)]
                );
            }
        }
    }

    /// A record cut short anywhere, or holding what no record holds (a kind
    /// other than j or b, a body that is not a string, an unknown type), is
    /// an error, never a panic; a number out of range saturates and a
    /// fraction is cut off, as the reply integers Lua answered before.
    #[test]
    fn refuses_what_no_record_is() {
        let raw = enqueued(b"body");
        for cut in 0..raw.len() - 1 {
            assert!(RecordHead::read(&raw[..cut]).is_err(), "cut at {cut}");
        }
        let kind_at = raw.len() - 1 - 4 - 1 - 2;
        let mut bad = raw.clone();
        bad[kind_at + 1] = b'x';
        assert!(RecordHead::read(&bad).is_err(), "kind x");
        let mut bad = raw.clone();
        bad[kind_at + 2] = 0x04; // the body as a fixint
        assert!(RecordHead::read(&bad).is_err(), "body not a string");
        let mut bad = raw.clone();
        bad[12] = 0xc1; // seq: a marker MessagePack never uses
        assert!(RecordHead::read(&bad).is_err(), "unknown type");
        let mut bad = raw.clone();
        bad[9] = 0xc2; // priority false
        assert!(RecordHead::read(&bad).is_err(), "priority a boolean");
        let mut r = vec![0xcb];
        r.extend_from_slice(&1.5e12f64.to_be_bytes());
        r.extend_from_slice(&raw[9..]);
        assert_eq!(lease_values(&r).0, 1_500_000_000_000);
        let mut r = vec![0xca];
        r.extend_from_slice(&2f32.powi(64).to_be_bytes());
        r.extend_from_slice(&raw[9..]);
        assert_eq!(
            lease_values(&r).0,
            u64::MAX,
            "a due past u64::MAX saturates"
        );
        let mut r = raw[..9].to_vec();
        r.push(0xcf);
        r.extend_from_slice(&u64::MAX.to_be_bytes());
        r.extend_from_slice(&raw[12..]);
        assert_eq!(
            lease_values(&r).1,
            u32::MAX,
            "a priority past u32::MAX saturates"
        );
    }
}
