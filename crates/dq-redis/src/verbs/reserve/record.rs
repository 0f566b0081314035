//! Reading a job record as cmsgpack wrote it (common.lua's layout): the
//! first eight values, which a lease needs, without unpacking the rest but
//! to find the trace context (value 25) of a record longer than eight.

use dq_core::store::StoreResult;

use crate::decode::protocol;

/// The first eight values of a job record (common.lua: due, priority, seq,
/// attempts, state, created, kind, body), as cmsgpack writes them, and
/// where its trace context is: what a lease needs. Every value a record can hold is read (integers of each
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
    /// Where the trace context's text (value 25, `tc`) is in the record,
    /// when it has one.
    pub(crate) trace: Option<std::ops::Range<usize>>,
}

/// The place of the trace context among a record's values (1-based, as
/// common.lua counts them).
const TRACE_VALUE: usize = 25;

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
            trace: trace_at(raw, at),
        })
    }
}

/// Where value 25 of a record is, read on from `at`, the end of value 8: a
/// record ends with its last value set, so one of eight values (a job as
/// enqueued, nearly every one) ends right there and costs one comparison;
/// a longer one is read on value by value (at most 17, a string skipped by
/// its length). A tail that
/// cannot be read is no trace context: the script has unpacked the whole
/// record already, and a lease already written is never failed for it.
fn trace_at(raw: &[u8], mut at: usize) -> Option<std::ops::Range<usize>> {
    for _ in 9..TRACE_VALUE {
        if at >= raw.len() {
            return None;
        }
        mp_value(raw, &mut at).ok()?;
    }
    match mp_value(raw, &mut at).ok()? {
        Mp::Str(b) => Some(at - b.len()..at),
        _ => None,
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

#[cfg(test)]
mod tests {
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

    /// A record of `n` values (9 to 25) after the eight of `enqueued`:
    /// values 9 to 24 as `tail` (nil when it runs out), and, for 25, the
    /// text `tc`.
    fn longer(body: &[u8], tail: &[&[u8]], tc: Option<&str>) -> Vec<u8> {
        let mut r = enqueued(body);
        r.pop(); // enqueued's own ninth value
        let mut vals: Vec<Vec<u8>> = tail.iter().map(|v| v.to_vec()).collect();
        if let Some(tc) = tc {
            vals.resize(16, vec![0xc0]);
            let mut s = if tc.len() < 32 {
                vec![0xa0 | tc.len() as u8]
            } else if tc.len() < 256 {
                vec![0xd9, tc.len() as u8]
            } else {
                let mut h = vec![0xda];
                h.extend_from_slice(&(tc.len() as u16).to_be_bytes());
                h
            };
            s.extend_from_slice(tc.as_bytes());
            vals.push(s);
        }
        for v in vals {
            r.extend_from_slice(&v);
        }
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

    /// The trace context is value 25 when the record has 25 values, and
    /// nothing before: a record of eight values ends at its body, one of 9
    /// to 24 (wheel flag, counts, dedup window, key, put delay, hand-outs)
    /// has none, and what follows the body is never taken for it.
    #[test]
    fn finds_the_trace_context_at_value_25() {
        const TC: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let trace = |raw: &[u8]| {
            RecordHead::read(raw)
                .unwrap()
                .trace
                .map(|r| raw[r].to_vec())
        };
        let mut plain = enqueued(b"body");
        plain.pop();
        assert_eq!(trace(&plain), None, "8 values");
        // Wheel flag (16), dedup window (21), key (22), put delay (23),
        // hand-outs given back (24): the values a record may end with.
        let mut tail: Vec<&[u8]> = vec![&[0xc0]; 7];
        tail.push(&[0xc3]);
        assert_eq!(trace(&longer(b"body", &tail, None)), None, "16 values");
        tail.extend_from_slice(&[&[0x01], &[0x00], &[0x02], &[0x03]]);
        tail.push(&[0xcd, 0x75, 0x30]);
        tail.push(b"\xa3key");
        tail.push(&[0xcb, 0x40, 0x59, 0, 0, 0, 0, 0, 0]);
        tail.push(&[0x07]);
        assert_eq!(tail.len(), 16);
        assert_eq!(trace(&longer(b"body", &tail, None)), None, "24 values");
        let state = format!("{TC} rojo=00f067aa0ba902b7,{}", "k=v,".repeat(60));
        for tc in [TC, state.as_str()] {
            let raw = longer(br#"{"a":1}"#, &tail, Some(tc));
            assert_eq!(trace(&raw).as_deref(), Some(tc.as_bytes()), "25 values");
            assert_eq!(lease_values(&raw).4, br#"{"a":1}"#);
            let raw = longer(b"", &[], Some(tc));
            assert_eq!(trace(&raw).as_deref(), Some(tc.as_bytes()), "9-24 nil");
        }
        // A tail that cannot be read is no trace, not an error.
        let mut raw = longer(b"body", &[], Some(TC));
        raw.truncate(raw.len() - 3);
        assert_eq!(trace(&raw), None);
        let mut raw = longer(b"body", &[], None);
        raw.extend_from_slice(&[0xc1]);
        assert_eq!(trace(&raw), None);
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
