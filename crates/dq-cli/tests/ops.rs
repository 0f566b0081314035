//! The operator's commands through the real binary: `sd_notify` READY=1
//! and STOPPING=1 on the socket systemd would give (a path, and an abstract
//! name), SIGUSR1 and `dq drain` draining an instance, `dq backup` of a
//! serving store while it takes writes and `dq restore`, `dq backup`
//! pointed at PostgreSQL naming `pg_dump`, a Redis whose
//! layout is newer refused at start, and one of layout 1 moved on by
//! `--upgrade-layout`.

mod support;

use std::os::unix::net::UnixDatagram;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use dq_testkit::RedisServer;
use serde_json::json;
use support::Dq;

fn dq(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dq"))
        .args(args)
        .output()
        .expect("run dq")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The next datagram on `rx` (waiting up to 20 s), as text.
async fn next(rx: &UnixDatagram) -> String {
    let rx = rx.try_clone().unwrap();
    tokio::task::spawn_blocking(move || {
        rx.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut buf = [0u8; 4096];
        let n = rx.recv(&mut buf).expect("a notification within 20 s");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    })
    .await
    .unwrap()
}

async fn exited(
    child: &mut std::process::Child,
    within: Duration,
) -> Option<std::process::ExitStatus> {
    let t0 = Instant::now();
    while t0.elapsed() < within {
        if let Some(s) = child.try_wait().unwrap() {
            return Some(s);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifies_ready_and_stopping_and_drains_on_sigusr1() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("notify");
    let rx = UnixDatagram::bind(&sock).unwrap();
    let data = dir.path().join("data");
    let mut d = Dq::start_env(
        &[("NOTIFY_SOCKET", sock.to_str().unwrap())],
        &["--data-dir", data.to_str().unwrap()],
    )
    .await;
    let ready = next(&rx).await;
    assert!(ready.lines().any(|l| l == "READY=1"), "{ready:?}");
    let (s, _) = d.post("/v1/topics/t/jobs", json!({"id": "a"})).await;
    assert_eq!(s, 201);

    let ok = Command::new("kill")
        .args(["-USR1", &d.pid().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let status = next(&rx).await;
    assert!(status.starts_with("STATUS=draining"), "{status:?}");
    let (s, v) = d.get("/readyz").await;
    assert_eq!((s, v["status"].as_str()), (503, Some("draining")), "{v}");
    let (s, v) = d.post("/v1/reserve", json!({"topics": ["t"]})).await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (503, Some("draining")),
        "{v}"
    );

    d.sigterm();
    let stopping = next(&rx).await;
    assert_eq!(stopping, "STOPPING=1");
    let st = exited(&mut d.child, Duration::from_secs(15)).await;
    assert!(st.is_some_and(|s| s.success()), "{st:?}");
}

#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifies_an_abstract_socket() {
    use std::os::linux::net::SocketAddrExt;
    let name = format!("dq-test-notify-{}-{}", std::process::id(), rand_suffix());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let rx = UnixDatagram::bind_addr(&addr).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let at = format!("@{name}");
    let _d = Dq::start_env(
        &[("NOTIFY_SOCKET", &at)],
        &["--data-dir", dir.path().to_str().unwrap()],
    )
    .await;
    let ready = next(&rx).await;
    assert!(ready.lines().any(|l| l == "READY=1"), "{ready:?}");
}

fn rand_suffix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dq_drain_takes_an_instance_out_and_dq_ready_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let d = Dq::start_embedded(dir.path()).await;
    let out = dq(&["ready", "--server", &d.base]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "ready");

    let out = dq(&["drain", "--server", &d.base, "--wait", "nonsense"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("--wait"),
        "{}",
        text(&out.stderr)
    );
    let (s, _) = d.get("/readyz").await;
    assert_eq!(s, 200, "a refused drain changes nothing");

    let out = dq(&["drain", "--server", &d.base, "--wait", "5s"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with("drained"),
        "{}",
        text(&out.stdout)
    );
    let (s, v) = d.get("/readyz").await;
    assert_eq!((s, v["error"]["code"].as_str()), (503, Some("draining")));
    let out = dq(&["ready", "--server", &d.base]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("draining"),
        "{}",
        text(&out.stderr)
    );
    let out = dq(&["reserve", "t", "--server", &d.base]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("draining"),
        "{}",
        text(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dq_backup_of_a_serving_store_under_writes_and_dq_restore() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let d = Dq::start_embedded(&data).await;
    let body = "x".repeat(4000);
    for b in 0..20 {
        let jobs: Vec<_> = (0..100)
            .map(|i| json!({"id": format!("{b:03}-{i:03}"), "body": body, "delay_ms": 600_000}))
            .collect();
        let (s, v) = d
            .post("/v1/topics/t/jobs:batch", json!({ "jobs": jobs }))
            .await;
        assert_eq!(s, 200, "{v}");
    }
    // Writes go on while the backup runs.
    let writer = {
        let (http, base) = (d.http.clone(), d.base.clone());
        tokio::spawn(async move {
            let mut n = 0;
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_millis(1500) {
                let r = http
                    .post(format!("{base}/v1/topics/t/jobs"))
                    .json(&json!({"id": format!("live-{n}")}))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 201);
                n += 1;
            }
            n
        })
    };
    let out_file = dir.path().join("dq.backup");
    let backup = {
        let args = [
            "backup".to_string(),
            "--data-dir".into(),
            data.to_str().unwrap().into(),
            out_file.to_str().unwrap().into(),
        ];
        tokio::task::spawn_blocking(move || {
            Command::new(env!("CARGO_BIN_EXE_dq"))
                .args(args)
                .output()
                .unwrap()
        })
        .await
        .unwrap()
    };
    let written = writer.await.unwrap();
    assert!(backup.status.success(), "{}", text(&backup.stderr));
    assert!(
        text(&backup.stdout).starts_with("backup written: "),
        "{}",
        text(&backup.stdout)
    );
    assert!(written > 0);

    // Never over a file.
    let again = dq(&[
        "backup",
        "--data-dir",
        data.to_str().unwrap(),
        out_file.to_str().unwrap(),
    ]);
    assert_eq!(again.status.code(), Some(1));
    assert!(
        text(&again.stderr).contains("never overwrites"),
        "{}",
        text(&again.stderr)
    );

    // Not into the serving directory, not into one with data without --force.
    let r = dq(&[
        "restore",
        out_file.to_str().unwrap(),
        "--data-dir",
        data.to_str().unwrap(),
    ]);
    assert_eq!(r.status.code(), Some(1));
    assert!(text(&r.stderr).contains("--force"), "{}", text(&r.stderr));
    let r = dq(&[
        "restore",
        out_file.to_str().unwrap(),
        "--data-dir",
        data.to_str().unwrap(),
        "--force",
    ]);
    assert_eq!(r.status.code(), Some(1));
    assert!(
        text(&r.stderr).contains("in use by another dq process"),
        "{}",
        text(&r.stderr)
    );

    let restored = dir.path().join("restored");
    let r = dq(&[
        "restore",
        out_file.to_str().unwrap(),
        "--data-dir",
        restored.to_str().unwrap(),
    ]);
    assert!(r.status.success(), "{}", text(&r.stderr));
    drop(d);
    let d2 = Dq::start_embedded(&restored).await;
    let (s, v) = d2.get("/v1/topics/t").await;
    assert_eq!(s, 200);
    let waiting = v["stats"]["scheduled"].as_u64().unwrap() + v["stats"]["ready"].as_u64().unwrap();
    assert!(waiting >= 2000, "every job written before the backup: {v}");
    for id in ["000-000", "019-099"] {
        let (s, _) = d2.get(&format!("/v1/topics/t/jobs/{id}")).await;
        assert_eq!(s, 200, "{id}");
    }
}

/// `dq backup` where dq serves from PostgreSQL (its URL in `DQ_POSTGRES`,
/// as a systemd unit's environment file holds it, or `--postgres`) writes
/// nothing and names what to use instead: `pg_dump` of dq's schema, the
/// advice the running server gives for `POST /v1/admin/backup` too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dq_backup_of_a_postgres_store_names_pg_dump_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let url = dq_testkit::PgServer::shared().fresh_database("backup");
    let d = Dq::start_with(&["--postgres", &url]).await;
    let out_file = dir.path().join("dq.backup");
    let backup = |env: &[(&str, &str)], args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_dq"))
            .arg("backup")
            .args(args)
            .arg(&out_file)
            .env_remove("DQ_POSTGRES")
            .env_remove("DQ_POSTGRES_SCHEMA")
            .env_remove("DQ_DATA_DIR")
            .envs(env.iter().copied())
            .current_dir(dir.path())
            .output()
            .unwrap()
    };
    let out = backup(&[("DQ_POSTGRES", &url)], &[]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("dq backup copies the embedded store only")
            && err.contains("PostgreSQL (schema dq)")
            && err.contains("pg_dump --schema=dq"),
        "{err}"
    );
    assert!(!out_file.exists());
    assert!(
        !dir.path().join("dq-data").exists(),
        "no data directory made"
    );

    let out = backup(
        &[],
        &[
            "--postgres",
            "postgres://app:hunter2@db.example:5432/shop",
            "--postgres-schema",
            "queue",
        ],
    );
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("pg_dump --schema=queue"), "{err}");
    assert!(!err.contains("hunter2"), "{err}");
    assert!(!out_file.exists());

    // The server itself says the same.
    let (s, v) = d
        .post(
            "/v1/admin/backup",
            json!({"path": out_file.to_str().unwrap()}),
        )
        .await;
    assert_eq!(
        (s, &v["error"]["code"]),
        (409, &json!("backup_unsupported")),
        "{v}"
    );
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("pg_dump --schema=dq"),
        "{v}"
    );
    assert!(!out_file.exists());
}

/// `dq serve` on the Redis at `url` with `extra` flags, in a directory of
/// its own, refused at start: it exits with status 1; its stderr.
async fn refused_start(url: &str, extra: &[&str]) -> String {
    let url = url.to_string();
    let extra: Vec<String> = extra.iter().map(|a| a.to_string()).collect();
    let out: Output = tokio::task::spawn_blocking(move || {
        let dir = tempfile::tempdir().unwrap();
        Command::new(env!("CARGO_BIN_EXE_dq"))
            .args(["serve", "--redis", &url, "--listen", "127.0.0.1:0"])
            .args(["--config", "/dev/null", "--log-level", "warn"])
            .args(&extra)
            .current_dir(dir.path())
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    err
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_of_a_newer_layout_is_refused_at_start() {
    let redis = RedisServer::start();
    let mut c = redis.connection();
    let _: () = redis::cmd("SET")
        .arg("dq:layout")
        .arg(9)
        .query(&mut c)
        .unwrap();
    let err = refused_start(&redis.url(), &[]).await;
    assert!(
        err.contains("dq layout version 9, written by a newer dq; this dq uses layout version 2"),
        "{err}"
    );
    // A Redis without the key gets it.
    let fresh = RedisServer::start();
    let _d = Dq::start(&fresh.url()).await;
    let v: String = redis::cmd("GET")
        .arg("dq:layout")
        .query(&mut fresh.connection())
        .unwrap();
    assert_eq!(v, "2");
}

/// A Redis written by a dq of layout 1 (a lease's token and deadline in the
/// job's record): refused at start, naming the way on; served after `dq
/// serve --upgrade-layout`, with the lease still its holder's (its token
/// acks it, its deadline is kept) and every other job handed out as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_of_layout_1_is_served_after_upgrade_layout() {
    let redis = RedisServer::start();
    let d = Dq::start(&redis.url()).await;
    for id in ["a", "b", "c"] {
        let (s, v) = d
            .post("/v1/topics/t/jobs", json!({"id": id, "body": id}))
            .await;
        assert_eq!(s, 201, "{v}");
    }
    let (s, v) = d
        .post(
            "/v1/reserve",
            json!({"topics": ["t"], "max": 2, "lease_ms": 600000}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let leases = v["jobs"].as_array().unwrap().clone();
    assert_eq!(leases.len(), 2, "{v}");
    assert_eq!(
        (leases[0]["id"].as_str(), leases[1]["id"].as_str()),
        (Some("a"), Some("b"))
    );
    let deadline = leases[0]["lease_deadline_ms"].clone();
    drop(d);
    // The leases as layout 1 kept them: in the record (s = 'r', the
    // attempt counted, t, u), no tokens hash.
    let mut c = redis.connection();
    let _: i64 = redis::cmd("EVAL")
        .arg(
            r"
            local ids = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
            for i = 1, #ids, 2 do
              local id = ids[i]
              local d, p, q, a, s, c, k, b, m, L, r, e = cmsgpack.unpack(redis.call('HGET', KEYS[2], id))
              local t = redis.call('HGET', KEYS[3], id)
              redis.call('HSET', KEYS[2], id, cmsgpack.pack(d, p, q, (a or 0) + 1, 'r', c, k, b, m, L, r, e, t, tonumber(ids[i + 1])))
            end
            redis.call('DEL', KEYS[3])
            redis.call('SET', KEYS[4], '1')
            return #ids / 2",
        )
        .arg(4)
        .arg("dq:{t}:lease")
        .arg("dq:{t}:jobs")
        .arg("dq:{t}:tokens")
        .arg("dq:layout")
        .query(&mut c)
        .unwrap();

    let err = refused_start(&redis.url(), &[]).await;
    assert!(
        err.contains("says dq layout version 1; this dq uses layout version 2")
            && err.contains("--upgrade-layout"),
        "{err}"
    );
    // The dq stopped a moment ago is still listed as seen: refused, naming it.
    let seen: Vec<String> = redis::cmd("ZRANGE")
        .arg("dq:dispatchers")
        .arg(0)
        .arg(-1)
        .query(&mut c)
        .unwrap();
    assert_eq!(seen.len(), 1, "{seen:?}");
    let err = refused_start(&redis.url(), &["--upgrade-layout"]).await;
    assert!(
        err.contains("dq instances were seen on this Redis within the last 30 s")
            && err.contains(&seen[0]),
        "{err}"
    );
    let v: String = redis::cmd("GET").arg("dq:layout").query(&mut c).unwrap();
    assert_eq!(v, "1", "left as it was");
    // 30 s later its heartbeat is too old to count (here: gone at once).
    let _: () = redis::cmd("DEL")
        .arg("dq:dispatchers")
        .query(&mut c)
        .unwrap();

    let d = Dq::start_with(&["--redis", &redis.url(), "--upgrade-layout"]).await;
    let v: String = redis::cmd("GET").arg("dq:layout").query(&mut c).unwrap();
    assert_eq!(v, "2");
    let (_, v) = d.get("/v1/topics/t/jobs/a").await;
    assert_eq!(
        (
            v["state"].clone(),
            v["attempts"].clone(),
            v["lease_deadline_ms"].clone()
        ),
        (json!("reserved"), json!(1), deadline),
        "{v}"
    );
    // Nothing else to hand out but c, once.
    let (_, v) = d
        .post("/v1/reserve", json!({"topics": ["t"], "max": 10}))
        .await;
    let got: Vec<_> = v["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].clone())
        .collect();
    assert_eq!(got, vec![json!("c")], "{v}");
    let c_token = v["jobs"][0]["token"].clone();
    // The old leases end by their tokens, and only by them.
    let (s, v) = d
        .post("/v1/topics/t/jobs/a/ack", json!({"token": "stale"}))
        .await;
    assert_eq!(
        (s, v["error"]["code"].clone()),
        (409, json!("lease_mismatch"))
    );
    let (s, v) = d
        .post(
            "/v1/topics/t/jobs/a/ack",
            json!({"token": leases[0]["token"]}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let acks = json!({"acks": [
        {"topic": "t", "id": "b", "token": leases[1]["token"]},
        {"topic": "t", "id": "c", "token": c_token},
    ]});
    let (s, v) = d.post("/v1/ack:batch", acks).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        v["results"],
        json!([{"acked": true}, {"acked": true}]),
        "{v}"
    );
    let (_, v) = d.get("/v1/topics/t").await;
    assert_eq!(
        (v["stats"]["reserved"].clone(), v["stats"]["ready"].clone()),
        (json!(0), json!(0)),
        "{v}"
    );
}
