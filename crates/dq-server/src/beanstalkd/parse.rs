//! A command line (without its `\r\n`) into a typed [`Cmd`], or the reply
//! word refusing it; a `put`'s body follows the line on the wire and is read
//! by its handler. Pure: no I/O, never panics.
//!
//! It reads a line as beanstalkd 1.12 does, so a client sees the same word
//! for the same mistake: a NUL anywhere is `BAD_FORMAT`; the command is
//! the first name of the reference's table the line *starts with* (`put `,
//! `peek `, `peek-ready`, …, `reserve`, …, `stats`, …, `quit`, `pause-tube`;
//! `stats-job` without its space is `stats` with trailing bytes), so a bare
//! `put` or `delete` is `UNKNOWN_COMMAND` and `quitx` quits; numbers may be
//! preceded by several spaces; `reserve-with-timeout` reads its seconds as
//! C's `strtol` into an `int` (no digits: 0; negative: no timeout), `kick`
//! its bound as `strtoul` into an unsigned `int`.

use dq_core::{JobState, Topic};

/// A tube name: beanstalkd's rules (its characters are all topic characters
/// too; only a leading `-` is beanstalkd's own rule).
fn tube(name: &str) -> Option<Topic> {
    if name.is_empty() || name.len() > 200 || name.starts_with('-') || !name.chars().all(tube_char)
    {
        return None;
    }
    Topic::new(name).ok()
}

fn tube_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "-+/;.$_()".contains(c)
}

/// A command line, parsed (the body of a `put` follows it on the wire).
#[derive(Debug, Clone, PartialEq)]
pub enum Cmd {
    /// `put <pri> <delay> <ttr> <bytes>`
    Put {
        /// Priority (lower first).
        pri: u32,
        /// Seconds before it is ready.
        delay: u32,
        /// Seconds a reserve holds it.
        ttr: u32,
        /// Body length.
        bytes: usize,
        /// Bytes after the length: `BAD_FORMAT`, after the size is checked
        /// (a body too big is `JOB_TOO_BIG` first, as in the reference).
        trailing: bool,
    },
    /// `use <tube>`
    Use(Topic),
    /// `watch <tube>`
    Watch(Topic),
    /// `ignore <tube>`
    Ignore(Topic),
    /// `reserve` (None) or `reserve-with-timeout <seconds>` (None when
    /// negative: no timeout)
    Reserve(Option<u64>),
    /// `reserve-with-timeout`, as [`Cmd::Reserve`] but counted apart.
    ReserveWithTimeout(Option<u64>),
    /// `reserve-job <id>`
    ReserveJob(u64),
    /// `delete <id>`
    Delete(u64),
    /// `release <id> <pri> <delay>`
    Release {
        /// The job.
        id: u64,
        /// Its new priority.
        pri: u32,
        /// Seconds before it is ready again.
        delay: u32,
    },
    /// `bury <id> <pri>`
    Bury {
        /// The job.
        id: u64,
        /// Its new priority.
        pri: u32,
    },
    /// `touch <id>`
    Touch(u64),
    /// `peek <id>`
    Peek(u64),
    /// `peek-ready` (Ready), `peek-delayed` (Scheduled), `peek-buried` (Dead)
    PeekState(JobState),
    /// `kick <bound>`
    Kick(u32),
    /// `kick-job <id>`
    KickJob(u64),
    /// `stats-job <id>`
    StatsJob(u64),
    /// `stats-tube <tube>`
    StatsTube(Topic),
    /// `stats`
    Stats,
    /// `pause-tube <tube> <delay>`
    PauseTube(Topic, u32),
    /// `list-tubes`
    ListTubes,
    /// `list-tube-used`
    ListTubeUsed,
    /// `list-tubes-watched`
    ListTubesWatched,
    /// `quit`
    Quit,
    /// `auth <key>` (dq's own): act as an API key from now on.
    Auth(String),
}

const BAD: &str = "BAD_FORMAT";

/// The reference's table: each name, in the order it is tried.
const NAMES: &[&str] = &[
    "put ",
    "peek ",
    "peek-ready",
    "peek-delayed",
    "peek-buried",
    "reserve-with-timeout ",
    "reserve-job ",
    "reserve",
    "delete ",
    "release ",
    "bury ",
    "kick ",
    "kick-job ",
    "touch ",
    "stats-job ",
    "stats-tube ",
    "stats",
    "use ",
    "watch ",
    "ignore ",
    "list-tubes-watched",
    "list-tube-used",
    "list-tubes",
    "quit",
    "pause-tube",
];

