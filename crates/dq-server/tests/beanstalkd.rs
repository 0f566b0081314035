//! The beanstalkd listener over raw sockets, on both stores: framing, the
//! replies of the reference, malformed input, and that its jobs are dq jobs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use dq_server::beanstalkd::BeanstalkdConfig;
use dq_server::{Server, ServerConfig};
use dq_testkit::RedisServer;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// A running server with the listener; dropping it stops nothing the test
/// needs afterwards (the runtime ends with the test).
struct Bs {
    addr: String,
    http: String,
    _dir: Option<tempfile::TempDir>,
    _redis: Option<RedisServer>,
}

async fn start(store: &str) -> Bs {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (store, dir, redis): (Arc<dyn dq_core::Store>, _, _) = match store {
        "embedded" => {
            let dir = tempfile::tempdir().unwrap();
            let s = dq_embedded::EmbeddedStore::open(dir.path()).unwrap();
            (Arc::new(s), Some(dir), None)
        }
        _ => {
            let r = RedisServer::start();
            let s = dq_redis::RedisStore::new(&dq_redis::RedisConfig {
                url: r.url(),
                ..Default::default()
            })
            .unwrap();
            (Arc::new(s), None, Some(r))
        }
    };
    let (addr, http) = serve_bs(store, ServerConfig::default(), false).await;
    Bs {
        addr,
        http,
        _dir: dir,
        _redis: redis,
    }
}

/// Runs a server over `store` with `config` and a beanstalkd listener on
/// a free port (over TLS when `tls`); returns the listener's and the HTTP
/// API's addresses once the listener accepts.
async fn serve_bs(
    store: Arc<dyn dq_core::Store>,
    config: ServerConfig,
    tls: bool,
) -> (String, String) {
    let config = ServerConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        beanstalkd: Some(BeanstalkdConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            max_job_size: 1000,
            key: None,
            auth_required: false,
            tls,
        }),
        ..config
    };
    let mut server = Server::new(config, store, Arc::new(dq_core::MonotonicClock::new()));
    let listener = server.bind().await.unwrap();
    let addr = server.bind_beanstalkd().await.unwrap().unwrap().to_string();
    let http = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        server
            .run(listener, std::future::pending::<()>())
            .await
            .unwrap();
    });
    let deadline = Instant::now() + Duration::from_secs(5);
    while TcpStream::connect(&addr).await.is_err() {
        assert!(Instant::now() < deadline, "listener up");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    (addr, http)
}

/// One client connection.
struct C {
    r: BufReader<tokio::net::tcp::OwnedReadHalf>,
    w: tokio::net::tcp::OwnedWriteHalf,
}

impl C {
    async fn new(bs: &Bs) -> C {
        let (r, w) = TcpStream::connect(&bs.addr).await.unwrap().into_split();
        C {
            r: BufReader::new(r),
            w,
        }
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.w.write_all(bytes).await.unwrap();
    }

    async fn line(&mut self) -> String {
        let mut l = String::new();
        tokio::time::timeout(Duration::from_secs(10), self.r.read_line(&mut l))
            .await
            .expect("a reply")
            .unwrap();
        assert!(l.ends_with("\r\n"), "{l:?}");
        l.trim_end().to_string()
    }

    /// Sends a command line, returns the reply line.
    async fn cmd(&mut self, c: &str) -> String {
        self.send(format!("{c}\r\n").as_bytes()).await;
        self.line().await
    }

    /// The body after a `RESERVED`/`FOUND`/`OK` line with its size last.
    async fn data(&mut self, head: &str) -> Vec<u8> {
        let n: usize = head.rsplit(' ').next().unwrap().parse().unwrap();
        let mut b = vec![0u8; n + 2];
        self.r.read_exact(&mut b).await.unwrap();
        assert!(b.ends_with(b"\r\n"));
        b.truncate(n);
        b
    }

    async fn put(&mut self, pri: u32, delay: u32, ttr: u32, body: &[u8]) -> u64 {
        let mut m = format!("put {pri} {delay} {ttr} {}\r\n", body.len()).into_bytes();
        m.extend_from_slice(body);
        m.extend_from_slice(b"\r\n");
        self.send(&m).await;
        let l = self.line().await;
        l.strip_prefix("INSERTED ")
            .unwrap_or_else(|| panic!("{l}"))
            .parse()
            .unwrap()
    }

