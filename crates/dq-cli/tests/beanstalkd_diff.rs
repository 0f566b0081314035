//! `dq serve --beanstalkd` side by side with the reference, Debian's
//! `beanstalkd` 1.12: each scenario sends the same bytes, over raw sockets,
//! to a fresh beanstalkd and to a fresh `dq serve` (on the embedded store,
//! and on a private Redis), at the same moments, and the replies must be
//! the same, job ids and clock readings normalized and nothing else.
//!
//! A scenario is a script, one step a line:
//! - `A: <line>` — connection A sends the line (`\r\n` added) and reads
//!   one reply; `A: <line> | <body>` sends the body after it (a put);
//! - `A! <bytes>` — sends bytes as written (`\r`, `\n`, `\0`, `\xNN`
//!   escapes), reads one reply; `A~ <bytes>` sends them and reads nothing;
//! - `A< <ms>` — reads the reply pending on A, waiting up to `ms`;
//!   `A. <ms>` — records whether a reply arrives within `ms` (none expected);
//! - `A close` — A hangs up; `sleep <ms>` — time passes on both servers;
//! - `usr1` — SIGUSR1 to the server (beanstalkd's drain mode).
//!
//! `{1}`, `{2}`, … in a step are the first, second, … job ids the server
//! has answered in this scenario. Connections open at their first step.

mod support;

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use dq_testkit::{RedisServer, free_port};
use support::Dq;
use support::beanstalk::{Raw, Reply};

/// What a scenario's replies are compared on: the reply lines, and the
/// YAML fields of `stats*`, with ids numbered by first appearance.
type Transcript = Vec<String>;

/// A server under test: where it listens and how to signal it.
trait Server {
    fn port(&self) -> u16;
    fn pid(&self) -> u32;
}

/// Debian's beanstalkd on a free port, killed when dropped.
struct Beanstalkd {
    child: Child,
    port: u16,
}

impl Beanstalkd {
    async fn start() -> Beanstalkd {
        dq_testkit::ensure_package("/usr/bin/beanstalkd", &["beanstalkd"]);
        loop {
            let port = free_port();
            let mut child = Command::new("/usr/bin/beanstalkd")
                .args(["-l", "127.0.0.1", "-p", &port.to_string()])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn beanstalkd");
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                if child.try_wait().unwrap().is_some() {
                    break; // the port was taken meanwhile: pick another
                }
                if tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .is_ok()
                {
                    return Beanstalkd { child, port };
                }
                assert!(Instant::now() < deadline, "beanstalkd did not listen");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    }
}

impl Drop for Beanstalkd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server for Beanstalkd {
    fn port(&self) -> u16 {
        self.port
    }
    fn pid(&self) -> u32 {
        self.child.id()
    }
}

/// `dq serve --beanstalkd` on a store.
struct DqServer {
    dq: Dq,
    port: u16,
}

impl Server for DqServer {
    fn port(&self) -> u16 {
        self.port
    }
    fn pid(&self) -> u32 {
        self.dq.pid()
    }
}

/// The store a fresh `dq serve` runs on.
enum Store {
    Embedded,
    Redis(RedisServer),
}

impl Store {
    /// A fresh `dq serve` on an empty store (the Redis flushed).
    async fn start(&self, dir: &std::path::Path) -> DqServer {
        let data = dir.to_str().unwrap().to_string();
        let url = match self {
            Store::Redis(r) => {
                let ok = Command::new("redis-cli")
                    .args(["-p", &r.port().to_string(), "flushall"])
                    .stdout(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success());
                assert!(ok, "redis-cli flushall");
                r.url()
            }
            Store::Embedded => String::new(),
        };
        loop {
            let port = free_port();
            let listen = format!("127.0.0.1:{port}");
            let mut args = match self {
                Store::Embedded => vec!["--data-dir", data.as_str()],
                Store::Redis(_) => vec!["--redis", url.as_str()],
            };
            args.extend(["--beanstalkd", listen.as_str()]);
            if let Some(dq) = Dq::try_start_env(&[], &args).await {
                // One connection, as the reference's start is probed with
                // (`total-connections` counts it on both).
                drop(Raw::connect(port).await);
                return DqServer { dq, port };
            }
        }
    }
}

/// Ids as they appear: the k-th distinct one is `{k}`.
#[derive(Default)]
struct Ids(Vec<String>);

impl Ids {
    fn name(&mut self, id: &str) -> String {
        let k = match self.0.iter().position(|i| i == id) {
            Some(k) => k,
            None => {
                self.0.push(id.to_string());
                self.0.len() - 1
            }
        };
        format!("{{{}}}", k + 1)
    }