/// Parses a command line (without its `\r\n`). The error is the reply
/// word (`BAD_FORMAT`, `UNKNOWN_COMMAND`). Never panics, whatever the bytes.
pub fn parse(text: &str) -> Result<Cmd, &'static str> {
    if text.contains('\0') {
        return Err(BAD);
    }
    if let Some(key) = text.strip_prefix("auth ") {
        // dq's own command (not in the reference's table).
        return match key {
            "" => Err(BAD),
            k => Ok(Cmd::Auth(k.to_string())),
        };
    }
    let Some(name) = NAMES.iter().find(|n| text.starts_with(**n)) else {
        return Err("UNKNOWN_COMMAND");
    };
    let rest = &text[name.len()..];
    // The commands without arguments: nothing may follow.
    let bare = |cmd: Cmd| if rest.is_empty() { Ok(cmd) } else { Err(BAD) };
    let id = || whole_u64(rest).ok_or(BAD);
    let named = || tube(rest).ok_or(BAD);
    match *name {
        "put " => {
            let (pri, r) = u32_at(rest).ok_or(BAD)?;
            let (delay, r) = u32_at(r).ok_or(BAD)?;
            let (ttr, r) = u32_at(r).ok_or(BAD)?;
            let (bytes, r) = u32_at(r).ok_or(BAD)?;
            Ok(Cmd::Put {
                pri,
                delay,
                ttr,
                bytes: bytes as usize,
                trailing: !r.is_empty(),
            })
        }
        "peek " => Ok(Cmd::Peek(id()?)),
        "peek-ready" => bare(Cmd::PeekState(JobState::Ready)),
        "peek-delayed" => bare(Cmd::PeekState(JobState::Scheduled)),
        "peek-buried" => bare(Cmd::PeekState(JobState::Dead)),
        "reserve-with-timeout " => Ok(Cmd::ReserveWithTimeout(strtol_seconds(rest)?)),
        "reserve-job " => Ok(Cmd::ReserveJob(id()?)),
        "reserve" => bare(Cmd::Reserve(None)),
        "delete " => Ok(Cmd::Delete(id()?)),
        "release " => {
            let (id, r) = u64_at(rest).ok_or(BAD)?;
            let (pri, r) = u32_at(r).ok_or(BAD)?;
            let delay = whole_u32(r).ok_or(BAD)?;
            Ok(Cmd::Release { id, pri, delay })
        }
        "bury " => {
            let (id, r) = u64_at(rest).ok_or(BAD)?;
            let pri = whole_u32(r).ok_or(BAD)?;
            Ok(Cmd::Bury { id, pri })
        }
        "kick " => Ok(Cmd::Kick(strtoul_u32(rest)?)),
        "kick-job " => Ok(Cmd::KickJob(id()?)),
        "touch " => Ok(Cmd::Touch(id()?)),
        "stats-job " => Ok(Cmd::StatsJob(id()?)),
        "stats-tube " => Ok(Cmd::StatsTube(named()?)),
        "stats" => bare(Cmd::Stats),
        "use " => Ok(Cmd::Use(named()?)),
        "watch " => Ok(Cmd::Watch(named()?)),
        "ignore " => Ok(Cmd::Ignore(named()?)),
        "list-tubes-watched" => bare(Cmd::ListTubesWatched),
        "list-tube-used" => bare(Cmd::ListTubeUsed),
        "list-tubes" => bare(Cmd::ListTubes),
        "quit" => Ok(Cmd::Quit),
        "pause-tube" => {
            // A name (after any spaces), then the delay.
            let r = rest.trim_start_matches(' ');
            let end = r.find(|c: char| !tube_char(c)).unwrap_or(r.len());
            if end == 0 {
                return Err(BAD);
            }
            let delay = whole_u32(&r[end..]).ok_or(BAD)?;
            Ok(Cmd::PauseTube(tube(&r[..end]).ok_or(BAD)?, delay))
        }
        _ => Err("UNKNOWN_COMMAND"),
    }
}

