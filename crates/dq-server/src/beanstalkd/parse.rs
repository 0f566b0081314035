//! A command line (without its `\r\n`) into a typed [`Cmd`], or the reply
//! word refusing it; a `put`'s body follows the line on the wire and is read
//! by its handler. Pure: no I/O, never panics.

use dq_core::{JobState, Topic};

/// A tube name: beanstalkd's rules (its characters are all topic characters
/// too; only a leading `-` is beanstalkd's own rule).
fn tube(name: &str) -> Option<Topic> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || "-+/;.$_()".contains(c);
    if name.is_empty() || name.len() > 200 || name.starts_with('-') || !name.chars().all(allowed) {
        return None;
    }
    Topic::new(name).ok()
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
    },
    /// `use <tube>`
    Use(Topic),
    /// `watch <tube>`
    Watch(Topic),
    /// `ignore <tube>`
    Ignore(Topic),
    /// `reserve` (None) or `reserve-with-timeout <seconds>`
    Reserve(Option<u64>),
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
    Kick(u64),
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

/// Parses a command line (without its `\r\n`). The error is the reply
/// word: `BAD_FORMAT` for a known command with wrong arguments, else
/// `UNKNOWN_COMMAND`. Never panics, whatever the bytes.
pub fn parse(text: &str) -> Result<Cmd, &'static str> {
    const BAD: &str = "BAD_FORMAT";
    let parts: Vec<&str> = text.split(' ').collect();
    let args = &parts[1..];
    let id = |i: usize| num::<u64>(args[i]).ok_or(BAD);
    let u32_at = |i: usize| num::<u32>(args[i]).ok_or(BAD);
    let tube_at = |i: usize| tube(args[i]).ok_or(BAD);
    Ok(match (parts[0], args.len()) {
        ("put", 4) => Cmd::Put {
            pri: u32_at(0)?,
            delay: u32_at(1)?,
            ttr: u32_at(2)?,
            bytes: num::<usize>(args[3]).ok_or(BAD)?,
        },
        ("use", 1) => Cmd::Use(tube_at(0)?),
        ("watch", 1) => Cmd::Watch(tube_at(0)?),
        ("ignore", 1) => Cmd::Ignore(tube_at(0)?),
        ("reserve", 0) => Cmd::Reserve(None),
        ("reserve-with-timeout", 1) => Cmd::Reserve(Some(id(0)?)),
        ("reserve-job", 1) => Cmd::ReserveJob(id(0)?),
        ("delete", 1) => Cmd::Delete(id(0)?),
        ("release", 3) => Cmd::Release {
            id: id(0)?,
            pri: u32_at(1)?,
            delay: u32_at(2)?,
        },
        ("bury", 2) => Cmd::Bury {
            id: id(0)?,
            pri: u32_at(1)?,
        },
        ("touch", 1) => Cmd::Touch(id(0)?),
        ("peek", 1) => Cmd::Peek(id(0)?),
        ("peek-ready", 0) => Cmd::PeekState(JobState::Ready),
        ("peek-delayed", 0) => Cmd::PeekState(JobState::Scheduled),
        ("peek-buried", 0) => Cmd::PeekState(JobState::Dead),
        ("kick", 1) => Cmd::Kick(id(0)?),
        ("kick-job", 1) => Cmd::KickJob(id(0)?),
        ("stats-job", 1) => Cmd::StatsJob(id(0)?),
        ("stats-tube", 1) => Cmd::StatsTube(tube_at(0)?),
        ("pause-tube", 2) => Cmd::PauseTube(tube_at(0)?, u32_at(1)?),
        ("stats", 0) => Cmd::Stats,
        ("list-tubes", 0) => Cmd::ListTubes,
        ("list-tube-used", 0) => Cmd::ListTubeUsed,
        ("list-tubes-watched", 0) => Cmd::ListTubesWatched,
        ("quit", 0) => Cmd::Quit,
        ("auth", 1) if !args[0].is_empty() => Cmd::Auth(args[0].to_string()),
        (
            "put"
            | "use"
            | "watch"
            | "ignore"
            | "reserve"
            | "reserve-with-timeout"
            | "delete"
            | "release"
            | "bury"
            | "touch"
            | "peek"
            | "peek-ready"
            | "peek-delayed"
            | "peek-buried"
            | "kick"
            | "kick-job"
            | "stats-job"
            | "stats-tube"
            | "stats"
            | "list-tubes"
            | "list-tube-used"
            | "list-tubes-watched"
            | "quit"
            | "pause-tube"
            | "reserve-job"
            | "auth",
            _,
        ) => return Err(BAD),
        _ => return Err("UNKNOWN_COMMAND"),
    })
}

fn num<T: std::str::FromStr>(s: &str) -> Option<T> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_parse_as_the_reference_reads_them() {
        assert_eq!(
            parse("put 1 2 3 4"),
            Ok(Cmd::Put {
                pri: 1,
                delay: 2,
                ttr: 3,
                bytes: 4
            })
        );
        assert_eq!(
            parse("put 4294967295 0 0 0").map(|_| ()),
            Ok(()),
            "u32 priority"
        );
        assert_eq!(parse("put 4294967296 0 0 0"), Err("BAD_FORMAT"));
        assert_eq!(parse("put -1 0 0 0"), Err("BAD_FORMAT"));
        assert_eq!(parse("put 1 2 3"), Err("BAD_FORMAT"));
        assert_eq!(
            parse("put  1 2 3 4"),
            Err("BAD_FORMAT"),
            "arguments are separated by one space"
        );
        assert_eq!(
            parse("delete 18446744073709551615"),
            Ok(Cmd::Delete(u64::MAX))
        );
        assert_eq!(parse("delete 18446744073709551616"), Err("BAD_FORMAT"));
        assert_eq!(
            parse("use a(b)"),
            Ok(Cmd::Use(Topic::new("a(b)").unwrap())),
            "every tube character"
        );
        assert_eq!(parse("use a{b}"), Err("BAD_FORMAT"), "not a tube character");
        assert_eq!(parse("use -a"), Err("BAD_FORMAT"));
        assert_eq!(parse("peek-ready"), Ok(Cmd::PeekState(JobState::Ready)));
        assert_eq!(parse("PUT 1 2 3 4"), Err("UNKNOWN_COMMAND"), "case matters");
        assert_eq!(parse(""), Err("UNKNOWN_COMMAND"));
        assert_eq!(parse("quit now"), Err("BAD_FORMAT"));
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
        fn put_reads_its_numbers(pri: u32, delay: u32, ttr: u32, bytes in 0usize..1_000_000) {
            let got = parse(&format!("put {pri} {delay} {ttr} {bytes}"));
            proptest::prop_assert_eq!(got, Ok(Cmd::Put { pri, delay, ttr, bytes }));
        }
    }
}