    /// The step with `{k}` replaced by the k-th id.
    fn fill(&self, step: &str) -> String {
        let mut out = step.to_string();
        for (k, id) in self.0.iter().enumerate() {
            out = out.replace(&format!("{{{}}}", k + 1), id);
        }
        out
    }
}

/// Fields whose values are this process's, not the protocol's: compared
/// on their presence only.
const ANY_VALUE: &[&str] = &[
    "pid",
    "rusage-utime",
    "rusage-stime",
    "uptime",
    "hostname",
    "os",
    "platform",
];

/// The field dq adds to `stats` (its own version), left out.
const DQ_ADDITION: &str = "dq-version";

/// A reply, normalized: ids named by appearance; YAML bodies one field a
/// line, values of [`ANY_VALUE`] fields (and the instance `id` of `stats`)
/// replaced; the length of `stats`'s body too (it follows those values).
fn normalize(r: &Reply, ids: &mut Ids) -> Vec<String> {
    let mut w: Vec<String> = r.words().iter().map(ToString::to_string).collect();
    match w.first().map(String::as_str) {
        Some("INSERTED" | "BURIED" | "RESERVED" | "FOUND") if w.len() > 1 => {
            w[1] = ids.name(&w[1]);
        }
        _ => {}
    }
    let mut out = vec![w.join(" ")];
    if let Some(body) = &r.body {
        let text = String::from_utf8_lossy(body).into_owned();
        if !text.starts_with("---\n") {
            out.push(format!("  body {text:?}"));
            return out;
        }
        if text.contains("\npid: ") {
            // `stats`: its length follows the values compared on presence.
            out[0] = "OK <length>".into();
        }
        let is_job_stats = text.contains("\nstate: ");
        for l in text.lines().skip(1) {
            let (k, v) = l.split_once(": ").unwrap_or((l, ""));
            if k == DQ_ADDITION {
                continue;
            }
            let v = if ANY_VALUE.contains(&k) || (k == "id" && !is_job_stats) {
                "<any>".to_string()
            } else if k == "id" {
                ids.name(v)
            } else {
                v.to_string()
            };
            out.push(format!("  {k}: {v}"));
        }
    }
    out
}

fn unescape(s: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 1 < b.len() {
            match b[i + 1] {
                b'r' => out.push(b'\r'),
                b'n' => out.push(b'\n'),
                b'0' => out.push(0),
                b'\\' => out.push(b'\\'),
                b'x' => {
                    out.push(u8::from_str_radix(&s[i + 2..i + 4], 16).unwrap());
                    i += 2;
                }
                other => panic!("unknown escape \\{}", other as char),
            }
            i += 2;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

/// How long a step waits for a reply it expects (both servers answer
/// within milliseconds; a missing reply is recorded, not waited for long).
const REPLY_WITHIN: Duration = Duration::from_secs(3);

/// Runs a script against a server; its transcript.
async fn run(script: &str, server: &dyn Server) -> Transcript {
    let mut conns: HashMap<String, Raw> = HashMap::new();
    let mut ids = Ids::default();
    let mut out = Vec::new();
    for raw_step in script.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let step = ids.fill(raw_step);
        if let Some(ms) = step.strip_prefix("sleep ") {
            tokio::time::sleep(Duration::from_millis(ms.parse().unwrap())).await;
            continue;
        }
        if step == "usr1" {
            let ok = Command::new("kill")
                .args(["-USR1", &server.pid().to_string()])
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "kill -USR1");
            // The signal is handled before the next command is read.
            tokio::time::sleep(Duration::from_millis(200)).await;
            out.push("usr1".into());
            continue;
        }
        let split = step.find([':', '!', '~', '<', '.', ' ']).expect("a step");
        let (name, rest) = step.split_at(split);
        if rest == " close" {
            conns.remove(name);
            // The server sees the hang-up before the next step.
            tokio::time::sleep(Duration::from_millis(100)).await;
            out.push(format!("{name} close"));
            continue;
        }
        if !conns.contains_key(name) {
            conns.insert(name.to_string(), Raw::connect(server.port()).await);
        }
        let c = conns.get_mut(name).unwrap();
        let (kind, arg) = rest.split_at(1);
        let arg = arg.strip_prefix(' ').unwrap_or(arg);
        // `close` is no beanstalkd command: `B: close` would send it and
        // leave B connected (a scenario bug once); a hang-up is `B close`.
        assert!(
            !(kind == ":" && arg == "close"),
            "{step:?}: write `{name} close` to hang up"
        );
        let reply = match kind {
            ":" => {
                let bytes = match arg.split_once(" | ") {
                    Some((line, body)) => format!("{line}\r\n{body}\r\n"),
                    None => format!("{arg}\r\n"),
                };
                c.send(bytes.as_bytes()).await;
                c.reply_within(REPLY_WITHIN).await
            }
            "!" => {
                c.send(&unescape(arg)).await;
                c.reply_within(REPLY_WITHIN).await
            }
            "~" => {
                c.send(&unescape(arg)).await;
                out.push(format!("{name}{}", raw_step.split_at(split).1));
                continue;
            }
            "<" | "." => {
                c.reply_within(Duration::from_millis(arg.parse().unwrap()))
                    .await
            }
            other => panic!("unknown step kind {other:?} in {raw_step:?}"),
        };
        let shown = raw_step.split_at(split).1;
        match reply {
            Some(r) => {
                let mut lines = normalize(&r, &mut ids);
                lines[0] = format!("{name}{shown} → {}", lines[0]);
                out.extend(lines);
            }
            None => out.push(format!("{name}{shown} → <no reply>")),
        }
    }
    out
}

/// A scenario: its name and its script.
struct Scenario {
    name: &'static str,
    script: &'static str,
}

const fn s(name: &'static str, script: &'static str) -> Scenario {
    Scenario { name, script }
}

fn scenarios() -> Vec<Scenario> {
    vec![
        s(
            "put, reserve, delete with every counter",
            "A: use work
             A: put 5 0 10 5 | hello
             A: stats-job {1}
             A: stats-tube work
             B: watch work
             B: reserve
             B: stats-job {1}
             A: stats-tube work
             B: delete {1}
             A: stats-tube work
             A: stats-job {1}
             A: list-tubes
             A: stats",
        ),
        s(
            "release, bury, kick, counters of a job",
            "A: put 1 0 10 1 | a
             A: reserve
             A: release {1} 7 0
             A: stats-job {1}
             A: reserve
             A: bury {1} 9
             A: stats-job {1}
             A: peek-buried
             A: kick 5
             A: stats-job {1}
             A: reserve
             A: release {1} 2 1
             A: stats-job {1}
             A: peek-delayed
             A: kick 1
             A: stats-job {1}
             A: reserve
             A: bury {1} 3
             A: kick-job {1}
             A: stats-job {1}
             A: put 0 100 10 1 | b
             A: kick-job {2}
             A: stats-job {2}
             A: kick-job {2}
             A: stats",
        ),
        s(
            "kick of buried and delayed jobs, kick-job",
            "A: use k
             A: put 1 0 10 1 | a
             A: put 2 0 10 1 | b
             A: put 3 100 10 1 | c
             B: watch k
             B: ignore default
             B: reserve
             B: bury {1} 1
             B: reserve
             B: bury {2} 2
             A: stats-tube k
             A: peek-buried
             A: kick 1
             A: peek-buried
             A: stats-tube k
             A: kick 10
             A: kick 10
             A: peek-delayed
             A: stats-tube k
             A: kick-job {3}
             A: kick-job {3}
             A: stats-tube k
             A: stats",
        ),
        // After a DEADLINE_SOON answer beanstalkd does not wake up for the
        // holder's TTR: the job stays reserved past its deadline (seen for
        // 4 s) until the holder's connection next does something. dq gives
        // it back on time. So the holder speaks (`list-tubes-watched`) after
        // the sleep, and both servers have timed the job out by the next step.
        s(
            "TTR runs out, disconnect and quit give jobs back",
            "A: use r
             A: put 0 0 1 1 | t
             B: watch r
             B: ignore default
             B: reserve
             B: stats-tube r
             B: reserve-with-timeout 3
             sleep 1300
             B: list-tubes-watched
             A: stats-tube r
             A: peek-ready
             B: reserve
             B close
             A: stats-tube r
             C: watch r
             C: reserve
             C: quit
             A: stats-tube r
             A: stats",
        ),
        s(
            "peek of every state, not found, touch",
            "A: peek-ready
             A: peek-delayed
             A: peek-buried
             A: peek 999
             A: put 0 0 10 1 | x
             A: put 0 100 10 1 | y
             A: peek-ready
             A: peek-delayed
             A: peek {2}
             A: reserve
             A: touch {1}
             A: stats-job {1}
             A: touch {2}
             A: release {2} 0 0
             A: bury {2} 0
             A: delete 999
             A: kick-job 999
             A: stats-job 999
             A: reserve-job {2}
             A: stats-job {2}
             A: reserve-job {2}
             A: stats",
        ),
        s(
            "tubes are made by use and watch, gone when unused and empty",
            "A: use alpha
             A: list-tubes
             A: stats-tube alpha
             B: watch beta
             B: list-tubes
             B: stats-tube beta
             B: list-tubes-watched
             B: ignore default
             B: ignore beta
             B: list-tube-used
             A: use default
             A: stats-tube alpha
             B: watch gamma
             B: ignore beta
             B: stats-tube beta
             A: use gamma
             A: put 0 0 10 1 | g
             B close
             A: use default
             A: stats-tube gamma
             A: list-tubes
             A: stats",
        ),
        s(
            "pause-tube",
            "A: pause-tube nothing 10
             A: use p
             A: pause-tube p 10
             A: stats-tube p
             A: put 0 0 10 1 | p
             B: watch p
             B: ignore default
             B: reserve-with-timeout 1
             A: stats-tube p
             A: pause-tube p 0
             B: reserve-with-timeout 2
             A: stats-tube p
             A: stats",
        ),
        // The holder speaks after the sleep, as in "TTR runs out" above.
        s(
            "TTR runs out; a closed connection gives its jobs back unchanged",
            "A: put 0 0 1 1 | t
             A: reserve
             A: reserve-with-timeout 3
             sleep 1300
             A: list-tubes-watched
             A: stats-job {1}
             A: reserve
             A close
             B: stats-job {1}
             B: reserve
             B: quit
             C: stats-job {1}
             C: stats",
        ),
        s(
            "DEADLINE_SOON for a held job, and for a waiting reserve",
            "A: put 0 0 2 1 | d
             A: reserve
             A: reserve-with-timeout 0
             A~ reserve-with-timeout 5\\r\\n
             A< 3000
             A: stats-job {1}
             A: delete {1}
             A: put 0 0 1 1 | e
             A: reserve
             A: reserve-with-timeout 1
             A: stats",
        ),
        s(
            "reserve with timeout: waits, times out, wakes on a put",
            "A: reserve-with-timeout 0
             A: reserve-with-timeout 1
             A~ reserve-with-timeout 5\\r\\n
             sleep 100
             B: stats
             B: put 0 0 10 1 | w
             A< 2000
             A: stats",
        ),
        s(
            "ready order is priority, then id, after a release or kick",
            "A: put 5 0 10 1 | a
             A: put 5 0 10 1 | b
             A: reserve
             A: release {1} 5 0
             A: reserve
             A: release {1} 5 0
             A: put 5 0 10 1 | c
             A: reserve
             A: bury {1} 5
             A: kick 1
             A: reserve-with-timeout 0
             A: reserve-with-timeout 0
             A: reserve-with-timeout 0",
        ),
        s(
            "delayed and released jobs come back in id order, keeping their delay",
            "A: put 5 1 10 1 | a
             A: put 5 0 10 1 | b
             A: reserve
             A: release {2} 5 1
             A: put 5 0 10 1 | c
             A: stats-job {1}
             sleep 1300
             A: reserve-with-timeout 0
             A: reserve-with-timeout 0
             A: reserve-with-timeout 0
             A: stats-job {2}
             A: stats-job {3}",
        ),
        s(
            "command lines as the reference parses them",
            "A: put
             A: delete
             A: release
             A: bury
             A: touch
             A: kick
             A: kick-job
             A: peek
             A: use
             A: watch
             A: ignore
             A: stats-job
             A: stats-tube
             A: reserve-job
             A: reserve-with-timeout
             A: pause-tube
             A: delete  5
             A: peek  5
             A: kick  3
             A: release  5 1 1
             A: stats-job  5
             A: reserve-with-timeout  0
             A! stats\\0\\r\\n
             A! use\\0a\\r\\n
             A: stats x
             A: stats-tube
             A: list-tubes x
             A: peek-readyx
             A: reservex
             A: reserve-with-timeout x
             A: kick x
             A: kick 0x
             A: kick -1
             A: use -a
             A: use a b
             A: use a{b}
             A: watch a b
             A: pause-tube x
             A: pause-tubex 1
             A: put 1 2 3
             A: put -1 0 1 1
             A: put 1 0 1 x
             A: put 4294967296 0 1 1
             A: put 0 0 1 2 | abc
             A: put 0 0 1 70000
             A! junk\\r\\n
             A: PUT 0 0 1 1
             A: list-tubes-watchedx
             A: list-tube-usedx
             A: stats",
        ),
        s(
            "overlong lines and a body too big",
            "A: use aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa
             A: use bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb
             A: list-tube-used
             A: put 0 0 1 1 | yz
             A! put 0 0 1 1\\r\\nab\\r\\n
             A: stats",
        ),
        s(
            "drain mode: puts refused",
            "A: put 0 0 10 1 | a
             A: stats
             usr1
             A: put 0 0 10 1 | b
             A: stats",
        ),
        s(
            "drain mode: workers go on taking jobs",
            "A: put 0 0 10 1 | a
             A: put 0 1 10 1 | b
             usr1
             A: reserve-with-timeout 0
             A: delete {1}
             B: reserve-with-timeout 3
             B: release {2} 0 0
             B: reserve-job {2}
             B: delete {2}
             B: stats",
        ),
    ]
}

/// Every scenario against a fresh reference and a fresh `dq serve` on
/// `store`, at the same time; the differences, scenario by scenario.
async fn compare_with_the_reference(store: Store) {
    let mut failures = Vec::new();
    let start = Instant::now();
    for sc in scenarios() {
        let dir = tempfile::tempdir().unwrap();
        let (reference, dq) = tokio::join!(Beanstalkd::start(), store.start(dir.path()));
        let (want, got) = tokio::join!(run(sc.script, &reference), run(sc.script, &dq));
        drop((reference, dq));
        let diff = diff(&want, &got);
        if !diff.is_empty() {
            failures.push(format!("{}:\n{}", sc.name, diff.join("\n")));
        }
    }
    eprintln!("{} scenarios in {:?}", scenarios().len(), start.elapsed());
    assert!(failures.is_empty(), "\n{}", failures.join("\n\n"));
}

/// The transcripts' differences, line by line (a longest common
/// subsequence: reference `-`, dq `+`, with the line before each for
/// context); empty when they are the same.
fn diff(want: &[String], got: &[String]) -> Vec<String> {
    let (n, m) = (want.len(), got.len());
    let mut lcs = vec![vec![0usize; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i][j] = if want[i] == got[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::new();
    let mut last_same: Option<&str> = None;
    let context = |out: &mut Vec<String>, last: &mut Option<&str>| {
        if let Some(l) = last.take() {
            out.push(format!("  {l}"));
        }
    };
    while i < n || j < m {
        if i < n && j < m && want[i] == got[j] {
            last_same = Some(&want[i]);
            i += 1;
            j += 1;
        } else if j == m || (i < n && lcs[i + 1][j] >= lcs[i][j + 1]) {
            context(&mut out, &mut last_same);
            out.push(format!("- {}", want[i]));
            i += 1;
        } else {
            context(&mut out, &mut last_same);
            out.push(format!("+ {}", got[j]));
            j += 1;
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_store_answers_as_beanstalkd() {
    compare_with_the_reference(Store::Embedded).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_answers_as_beanstalkd() {
    compare_with_the_reference(Store::Redis(RedisServer::start())).await;
}