/// An unsigned number after any spaces (a digit first), and what follows
/// it; None beyond `max`.
fn number_at(s: &str, max: u64) -> Option<(u64, &str)> {
    let s = s.trim_start_matches(' ');
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    if end == 0 {
        return None;
    }
    let n: u64 = s[..end].parse().ok()?;
    (n <= max).then_some((n, &s[end..]))
}

fn u64_at(s: &str) -> Option<(u64, &str)> {
    number_at(s, u64::MAX)
}

fn u32_at(s: &str) -> Option<(u32, &str)> {
    number_at(s, u64::from(u32::MAX)).map(|(n, r)| (n as u32, r))
}

/// A number that is all that is left.
fn whole_u64(s: &str) -> Option<u64> {
    u64_at(s).and_then(|(n, r)| r.is_empty().then_some(n))
}

fn whole_u32(s: &str) -> Option<u32> {
    u32_at(s).and_then(|(n, r)| r.is_empty().then_some(n))
}

/// C's leading white space (`isspace`).
fn c_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\x0b' | '\x0c' | '\r')
}

/// Sign and digits as C's `strtol`/`strtoul` read them: `None` when there
/// are no digits, `Err` when the magnitude overflows 64 bits.
fn c_number(s: &str) -> Result<Option<(bool, u64)>, &'static str> {
    let s = s.trim_start_matches(c_space);
    let (neg, s) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    if end == 0 {
        return Ok(None);
    }
    s[..end].parse().map(|n| Some((neg, n))).map_err(|_| BAD)
}

/// `reserve-with-timeout`'s seconds: `strtol` (a `long`, an overflow is
/// `BAD_FORMAT`, no digits read as 0) kept in an `int`; a negative
/// timeout waits for ever (None).
fn strtol_seconds(s: &str) -> Result<Option<u64>, &'static str> {
    let v: i64 = match c_number(s)? {
        None => 0,
        Some((false, n)) => i64::try_from(n).map_err(|_| BAD)?,
        Some((true, n)) if n <= i64::MAX as u64 + 1 => (n as i64).wrapping_neg(),
        Some(_) => return Err(BAD),
    };
    let int = v as i32;
    Ok(u64::try_from(int).ok())
}