    /// `reserve-with-timeout`: the id and body, or the reply line.
    async fn reserve(&mut self, timeout_s: u32) -> Result<(u64, Vec<u8>), String> {
        let l = self.cmd(&format!("reserve-with-timeout {timeout_s}")).await;
        if !l.starts_with("RESERVED ") {
            return Err(l);
        }
        let id = l.split(' ').nth(1).unwrap().parse().unwrap();
        Ok((id, self.data(&l).await))
    }
}

async fn on_both<F, Fut>(f: F)
where
    F: Fn(Bs) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    for store in ["embedded", "redis"] {
        eprintln!("store {store}");
        f(start(store).await).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_reserve_delete_with_bodies_as_sent() {
    on_both(|bs| async move {
        let mut c = C::new(&bs).await;
        let body = b"a\r\nb\0\xff end".to_vec();
        let id = c.put(10, 0, 30, &body).await;
        let id2 = c.put(10, 0, 30, b"").await;
        assert!(id2 > id, "ids increase: {id} {id2}");
        let l = c.cmd("peek-ready").await;
        assert_eq!(l, format!("FOUND {id} {}", body.len()));
        assert_eq!(c.data(&l).await, body);
        let (got, b) = c.reserve(0).await.unwrap();
        assert_eq!((got, b), (id, body.clone()));
        // The job is a dq job: the HTTP API sees it, reserved.
        let v: serde_json::Value = reqwest::get(format!("{}/v1/topics/default/jobs/{id}", bs.http))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(v["state"], "reserved", "{v}");
        let l = c.cmd(&format!("stats-job {id}")).await;
        let yaml = String::from_utf8(c.data(&l).await).unwrap();
        assert!(yaml.starts_with("---\n"), "{yaml}");
        assert!(
            yaml.contains("state: reserved\n") && yaml.contains("ttr: 30\n"),
            "{yaml}"
        );
        assert_eq!(c.cmd(&format!("delete {id}")).await, "DELETED");
        assert_eq!(c.cmd(&format!("delete {id}")).await, "NOT_FOUND");
        // An empty body, deleted while ready.
        assert_eq!(c.cmd(&format!("delete {id2}")).await, "DELETED");
        assert_eq!(c.reserve(0).await, Err("TIMED_OUT".into()));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tubes_use_watch_ignore() {
    on_both(|bs| async move {
        let mut c = C::new(&bs).await;
        assert_eq!(c.cmd("list-tube-used").await, "USING default");
        assert_eq!(c.cmd("use emails").await, "USING emails");
        let id = c.put(1, 0, 10, b"x").await;
        assert_eq!(
            c.reserve(0).await,
            Err("TIMED_OUT".into()),
            "default is watched, not emails"
        );
        assert_eq!(c.cmd("watch emails").await, "WATCHING 2");
        assert_eq!(c.cmd("ignore default").await, "WATCHING 1");
        assert_eq!(c.cmd("ignore emails").await, "NOT_IGNORED");
        let l = c.cmd("list-tubes-watched").await;
        assert_eq!(c.data(&l).await, b"---\n- emails\n");
        let (got, _) = c.reserve(0).await.unwrap();
        assert_eq!(got, id);
        let l = c.cmd("list-tubes").await;
        let tubes = String::from_utf8(c.data(&l).await).unwrap();
        assert!(
            tubes.contains("- default\n") && tubes.contains("- emails\n"),
            "{tubes}"
        );
        let l = c.cmd("stats-tube emails").await;
        let yaml = String::from_utf8(c.data(&l).await).unwrap();
        assert!(yaml.contains("current-jobs-reserved: 1\n"), "{yaml}");
        assert_eq!(c.cmd("stats-tube nosuchtube").await, "NOT_FOUND");
        assert_eq!(c.cmd("pause-tube nosuchtube 1").await, "NOT_FOUND");
        // Paused for 1 s: nothing comes out of it before.
        let next = c.put(1, 0, 10, b"y").await;
        // Timed from before the pause is sent: the pause ends 1 s after the
        // server took it, so no sooner than 1 s after this instant (timed
        // after the next command, a slow reply would eat into the second).
        let paused = Instant::now();
        assert_eq!(c.cmd("pause-tube emails 1").await, "PAUSED");
        let l = c.cmd("stats-tube emails").await;
        let yaml = String::from_utf8(c.data(&l).await).unwrap();
        assert!(yaml.contains("pause: 1\n"), "{yaml}");
        let (got, _) = c.reserve(3).await.unwrap();
        assert_eq!(got, next);
        assert!(
            paused.elapsed() >= Duration::from_millis(990),
            "{:?}",
            paused.elapsed()
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delay_release_bury_kick_touch() {
    on_both(|bs| async move {
        let mut c = C::new(&bs).await;
        let start = Instant::now();
        let id = c.put(5, 1, 10, b"later").await;
        let l = c.cmd("peek-delayed").await;
        assert_eq!(l, format!("FOUND {id} 5"));
        assert_eq!(c.data(&l).await, b"later");
        assert_eq!(c.reserve(0).await, Err("TIMED_OUT".into()));
        let (got, _) = c.reserve(3).await.unwrap();
        assert_eq!(got, id);
        assert!(start.elapsed() >= Duration::from_secs(1), "never early");
        assert_eq!(c.cmd(&format!("touch {id}")).await, "TOUCHED");
        assert_eq!(c.cmd(&format!("release {id} 5 0")).await, "RELEASED");
        assert_eq!(
            c.cmd(&format!("release {id} 5 0")).await,
            "NOT_FOUND",
            "no longer held"
        );
        let (got, _) = c.reserve(1).await.unwrap();
        assert_eq!(got, id, "a released job keeps its id");
        assert_eq!(c.cmd(&format!("bury {id} 5")).await, "BURIED");
        let l = c.cmd("peek-buried").await;
        assert_eq!(l, format!("FOUND {id} 5"));
        c.data(&l).await;
        assert_eq!(c.reserve(0).await, Err("TIMED_OUT".into()));
        assert_eq!(c.cmd("kick 10").await, "KICKED 1");
        let (got, _) = c.reserve(1).await.unwrap();
        assert_eq!(got, id, "a kicked job keeps its id");
        assert_eq!(c.cmd(&format!("bury {id} 5")).await, "BURIED");
        assert_eq!(c.cmd(&format!("kick-job {id}")).await, "KICKED");
        assert_eq!(c.cmd(&format!("peek {id}")).await, format!("FOUND {id} 5"));
        c.data(&format!("FOUND {id} 5")).await;
        // reserve-job takes it by id, delayed or buried alike.
        let later = c.put(5, 100, 10, b"much later").await;
        let l = c.cmd(&format!("reserve-job {later}")).await;
        assert_eq!(l, format!("RESERVED {later} 10"));
        assert_eq!(c.data(&l).await, b"much later");
        let mut other = C::new(&bs).await;
        assert_eq!(
            other.cmd(&format!("reserve-job {later}")).await,
            "NOT_FOUND",
            "held"
        );
        assert_eq!(c.cmd(&format!("bury {later} 5")).await, "BURIED");
        let l = other.cmd(&format!("reserve-job {later}")).await;
        assert_eq!(l, format!("RESERVED {later} 10"));
        other.data(&l).await;
        assert_eq!(other.cmd(&format!("delete {later}")).await, "DELETED");
        assert_eq!(c.cmd("reserve-job 99999999").await, "NOT_FOUND");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttr_expiry_deadline_soon_and_a_closed_connection_give_jobs_back() {
    on_both(|bs| async move {
        let mut a = C::new(&bs).await;
        let mut b = C::new(&bs).await;
        let id = a.put(1, 0, 1, b"t").await;
        let (got, _) = a.reserve(0).await.unwrap();
        let held = Instant::now();
        assert_eq!(got, id);
        // The last second of the TTR: DEADLINE_SOON, as nothing else is ready.
        assert_eq!(a.cmd("reserve-with-timeout 0").await, "DEADLINE_SOON");
        // The TTR passes: another client gets it, not before.
        let (got, _) = b.reserve(5).await.unwrap();
        assert_eq!(got, id);
        let waited = held.elapsed();
        assert!(
            waited >= Duration::from_millis(990),
            "TTR cut short: {waited:?}"
        );
        assert!(
            waited < Duration::from_millis(2500),
            "TTR expiry late: {waited:?}"
        );
        assert_eq!(
            a.cmd(&format!("delete {id}")).await,
            "NOT_FOUND",
            "another holds it"
        );
        // b closes without deleting: the job is ready again at once.
        drop(b);
        let quick = Instant::now();
        let (got, _) = a.reserve(2).await.unwrap();
        assert_eq!(got, id);
        assert!(
            quick.elapsed() < Duration::from_millis(900),
            "{:?}",
            quick.elapsed()
        );
        a.send(b"quit\r\n").await;
        let mut rest = String::new();
        assert_eq!(a.r.read_line(&mut rest).await.unwrap(), 0, "quit closes");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_input_gets_the_reference_errors_and_stays_in_sync() {
    on_both(|bs| async move {
        let mut c = C::new(&bs).await;
        assert_eq!(c.cmd("bogus").await, "UNKNOWN_COMMAND");
        assert_eq!(c.cmd("put 1 0 10").await, "BAD_FORMAT");
        assert_eq!(c.cmd("delete abc").await, "BAD_FORMAT");
        assert_eq!(c.cmd("delete -1").await, "BAD_FORMAT");
        assert_eq!(c.cmd("delete 999999").await, "NOT_FOUND");
        assert_eq!(c.cmd("use -bad").await, "BAD_FORMAT");
        assert_eq!(
            c.cmd(&format!("use {}", "t".repeat(201))).await,
            "BAD_FORMAT"
        );
        // A line over 224 bytes: answered, the rest of it dropped.
        assert_eq!(c.cmd(&"x".repeat(300)).await, "BAD_FORMAT");
        // A body over max-job-size (1000 here): JOB_TOO_BIG, body skipped.
        let big = vec![b'z'; 1001];
        let mut m = b"put 1 0 10 1001\r\n".to_vec();
        m.extend_from_slice(&big);
        m.extend_from_slice(b"\r\n");
        c.send(&m).await;
        assert_eq!(c.line().await, "JOB_TOO_BIG");
        // A body not followed by CRLF.
        c.send(b"put 1 0 10 3\r\nabcXY").await;
        assert_eq!(c.line().await, "EXPECTED_CRLF");
        // A delay beyond dq's largest (3650 days): refused, body consumed.
        c.send(b"put 1 4294967295 10 2\r\nhi\r\n").await;
        assert_eq!(c.line().await, "BAD_FORMAT");
        assert_eq!(c.cmd("list-tube-used").await, "USING default", "in sync");
        // A release refused for its delay leaves the job held.
        let id = c.put(1, 0, 10, b"held").await;
        assert_eq!(c.reserve(0).await.unwrap().0, id);
        assert_eq!(
            c.cmd(&format!("release {id} 1 4294967295")).await,
            "BAD_FORMAT"
        );
        assert_eq!(
            c.cmd(&format!("delete {id}")).await,
            "DELETED",
            "still held"
        );
        assert_eq!(
            c.reserve(0).await,
            Err("TIMED_OUT".into()),
            "nothing stored"
        );
        // A client that announces a body and disconnects leaves nothing.
        let mut d = C::new(&bs).await;
        d.send(b"put 1 0 10 50\r\nonly part").await;
        drop(d);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(c.reserve(0).await, Err("TIMED_OUT".into()));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_order_is_priority_then_id_across_watched_tubes() {
    on_both(|bs| async move {
        let mut c = C::new(&bs).await;
        assert_eq!(c.cmd("use one").await, "USING one");
        let low = c.put(9, 0, 10, b"low").await;
        let first = c.put(5, 0, 10, b"first").await;
        assert_eq!(c.cmd("use two").await, "USING two");
        let second = c.put(5, 0, 10, b"second").await;
        let urgent = c.put(1, 0, 10, b"urgent").await;
        for t in ["one", "two"] {
            assert!(c.cmd(&format!("watch {t}")).await.starts_with("WATCHING"));
        }
        let mut got = Vec::new();
        for _ in 0..4 {
            got.push(c.reserve(1).await.unwrap().0);
        }
        assert_eq!(got, [urgent, first, second, low]);
    })
    .await;
}

/// Many connections at once, and clients that stall half-way through a line
/// or a body, do not hold up anyone else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_connections_and_stalled_clients_do_not_stall_others() {
    let bs = start("embedded").await;
    let mut stalled = Vec::new();
    for i in 0..50 {
        let mut s = C::new(&bs).await;
        if i % 2 == 0 {
            s.send(b"put 1 0 10 100\r\nonly part of the body").await;
        } else {
            s.send(b"list-tube-us").await;
        }
        stalled.push(s);
    }
    let started = Instant::now();
    let conns = futures::future::join_all((0..2000).map(|_| C::new(&bs))).await;
    let mut answered = 0;
    for mut c in conns {
        assert_eq!(c.cmd("list-tube-used").await, "USING default");
        answered += 1;
    }
    assert_eq!(answered, 2000);
    let mut c = C::new(&bs).await;
    let id = c.put(1, 0, 10, b"still works").await;
    assert_eq!(c.reserve(0).await.unwrap().0, id);
    eprintln!(
        "2000 connections answered in {:?} beside 50 stalled ones",
        started.elapsed()
    );
    drop(stalled);
}

/// Every character beanstalkd allows in a tube name (`A-Za-z0-9-+/;.$_()`)
/// names a dq topic, reachable through the HTTP API with `/` as `%2F`; a
/// name starting with `-` is refused as by beanstalkd.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tube_names_take_every_beanstalkd_character() {
    on_both(|bs| async move {
        let mut c = C::new(&bs).await;
        let tube = "mail/out+retry;v1$(x)_.";
        assert_eq!(c.cmd(&format!("use {tube}")).await, format!("USING {tube}"));
        let id = c.put(1, 0, 10, b"hi").await;
        let path = "mail%2Fout%2Bretry%3Bv1%24%28x%29_.";
        let v: serde_json::Value = reqwest::get(format!("{}/v1/topics/{path}/jobs/{id}", bs.http))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(
            (v["topic"].as_str(), v["state"].as_str()),
            (Some(tube), Some("ready")),
            "{v}"
        );
        assert_eq!(c.cmd("use -dash").await, "BAD_FORMAT");
        assert_eq!(c.cmd(&format!("watch {tube}")).await, "WATCHING 2");
        let (got, body) = c.reserve(0).await.unwrap();
        assert_eq!((got, body.as_slice()), (id, &b"hi"[..]));
    })
    .await;
}

/// `release <id> <pri> <delay>` and `bury <id> <pri>` set the job's
/// priority, as the reference does: it decides the next hand-out order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_and_bury_set_the_priority() {
    on_both(|bs| async move {
        let mut c = C::new(&bs).await;
        let x = c.put(10, 0, 30, b"x").await;
        let y = c.put(20, 0, 30, b"y").await;
        let (got, _) = c.reserve(0).await.unwrap();
        assert_eq!(got, x);
        assert_eq!(c.cmd(&format!("release {x} 30 0")).await, "RELEASED");
        let l = c.cmd(&format!("stats-job {x}")).await;
        let yaml = String::from_utf8(c.data(&l).await).unwrap();
        assert!(yaml.contains("pri: 30\n"), "{yaml}");
        let (first, _) = c.reserve(0).await.unwrap();
        assert_eq!(first, y, "y (20) now before x (30)");
        let (second, _) = c.reserve(0).await.unwrap();
        assert_eq!(second, x);
        assert_eq!(c.cmd(&format!("bury {x} 7")).await, "BURIED");
        let l = c.cmd(&format!("stats-job {x}")).await;
        let yaml = String::from_utf8(c.data(&l).await).unwrap();
        assert!(
            yaml.contains("pri: 7\n") && yaml.contains("state: buried\n"),
            "{yaml}"
        );
    })
    .await;
}

/// `stats-job` counts a job's history — releases, burials, kicks and TTRs
/// that ran out — and `stats-tube` / `stats` count the urgent ready jobs
/// (priority below 1024).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_count_a_jobs_history_and_the_urgent_jobs() {
    on_both(|bs| async move {
        let mut c = C::new(&bs).await;
        let stats_job = |id: u64| format!("stats-job {id}");
        let x = c.put(10, 0, 1, b"x").await;
        let (got, _) = c.reserve(0).await.unwrap();
        assert_eq!(got, x);
        assert_eq!(c.cmd(&format!("release {x} 10 0")).await, "RELEASED");
        let (got, _) = c.reserve(0).await.unwrap();
        assert_eq!(got, x);
        assert_eq!(c.cmd(&format!("bury {x} 10")).await, "BURIED");
        assert_eq!(c.cmd(&format!("kick-job {x}")).await, "KICKED");
        // Reserved by another connection, which lets the 1 s TTR run out.
        let mut other = C::new(&bs).await;
        let (got, _) = other.reserve(0).await.unwrap();
        assert_eq!(got, x);
        let (again, _) = c.reserve(5).await.unwrap();
        assert_eq!(again, x, "back after its TTR");
        let l = c.cmd(&stats_job(x)).await;
        let yaml = String::from_utf8(c.data(&l).await).unwrap();
        for want in [
            "releases: 1\n",
            "buries: 1\n",
            "kicks: 1\n",
            "timeouts: 1\n",
        ] {
            assert!(yaml.contains(want), "{want}: {yaml}");
        }
        assert_eq!(c.cmd(&format!("delete {x}")).await, "DELETED");
        c.put(5, 0, 10, b"urgent").await;
        c.put(1023, 0, 10, b"urgent too").await;
        c.put(1024, 0, 10, b"not urgent").await;
        let l = c.cmd("stats-tube default").await;
        let yaml = String::from_utf8(c.data(&l).await).unwrap();
        assert!(yaml.contains("current-jobs-urgent: 2\n"), "{yaml}");
        assert!(yaml.contains("current-jobs-ready: 3\n"), "{yaml}");
        let l = c.cmd("stats").await;
        let yaml = String::from_utf8(c.data(&l).await).unwrap();
        assert!(yaml.contains("current-jobs-urgent: 2\n"), "{yaml}");
    })
    .await;
}

/// Creates an API key through the HTTP API of `bs` (the first one from
/// loopback without a bearer, the others with `admin`); returns its secret.
async fn key(bs: &Bs, admin: Option<&str>, name: &str, scopes: &[&str]) -> String {
    let mut r = reqwest::Client::new()
        .post(format!("{}/v1/keys", bs.http))
        .json(&serde_json::json!({"name": name, "scopes": scopes}));
    if let Some(a) = admin {
        r = r.bearer_auth(a);
    }
    let r = r.send().await.unwrap();
    assert_eq!(r.status().as_u16(), 201);
    let v: serde_json::Value = r.json().await.unwrap();
    v["secret"].as_str().unwrap().to_string()
}

/// Once keys exist, a connection does nothing before `auth <key>`; then
/// each command needs its scope (put: enqueue on the used tube, reserve:
/// consume on every watched one, peek and stats: read), jobs of other
/// tubes are not found, and a revoked key stops at the next command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_with_a_key_and_scopes_per_command() {
    on_both(|bs| async move {
        let admin = key(&bs, None, "root", &["admin"]).await;
        let producer = key(&bs, Some(&admin), "producer", &["enqueue:orders"]).await;
        let worker = key(
            &bs,
            Some(&admin),
            "worker",
            &["consume:orders", "read:orders"],
        )
        .await;

        let mut c = C::new(&bs).await;
        assert_eq!(c.cmd("list-tubes").await, "UNAUTHORIZED");
        assert_eq!(c.cmd("use orders").await, "UNAUTHORIZED");
        assert_eq!(c.cmd("auth dqk_nope").await, "UNAUTHORIZED");
        assert_eq!(
            c.cmd("auth").await,
            "UNKNOWN_COMMAND",
            "bare, as every command"
        );
        assert_eq!(c.cmd(&format!("auth {producer}")).await, "OK");
        assert_eq!(c.cmd("use orders").await, "USING orders");
        let id = c.put(0, 0, 60, b"order 45").await;
        assert_eq!(c.cmd("use other").await, "USING other");
        // A refused put's body is dropped: the connection stays in step.
        c.send(b"put 0 0 60 4\r\nstop\r\n").await;
        assert_eq!(c.line().await, "FORBIDDEN");
        assert_eq!(c.cmd("list-tube-used").await, "USING other");
        assert_eq!(c.cmd("watch orders").await, "WATCHING 2");
        assert_eq!(c.cmd("ignore default").await, "WATCHING 1");
        assert_eq!(c.reserve(0).await.unwrap_err(), "FORBIDDEN");
        assert_eq!(
            c.cmd(&format!("peek {id}")).await,
            "NOT_FOUND",
            "no read scope"
        );

        let mut w = C::new(&bs).await;
        assert_eq!(w.cmd(&format!("auth {worker}")).await, "OK");
        assert_eq!(
            w.reserve(0).await.unwrap_err(),
            "FORBIDDEN",
            "default is watched"
        );
        w.cmd("watch orders").await;
        w.cmd("ignore default").await;
        let (got, body) = w.reserve(0).await.unwrap();
        assert_eq!((got, body.as_slice()), (id, b"order 45".as_slice()));
        let head = w.cmd("list-tubes").await;
        let listed = String::from_utf8(w.data(&head).await).unwrap();
        assert!(
            listed.contains("orders") && !listed.contains("other"),
            "{listed}"
        );
        assert_eq!(w.cmd(&format!("delete {id}")).await, "DELETED");
        assert_eq!(
            w.cmd("stats").await,
            "FORBIDDEN",
            "counts of every tube need read:*"
        );

        let r = reqwest::Client::new()
            .delete(format!("{}/v1/keys/worker", bs.http))
            .bearer_auth(&admin)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
        assert_eq!(
            w.cmd("stats-tube orders").await,
            "UNAUTHORIZED",
            "revoked at once"
        );
    })
    .await;
}

/// `beanstalkd_tls`: the listener speaks TLS with the HTTP listener's
/// certificate; a client trusting it puts and reserves; a plain-text
/// client gets nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listener_speaks_tls_with_the_http_certificate() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().unwrap();
    let c = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert, c.cert.pem()).unwrap();
    std::fs::write(&key, c.key_pair.serialize_pem()).unwrap();
    let store = dq_embedded::EmbeddedStore::open(dir.path().join("data")).unwrap();
    let config = ServerConfig {
        tls: Some(dq_server::tls::TlsFiles { cert, key }),
        ..Default::default()
    };
    let (addr, _) = serve_bs(Arc::new(store), config, true).await;

    let mut roots = rustls::RootCertStore::empty();
    roots.add(c.cert.der().clone()).unwrap();
    let client = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(client));
    let tcp = TcpStream::connect(&addr).await.unwrap();
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    let tls = connector.connect(name, tcp).await.expect("handshake");
    let (r, mut w) = tokio::io::split(tls);
    let mut r = BufReader::new(r);
    let mut ask = async |bytes: &[u8]| {
        w.write_all(bytes).await.unwrap();
        let mut l = String::new();
        r.read_line(&mut l).await.unwrap();
        l
    };
    assert_eq!(ask(b"put 0 0 60 5\r\nhello\r\n").await, "INSERTED 1\r\n");
    assert_eq!(ask(b"reserve-with-timeout 0\r\n").await, "RESERVED 1 5\r\n");

    // Plain text gets no beanstalkd reply.
    let mut plain = TcpStream::connect(&addr).await.unwrap();
    plain.write_all(b"list-tubes\r\n").await.unwrap();
    let mut buf = vec![0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(5), plain.read(&mut buf))
        .await
        .expect("the server answers or closes")
        .unwrap_or(0);
    assert!(
        !String::from_utf8_lossy(&buf[..n]).contains("OK"),
        "{:?}",
        &buf[..n]
    );
}