/// `kick`'s bound: `strtoul` (no digits or an overflow is `BAD_FORMAT`; a
/// minus negates modulo 2^64) kept in an unsigned `int`.
fn strtoul_u32(s: &str) -> Result<u32, &'static str> {
    match c_number(s)? {
        None => Err(BAD),
        Some((neg, n)) => Ok(if neg { n.wrapping_neg() } else { n } as u32),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_parse_as_the_reference_reads_them() {
        let put = |pri, delay, ttr, bytes, trailing| {
            Ok(Cmd::Put {
                pri,
                delay,
                ttr,
                bytes,
                trailing,
            })
        };
        assert_eq!(parse("put 1 2 3 4"), put(1, 2, 3, 4, false));
        assert_eq!(parse("put 4294967295 0 0 0"), put(u32::MAX, 0, 0, 0, false));
        assert_eq!(parse("put 4294967296 0 0 0"), Err(BAD));
        assert_eq!(parse("put -1 0 0 0"), Err(BAD));
        assert_eq!(parse("put 1 2 3"), Err(BAD));
        assert_eq!(parse("put  1  2 3 4"), put(1, 2, 3, 4, false), "spaces");
        assert_eq!(parse("put 1 2 3 4 x"), put(1, 2, 3, 4, true));
        assert_eq!(parse("put"), Err("UNKNOWN_COMMAND"), "put needs its space");
        assert_eq!(
            parse("delete 18446744073709551615"),
            Ok(Cmd::Delete(u64::MAX))
        );
        assert_eq!(parse("delete 18446744073709551616"), Err(BAD));
        assert_eq!(parse("delete  5"), Ok(Cmd::Delete(5)));
        assert_eq!(parse("delete 5 "), Err(BAD));
        assert_eq!(parse("delete"), Err("UNKNOWN_COMMAND"));
        assert_eq!(parse("use a(b)"), Ok(Cmd::Use(Topic::new("a(b)").unwrap())));
        assert_eq!(parse("use a{b}"), Err(BAD), "not a tube character");
        assert_eq!(parse("use -a"), Err(BAD));
        assert_eq!(parse("use  a"), Err(BAD));
        assert_eq!(parse("peek-ready"), Ok(Cmd::PeekState(JobState::Ready)));
        assert_eq!(parse("peek-readyx"), Err(BAD));
        assert_eq!(parse("PUT 1 2 3 4"), Err("UNKNOWN_COMMAND"), "case matters");
        assert_eq!(parse(""), Err("UNKNOWN_COMMAND"));
        assert_eq!(parse("quit now"), Ok(Cmd::Quit), "quit by its prefix");
        assert_eq!(parse("stats\0"), Err(BAD), "a NUL anywhere");
        assert_eq!(parse("stats-job"), Err(BAD), "stats with trailing bytes");
        assert_eq!(
            parse("reserve-job"),
            Err(BAD),
            "reserve with trailing bytes"
        );
        assert_eq!(parse("kick-job"), Err("UNKNOWN_COMMAND"));
    }

    #[test]
    fn timeouts_and_bounds_read_as_c_reads_them() {
        let rwt = |s: &str| parse(&format!("reserve-with-timeout {s}"));
        assert_eq!(rwt("5"), Ok(Cmd::ReserveWithTimeout(Some(5))));
        assert_eq!(rwt(" 5x"), Ok(Cmd::ReserveWithTimeout(Some(5))));
        assert_eq!(
            rwt("x"),
            Ok(Cmd::ReserveWithTimeout(Some(0))),
            "no digits: 0"
        );
        assert_eq!(
            rwt("-1"),
            Ok(Cmd::ReserveWithTimeout(None)),
            "negative: no timeout"
        );
        assert_eq!(
            rwt("4294967296"),
            Ok(Cmd::ReserveWithTimeout(Some(0))),
            "an int"
        );
        assert_eq!(rwt("2147483648"), Ok(Cmd::ReserveWithTimeout(None)));
        assert_eq!(rwt("99999999999999999999"), Err(BAD), "beyond a long");
        assert_eq!(parse("kick 3"), Ok(Cmd::Kick(3)));
        assert_eq!(parse("kick  3 4"), Ok(Cmd::Kick(3)));
        assert_eq!(parse("kick 0x"), Ok(Cmd::Kick(0)));
        assert_eq!(parse("kick -1"), Ok(Cmd::Kick(u32::MAX)));
        assert_eq!(parse("kick x"), Err(BAD));
        assert_eq!(parse("kick"), Err("UNKNOWN_COMMAND"));
        assert_eq!(
            parse("pause-tubex 1"),
            Ok(Cmd::PauseTube(Topic::new("x").unwrap(), 1)),
            "the name follows at once"
        );
        assert_eq!(
            parse("pause-tube  t  2"),
            Ok(Cmd::PauseTube(Topic::new("t").unwrap(), 2))
        );
        assert_eq!(parse("pause-tube t"), Err(BAD));
        assert_eq!(parse("pause-tube"), Err(BAD));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4000))]

        /// Whatever the line — any text, or command words with hostile
        /// arguments — the parser answers a command or a reply word, never
        /// panics.
        #[test]
        fn parse_never_panics(line in "\\PC{0,60}") {
            let _ = parse(&line);
        }

        #[test]
        fn parse_never_panics_on_near_commands(
            word in "(put|use|watch|ignore|reserve|reserve-with-timeout|reserve-job|delete|release|bury|touch|peek|peek-ready|peek-delayed|peek-buried|kick|kick-job|stats-job|stats-tube|stats|pause-tube|list-tubes|list-tube-used|list-tubes-watched|quit|)",
            args in proptest::collection::vec("(-?[0-9]{0,25}|[A-Za-z0-9+/;.$_()-]{0,210}| |\\PC{0,5})", 0..6),
        ) {
            let line = std::iter::once(word).chain(args).collect::<Vec<_>>().join(" ");
            match parse(&line) {
                Ok(_) | Err("BAD_FORMAT") | Err("UNKNOWN_COMMAND") => {}
                Err(other) => proptest::prop_assert!(false, "{line:?}: {other}"),
            }
        }

        /// A well-formed put reads back its numbers.
        #[test]
        fn put_reads_its_numbers(pri: u32, delay: u32, ttr: u32, bytes: u32) {
            let got = parse(&format!("put {pri} {delay} {ttr} {bytes}"));
            proptest::prop_assert_eq!(got, Ok(Cmd::Put { pri, delay, ttr, bytes: bytes as usize, trailing: false }));
        }
    }
}
