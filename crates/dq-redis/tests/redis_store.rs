//! What only the Redis store has: its keyspace, script reloading, URLs with
//! password and db, wake-ups across processes.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use dq_core::*;
use dq_redis::{RedisConfig, RedisStore};
use dq_testkit::RedisServer;
use redis::Commands;

const T0: u64 = 1_700_000_000_000;

fn store(url: String) -> RedisStore {
    RedisStore::new(&RedisConfig {
        url,
        clock: dq_redis::TimeSource::Caller,
        ..Default::default()
    })
    .unwrap()
}

fn job(id: &str, delay: u64) -> NewJob {
    NewJob::new(
        JobId::new(id).unwrap(),
        Body::Json("{\"secret-body\":1}".into()),
        When::DelayMs(delay),
    )
}

fn keys(conn: &mut redis::Connection) -> Vec<String> {
    let mut k: Vec<String> = conn.keys("*").unwrap();
    k.sort();
    k
}

/// Schedule members are ids (never bodies); job records, bodies included,
/// are deleted on ack, cancel and purge, leaving only the topic's counters.
#[tokio::test]
async fn keyspace_holds_ids_and_frees_bodies() {
    let server = RedisServer::start();
    let s = store(server.url());
    let t = Topic::new("keys").unwrap();
    s.enqueue(
        &t,
        &[job("a", 0), job("b", 0), job("c", 0), job("later", 60_000)],
        T0,
    )
    .await
    .unwrap();
    let mut conn = server.connection();
    let sched: Vec<String> = conn.zrange("dq:{keys}:sched", 0, -1).unwrap();
    assert_eq!(sched, vec!["later"]);
    let ready: Vec<String> = conn.zrange("dq:{keys}:ready", 0, -1).unwrap();
    assert_eq!(ready.len(), 3);
    for m in &ready {
        assert!(
            !m.contains("secret-body"),
            "ready members hold no bodies: {m}"
        );
        assert_eq!(m.len(), 23 + 1, "11+12 hex digits then the id: {m}");
    }
    assert_eq!(
        keys(&mut conn),
        vec![
            "dq:topic-names",
            "dq:topics",
            "dq:{keys}:ctr",
            "dq:{keys}:jobs",
            "dq:{keys}:ready",
            "dq:{keys}:sched",
        ]
    );
    let records: Vec<String> = conn.hkeys("dq:{keys}:jobs").unwrap();
    assert_eq!(records.len(), 4, "one record per job: {records:?}");

    let mut leases = s.reserve(&t, 3, None, T0).await.unwrap().leases;
    let c = leases.pop().unwrap();
    let b = leases.pop().unwrap();
    let a = leases.pop().unwrap();
    s.ack(&t, &a.id, &a.token, 0).await.unwrap();
    s.cancel(&t, &b.id, 0).await.unwrap();
    s.configure_topic(
        &t,
        &TopicConfigPatch {
            max_attempts: Some(1),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    s.nack(&t, &c.id, Nack::retry(&c.token, "bye"), T0)
        .await
        .unwrap();
    assert_eq!(s.purge_dead(&t, 10).await.unwrap(), 1);
    s.cancel(&t, &JobId::new("later").unwrap(), 0)
        .await
        .unwrap();
    assert_eq!(
        keys(&mut conn),
        vec![
            "dq:settings_version",
            "dq:topic-names",
            "dq:topics",
            "dq:{keys}:cfg",
            "dq:{keys}:ctr"
        ],
        "no job record (body included), schedule, ready, lease or dead key is left"
    );
}

/// After SCRIPT FLUSH (or a Redis restart) scripts are loaded again.
#[tokio::test]
async fn scripts_reload_after_noscript() {
    let server = RedisServer::start();
    let s = store(server.url());
    s.load_scripts().await.unwrap();
    let t = Topic::new("flush").unwrap();
    s.enqueue(&t, &[job("a", 0)], T0).await.unwrap();
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut server.connection())
        .unwrap();
    let c = s.reserve(&t, 1, None, T0).await.unwrap();
    assert_eq!(c.leases.len(), 1);
}

/// A URL with a password and a database number is honoured.
#[tokio::test]
async fn url_with_password_and_db() {
    let server = RedisServer::start_with_password("s3cret");
    let wrong = store(server.url().replace("s3cret", "nope"));
    assert!(matches!(
        wrong.ping().await,
        Err(StoreError::Unavailable(_))
    ));
    let s = store(format!("{}/3", server.url()));
    s.ping().await.unwrap();
    let t = Topic::new("db3").unwrap();
    s.enqueue(&t, &[job("x", 0)], T0).await.unwrap();
    let mut conn = server.connection();
    let in_db0: Vec<String> = conn.keys("*").unwrap();
    assert!(in_db0.is_empty(), "nothing in db 0: {in_db0:?}");
    let _: () = redis::cmd("SELECT").arg(3).query(&mut conn).unwrap();
    let in_db3: Vec<String> = conn.keys("dq:{db3}:*").unwrap();
    assert!(!in_db3.is_empty());
}

/// An invalid URL is refused up front, with the password masked.
#[test]
fn invalid_url_is_refused() {
    let e = RedisStore::new(&RedisConfig {
        url: "http://:pw@host".into(),
        clock: dq_redis::TimeSource::Caller,
        ..Default::default()
    })
    .unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("invalid Redis URL"), "{msg}");
    assert!(!msg.contains("pw@"), "password masked: {msg}");
}

/// An enqueue through one store wakes watchers of another on the same Redis
/// when the job is due now or earlier than the schedule's head, not otherwise.
#[tokio::test]
async fn wake_ups_cross_processes() {
    let server = RedisServer::start();
    let a = store(server.url());
    let b = Arc::new(store(server.url()));
    let got: Arc<Mutex<Vec<String>>> = Arc::default();
    let watcher = {
        let got = got.clone();
        let b = b.clone();
        tokio::spawn(async move {
            b.watch_wakes(Arc::new(move |t: &str| {
                got.lock().unwrap().push(t.to_string())
            }))
            .await
        })
    };
    // The watcher reports "" (look at everything) once subscribed.
    wait_for(&got, |g| g.iter().any(|t| t.is_empty())).await;
    let t = Topic::new("wake").unwrap();
    a.enqueue(&t, &[job("far", 60_000)], T0).await.unwrap();
    a.enqueue(&t, &[job("farther", 120_000)], T0).await.unwrap();
    a.enqueue(&t, &[job("now", 0)], T0).await.unwrap();
    wait_for(&got, |g| g.iter().filter(|t| *t == "wake").count() >= 2).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let wakes = got.lock().unwrap().iter().filter(|t| *t == "wake").count();
    assert_eq!(
        wakes, 2,
        "the new head and the due job wake; a later job does not"
    );
    watcher.abort();
}

async fn wait_for(got: &Arc<Mutex<Vec<String>>>, pred: impl Fn(&Vec<String>) -> bool) {
    for _ in 0..500 {
        if pred(&got.lock().unwrap()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out; got {:?}", got.lock().unwrap());
}

/// A job due later than the next minute waits as one entry of a timing-wheel
/// bucket list, not in the schedule ZSET; it is rolled into the schedule a
/// bucket ahead of its time; a cancelled one leaves a stale entry that is
/// skipped and cleaned when its bucket is rolled.
#[tokio::test]
async fn far_jobs_wait_in_the_wheel() {
    let server = RedisServer::start();
    let s = store(server.url());
    let t = Topic::new("wheel").unwrap();
    let day = 86_400_000;
    s.enqueue(&t, &[job("far", day), job("cancelled", day)], T0)
        .await
        .unwrap();
    s.cancel(&t, &JobId::new("cancelled").unwrap(), 0)
        .await
        .unwrap();
    let mut conn = server.connection();
    let due = T0 + day;
    let bucket = due - due % 60_000;
    let sched: Vec<String> = conn.zrange("dq:{wheel}:sched", 0, -1).unwrap();
    assert!(sched.is_empty(), "not in the schedule ZSET: {sched:?}");
    let list: Vec<String> = conn
        .lrange(format!("dq:{{wheel}}:w:{bucket}"), 0, -1)
        .unwrap();
    assert_eq!(
        list,
        vec!["far", "cancelled"],
        "the cancelled entry stays, stale"
    );
    assert_eq!(s.stats(&t, T0).await.unwrap().scheduled, 1);
    let c = s.reserve(&t, 10, None, T0).await.unwrap();
    assert_eq!(
        c.next_due_ms,
        Some(bucket - 60_000),
        "look again when the bucket rolls"
    );

    let p = s.promote_due(&t, 1000, bucket - 60_000).await.unwrap();
    assert_eq!(p.next_due_ms, Some(due), "rolled: now the exact due time");
    let sched: Vec<String> = conn.zrange("dq:{wheel}:sched", 0, -1).unwrap();
    assert_eq!(sched, vec!["far"]);
    let left: Vec<String> = conn.keys("dq:{wheel}:w*").unwrap();
    assert!(
        left.is_empty(),
        "bucket list and wheel entry gone: {left:?}"
    );
    assert!(
        s.reserve(&t, 10, None, due - 1)
            .await
            .unwrap()
            .leases
            .is_empty()
    );
    assert_eq!(s.reserve(&t, 10, None, due).await.unwrap().leases.len(), 1);
    assert_eq!(s.stats(&t, due).await.unwrap().scheduled, 0);
}

/// With the server's clock (what `dq serve` uses), the callers' clocks do not
/// matter: one a day behind enqueues, one a day ahead reserves, requeues and
/// nacks, and still nothing is handed out early, no lease is cut short and
/// the retry waits its time, measured by this test's real clock.
#[tokio::test]
async fn the_servers_clock_decides_whatever_the_callers_say() {
    use std::time::Instant;
    let server = RedisServer::start();
    let s = RedisStore::new(&RedisConfig {
        url: server.url(),
        ..Default::default()
    })
    .unwrap();
    let real = SystemClock.now_ms();
    let store_ms = s.time_ms().await.unwrap().expect("the server's clock");
    assert!(store_ms.abs_diff(real) < 1000, "{store_ms} vs {real}");
    let (behind, ahead) = (real - 86_400_000, real + 86_400_000);
    let t = Topic::new("skew").unwrap();

    let start = Instant::now();
    let e = s.enqueue(&t, &[job("d", 400)], behind).await.unwrap();
    assert!(e[0].due_at_ms >= real + 400, "due by the server's clock");
    let reserved = loop {
        let c = s.reserve(&t, 1, Some(500), ahead).await.unwrap();
        if let Some(l) = c.leases.into_iter().next() {
            break l;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(399),
        "handed out early: {waited:?}"
    );
    assert!(waited < Duration::from_millis(1000), "{waited:?}");

    // The lease lasts its 500 ms, whatever the requeuer's clock says.
    let leased = Instant::now();
    loop {
        let r = s.requeue_expired(&t, 10, ahead).await.unwrap();
        if r.retried + r.dead > 0 {
            break;
        }
        assert!(
            leased.elapsed() < Duration::from_secs(2),
            "lease never expired"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let held = leased.elapsed();
    assert!(
        held >= Duration::from_millis(499),
        "lease cut short: {held:?}"
    );
    assert!(
        s.ack(&t, &reserved.id, &reserved.token, 0).await.is_err(),
        "the expired lease's token is stale once the job is requeued"
    );

    // A nack's retry waits its 300 ms, measured from the nack.
    let again = loop {
        let c = s.reserve(&t, 1, Some(10_000), behind).await.unwrap();
        if let Some(l) = c.leases.into_iter().next() {
            break l;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let nacked = Instant::now();
    s.nack(
        &t,
        &again.id,
        Nack::retry(&again.token, "later").retry_in(300),
        ahead,
    )
    .await
    .unwrap();
    loop {
        let c = s.reserve(&t, 1, Some(10_000), ahead).await.unwrap();
        if !c.leases.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let retried = nacked.elapsed();
    assert!(
        retried >= Duration::from_millis(299),
        "retried early: {retried:?}"
    );
}

/// `ack_and_write` on the store's own server: each job is acked and written
/// in one script; a stale token writes nothing; a write the target refuses
/// (wrong key type) leaves the job reserved, not acked; another server is
/// `None` for every job (the caller writes, then acks).
#[tokio::test]
async fn ack_and_write_acks_and_writes_together_or_not_at_all() {
    use dq_core::forward::{AckWrite, ListPayload, ListSide, ListTarget, Target, Write};
    let server = RedisServer::start();
    let other = RedisServer::start();
    let s = store(server.url());
    let t = Topic::new("fw").unwrap();
    s.enqueue(&t, &[job("a", 0), job("b", 0), job("c", 0)], T0)
        .await
        .unwrap();
    let leases = s.reserve(&t, 3, Some(60_000), T0).await.unwrap().leases;
    let list = ListTarget {
        url: server.url(),
        list: "out".into(),
        side: ListSide::Left,
        payload: ListPayload::Body,
    };
    let w: Vec<Write> = leases
        .iter()
        .map(|l| Target::List(&list).write_for(l))
        .collect();
    let item = |i: usize, token: &'static str| AckWrite {
        id: &leases[i].id,
        token: if token.is_empty() {
            &leases[i].token
        } else {
            token
        },
        write: &w[i],
    };
    // Another server: nothing done here.
    let none = s
        .ack_and_write(&t, &other.url(), &[item(0, "")], 0)
        .await
        .unwrap();
    assert!(matches!(none.as_slice(), [None]), "{none:?}");
    // A stale token beside a good one.
    let r = s
        .ack_and_write(&t, &server.url(), &[item(0, "stale"), item(1, "")], 0)
        .await
        .unwrap();
    assert!(
        matches!(r[0], Some(Err(StoreError::LeaseMismatch))),
        "{r:?}"
    );
    assert!(matches!(r[1], Some(Ok(()))), "{r:?}");
    let mut conn = server.connection();
    let out: Vec<Vec<u8>> = conn.lrange("out", 0, -1).unwrap();
    assert_eq!(
        out,
        vec![b"{\"secret-body\":1}".to_vec()],
        "only the acked one written"
    );
    assert!(s.get(&t, &leases[1].id).await.unwrap().is_none(), "b acked");
    // The target key holds a string: the write is refused, a stays reserved.
    let _: () = conn.del("out").unwrap();
    let _: () = conn.set("out", "not a list").unwrap();
    let r = s
        .ack_and_write(&t, &server.url(), &[item(0, "")], 0)
        .await
        .unwrap();
    assert!(
        matches!(&r[0], Some(Err(StoreError::Storage { code: "target_refused", message })) if message.contains("WRONGTYPE")),
        "{r:?}"
    );
    let a = s.get(&t, &leases[0].id).await.unwrap().unwrap();
    assert_eq!(a.state, JobState::Reserved, "not acked");
    // Nothing on the other server either.
    let mut oc = other.connection();
    assert!(keys(&mut oc).is_empty());
}

fn imported(id: &str, state: JobState, due: u64) -> ImportJob {
    ImportJob {
        id: JobId::new(id).unwrap(),
        state,
        due_at_ms: due,
        priority: 9,
        attempts: 2,
        max_attempts: None,
        lease_ms: None,
        retry: None,
        dedup_ms: None,
        body: Body::Json("{}".into()),
        last_error: None,
        errors: Vec::new(),
        created_at_ms: T0,
        died_at_ms: None,
        key: None,
        trace: None,
    }
}

/// import_jobs.lua writes each job where the scripts look for it: a far
/// one into its wheel bucket (ctr.far counted, not the schedule ZSET), a
/// near one into the schedule, a due one into the ready set with its
/// priority, a dead one into the dead ZSET at its died-at; ctr.seq and
/// ctr.enqueued move once per new job. list_jobs.lua writes nothing.
#[tokio::test]
async fn import_places_jobs_in_every_index() {
    let server = RedisServer::start();
    let s = store(server.url());
    let t = Topic::new("imp").unwrap();
    let day = 86_400_000;
    let mut dead = imported("dead", JobState::Dead, T0 - 10);
    dead.died_at_ms = Some(T0 - 5);
    dead.last_error = Some("x".into());
    let jobs = [
        imported("far", JobState::Scheduled, T0 + day),
        imported("near", JobState::Scheduled, T0 + 1_000),
        imported("due", JobState::Ready, T0 - 1),
        dead,
    ];
    s.import_jobs(&t, &jobs, T0).await.unwrap();
    let mut conn = server.connection();
    let due = T0 + day;
    let bucket = due - due % 60_000;
    let list: Vec<String> = conn
        .lrange(format!("dq:{{imp}}:w:{bucket}"), 0, -1)
        .unwrap();
    assert_eq!(list, vec!["far"]);
    let wheel: Vec<String> = conn.zrange("dq:{imp}:wheel", 0, -1).unwrap();
    assert_eq!(wheel, vec![bucket.to_string()]);
    let sched: Vec<(String, u64)> = conn.zrange_withscores("dq:{imp}:sched", 0, -1).unwrap();
    assert_eq!(sched, vec![("near".to_string(), T0 + 1_000)]);
    let ready: Vec<(String, u64)> = conn.zrange_withscores("dq:{imp}:ready", 0, -1).unwrap();
    assert_eq!(ready.len(), 1);
    assert!(ready[0].0.ends_with("due") && ready[0].1 == 9, "{ready:?}");
    let deadz: Vec<(String, u64)> = conn.zrange_withscores("dq:{imp}:dead", 0, -1).unwrap();
    assert_eq!(deadz, vec![("dead".to_string(), T0 - 5)]);
    let ctr: std::collections::HashMap<String, i64> = conn.hgetall("dq:{imp}:ctr").unwrap();
    assert_eq!((ctr["far"], ctr["seq"], ctr["enqueued"]), (1, 4, 4));
    let lease: i64 = conn.zcard("dq:{imp}:lease").unwrap();
    assert_eq!(lease, 0);

    let before = keys(&mut conn);
    let page = s.list_jobs(&t, None, None, 10).await.unwrap();
    assert_eq!(page.jobs.len(), 4);
    assert_eq!(keys(&mut conn), before, "listing writes nothing");
    // A second import: every key as it was.
    let snapshot: Vec<(String, String)> = before
        .iter()
        .map(|k| {
            (
                k.clone(),
                format!(
                    "{:?}",
                    redis::cmd("DUMP")
                        .arg(k)
                        .query::<Vec<u8>>(&mut conn)
                        .unwrap()
                ),
            )
        })
        .collect();
    s.import_jobs(&t, &jobs, T0 + 1).await.unwrap();
    let after: Vec<(String, String)> = keys(&mut conn)
        .iter()
        .map(|k| {
            (
                k.clone(),
                format!(
                    "{:?}",
                    redis::cmd("DUMP")
                        .arg(k)
                        .query::<Vec<u8>>(&mut conn)
                        .unwrap()
                ),
            )
        })
        .collect();
    assert_eq!(after, snapshot, "a second import changes no key");
}

/// Two dq instances on one Redis (two stores, two connections) draw from
/// one rate-limit bucket, and a pause set through one holds the other's
/// reserves at once; its resume wakes the other's waiters.
#[tokio::test]
async fn instances_share_one_rate_limit_and_pause() {
    let server = RedisServer::start();
    let (a, b) = (store(server.url()), store(server.url()));
    let t = Topic::new("shared").unwrap();
    a.configure_topic(
        &t,
        &TopicConfigPatch {
            rate_limit: Some(Some(RateLimit {
                limit: 6,
                per_ms: 1000,
                burst: 6,
            })),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let jobs: Vec<NewJob> = (0..50).map(|i| job(&format!("j{i}"), 0)).collect();
    a.enqueue(&t, &jobs, T0).await.unwrap();
    let (ra, rb) = futures::join!(a.reserve(&t, 4, None, T0), b.reserve(&t, 4, None, T0));
    assert_eq!(ra.unwrap().leases.len() + rb.unwrap().leases.len(), 6);
    let r = b.reserve(&t, 4, None, T0 + 166).await.unwrap();
    assert!(r.leases.is_empty());
    assert_eq!(
        r.next_due_ms,
        Some(T0 + 167),
        "1000 / 6 ms per token, rounded up"
    );
    assert_eq!(
        a.reserve(&t, 4, None, T0 + 167).await.unwrap().leases.len(),
        1
    );

    let woken = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = woken.clone();
    let b = Arc::new(b);
    let watcher = b.clone();
    let task = tokio::spawn(async move {
        watcher
            .watch_wakes(Arc::new(move |t: &str| {
                seen.lock().unwrap().push(t.to_string())
            }))
            .await
    });
    let paused = |on| TopicConfigPatch {
        paused: Some(on),
        ..Default::default()
    };
    a.configure_topic(&t, &paused(true)).await.unwrap();
    let r = b.reserve(&t, 4, None, T0 + 10_000).await.unwrap();
    assert!(r.leases.is_empty(), "the other instance holds at once");
    assert_eq!(r.next_due_ms, None);
    // The subscription is up once an enqueue's wake-up arrives.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    for n in 0.. {
        if !woken.lock().unwrap().is_empty() {
            break;
        }
        a.enqueue(&t, &[job(&format!("probe{n}"), 0)], T0 + 10_000)
            .await
            .unwrap();
        assert!(tokio::time::Instant::now() < deadline, "no wake-up seen");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    woken.lock().unwrap().clear();
    a.configure_topic(&t, &paused(false)).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while woken.lock().unwrap().is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the resume woke nobody"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(woken.lock().unwrap()[0], "shared");
    assert_eq!(
        b.reserve(&t, 10, None, T0 + 10_000)
            .await
            .unwrap()
            .leases
            .len(),
        6
    );
    task.abort();
}

/// Where flow control lives: `cfg.paused` and `cfg.rate_limit` (as
/// `limit,per_ms,burst`), the bucket in `ctr.rl_credit` / `ctr.rl_at` (in
/// credits: a hand-out costs per_ms, each ms adds limit), the jobs held back
/// in `ctr.rate_limited`; a changed limit resets the bucket, a removed one
/// leaves no setting behind.
#[tokio::test]
async fn flow_control_keys() {
    let server = RedisServer::start();
    let s = store(server.url());
    let t = Topic::new("fk").unwrap();
    let limit = |l| TopicConfigPatch {
        rate_limit: Some(l),
        ..Default::default()
    };
    s.configure_topic(
        &t,
        &limit(Some(RateLimit {
            limit: 4,
            per_ms: 1000,
            burst: 2,
        })),
    )
    .await
    .unwrap();
    let mut conn = server.connection();
    let cfg: Option<String> = conn.hget("dq:{fk}:cfg", "rate_limit").unwrap();
    assert_eq!(cfg.as_deref(), Some("4,1000,2"));
    s.enqueue(&t, &[job("a", 0), job("b", 0), job("c", 0)], T0)
        .await
        .unwrap();
    let r = s.reserve(&t, 3, None, T0 + 10).await.unwrap();
    assert_eq!(r.leases.len(), 2);
    assert_eq!(r.next_due_ms, Some(T0 + 10 + 250));
    let ctr: std::collections::HashMap<String, String> = conn.hgetall("dq:{fk}:ctr").unwrap();
    assert_eq!(ctr["rl_credit"], "0");
    assert_eq!(ctr["rl_at"], (T0 + 10).to_string());
    assert_eq!(ctr["rate_limited"], "1");
    s.reserve(&t, 3, None, T0 + 110).await.unwrap();
    let credit: String = conn.hget("dq:{fk}:ctr", "rl_credit").unwrap();
    assert_eq!(credit, "400", "100 ms at 4 credits a ms, nothing leased");
    s.configure_topic(
        &t,
        &TopicConfigPatch {
            paused: Some(true),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let p: String = conn.hget("dq:{fk}:cfg", "paused").unwrap();
    assert_eq!(p, "1");
    s.configure_topic(
        &t,
        &limit(Some(RateLimit {
            limit: 1,
            per_ms: 1000,
            burst: 1,
        })),
    )
    .await
    .unwrap();
    let bucket: (Option<String>, Option<String>) = redis::cmd("HMGET")
        .arg("dq:{fk}:ctr")
        .arg("rl_credit")
        .arg("rl_at")
        .query(&mut conn)
        .unwrap();
    assert_eq!(bucket, (None, None), "a changed limit starts full");
    s.configure_topic(&t, &limit(None)).await.unwrap();
    let cfg: Option<String> = conn.hget("dq:{fk}:cfg", "rate_limit").unwrap();
    assert_eq!(cfg, None);
}

/// The count of script calls (EVALSHA and EVAL) the server has run.
fn script_calls(conn: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(conn).unwrap();
    info.lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// `ack_batch.lua`: a batch of one topic is one script call per MAX_BATCH
/// items (two topics: one each), and afterwards every key is as the single
/// acks leave it: records and leases gone, `ctr.acked` counted, the dedup
/// window of a job that has one started.
#[tokio::test]
async fn ack_batch_runs_one_script_per_topic_and_batch_bound() {
    let server = RedisServer::start();
    let s = store(server.url());
    s.load_scripts().await.unwrap();
    let (t, u) = (Topic::new("ab").unwrap(), Topic::new("ab2").unwrap());
    let n = limits::MAX_BATCH + 5;
    let mut jobs: Vec<NewJob> = (0..n).map(|i| job(&format!("j{i}"), 0)).collect();
    jobs[0].dedup_ms = Some(5_000);
    for chunk in jobs.chunks(limits::MAX_BATCH) {
        s.enqueue(&t, chunk, T0).await.unwrap();
    }
    s.enqueue(&u, &[job("other", 0)], T0).await.unwrap();
    let mut leases = Vec::new();
    while leases.len() < n {
        leases.extend(s.reserve(&t, 1000, Some(60_000), T0).await.unwrap().leases);
    }
    leases.extend(s.reserve(&u, 1, Some(60_000), T0).await.unwrap().leases);
    let items: Vec<AckItem> = leases
        .iter()
        .map(|l| AckItem::new(&l.topic, &l.id, &l.token))
        .collect();
    let mut conn = server.connection();
    let before = script_calls(&mut conn);
    let done = s.ack_batch(&items, T0 + 10).await;
    assert_eq!(
        script_calls(&mut conn) - before,
        3,
        "2 calls for ab, 1 for ab2"
    );
    assert!(done.iter().all(Result::is_ok), "{done:?}");
    assert_eq!(
        keys(&mut conn),
        vec![
            "dq:topic-names",
            "dq:topics",
            "dq:{ab2}:ctr",
            "dq:{ab}:ctr",
            "dq:{ab}:dedup",
        ]
    );
    let acked: u64 = conn.hget("dq:{ab}:ctr", "acked").unwrap();
    assert_eq!(acked, n as u64);
    let acked: u64 = conn.hget("dq:{ab2}:ctr", "acked").unwrap();
    assert_eq!(acked, 1);
    let window: Vec<(String, u64)> = conn.zrange_withscores("dq:{ab}:dedup", 0, -1).unwrap();
    assert_eq!(window, vec![("j0".to_string(), T0 + 10 + 5_000)]);
}

/// The count of PUBLISH commands the server has run.
fn publishes(conn: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query(conn).unwrap();
    info.lines()
        .find(|l| l.starts_with("cmdstat_publish:"))
        .and_then(|l| l.split("calls=").nth(1)?.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// `touch_batch.lua` and `nack_batch.lua`: a batch of one topic is one
/// script call per MAX_BATCH items (two topics: one each), and afterwards
/// every key is as the single verbs leave it: touched, the lease ZSET holds
/// the new deadlines; nacked, the leases are gone, the jobs scheduled,
/// `ctr.failed` counted, each job's jitter its own, and at most one wake-up
/// published per call.
#[tokio::test]
async fn nack_and_touch_batches_run_one_script_per_topic_and_batch_bound() {
    let server = RedisServer::start();
    let s = store(server.url());
    s.load_scripts().await.unwrap();
    let (t, u) = (Topic::new("nb").unwrap(), Topic::new("nb2").unwrap());
    let n = limits::MAX_BATCH + 5;
    let jobs: Vec<NewJob> = (0..n).map(|i| job(&format!("j{i}"), 0)).collect();
    for chunk in jobs.chunks(limits::MAX_BATCH) {
        s.enqueue(&t, chunk, T0).await.unwrap();
    }
    s.enqueue(&u, &[job("other", 0)], T0).await.unwrap();
    let mut leases = Vec::new();
    while leases.len() < n {
        leases.extend(s.reserve(&t, 1000, Some(60_000), T0).await.unwrap().leases);
    }
    leases.extend(s.reserve(&u, 1, Some(60_000), T0).await.unwrap().leases);
    let mut conn = server.connection();

    let touches: Vec<TouchItem> = leases
        .iter()
        .map(|l| TouchItem::new(&l.topic, &l.id, &l.token, Some(90_000)))
        .collect();
    let before = script_calls(&mut conn);
    let done = s.touch_batch(&touches, T0 + 10).await;
    assert_eq!(
        script_calls(&mut conn) - before,
        3,
        "2 calls for nb, 1 for nb2"
    );
    assert!(
        done.iter()
            .all(|d| matches!(d, Ok(at) if *at == T0 + 10 + 90_000)),
        "{done:?}"
    );
    for key in ["dq:{nb}:lease", "dq:{nb2}:lease"] {
        let deadlines: Vec<(String, u64)> = conn.zrange_withscores(key, 0, -1).unwrap();
        assert!(
            deadlines.iter().all(|(_, d)| *d == T0 + 10 + 90_000),
            "{key}"
        );
    }
    assert_eq!(conn.zcard::<_, usize>("dq:{nb}:lease").unwrap(), n);

    let nacks: Vec<NackItem> = leases
        .iter()
        .map(|l| NackItem::new(&l.topic, &l.id, Nack::retry(&l.token, "boom")))
        .collect();
    let (before, published) = (script_calls(&mut conn), publishes(&mut conn));
    let now = T0 + 20;
    let done = s.nack_batch(&nacks, now).await;
    assert_eq!(script_calls(&mut conn) - before, 3);
    let woke = publishes(&mut conn) - published;
    assert!(
        (1..=3).contains(&woke),
        "one wake-up at most per call: {woke}"
    );
    let mut dues = std::collections::HashSet::new();
    for r in &done {
        match r {
            Ok(NackOutcome::Retry { due_at_ms, attempt }) => {
                assert_eq!(*attempt, 1);
                // The default policy: 1 s ± 10 %.
                assert!((now + 900..=now + 1100).contains(due_at_ms), "{due_at_ms}");
                dues.insert(*due_at_ms);
            }
            other => panic!("{other:?}"),
        }
    }
    // One draw for all would give one due per call; 201 are possible.
    assert!(
        dues.len() > 100,
        "each job's own jitter: {} dues",
        dues.len()
    );
    assert_eq!(
        keys(&mut conn),
        vec![
            "dq:topic-names",
            "dq:topics",
            "dq:{nb2}:ctr",
            "dq:{nb2}:jobs",
            "dq:{nb2}:sched",
            "dq:{nb}:ctr",
            "dq:{nb}:jobs",
            "dq:{nb}:sched",
        ]
    );
    assert_eq!(conn.zcard::<_, usize>("dq:{nb}:sched").unwrap(), n);
    let failed: u64 = conn.hget("dq:{nb}:ctr", "failed").unwrap();
    assert_eq!(failed, n as u64);
    let failed: u64 = conn.hget("dq:{nb2}:ctr", "failed").unwrap();
    assert_eq!(failed, 1);
}

/// The flow-control keys' structures (common.lua's KR) hold only what is
/// live: once every keyed job is acked, no lane, ring, held, wait, lease
/// count or head entry is left (only the key buckets, until a keyed
/// reserve finds them full again); a deleted topic leaves nothing of them.
#[tokio::test]
async fn key_structures_hold_only_live_keys() {
    let server = RedisServer::start();
    let s = store(server.url());
    let mut conn = server.connection();
    let t = Topic::new("tenants").unwrap();
    s.configure_topic(
        &t,
        &TopicConfigPatch {
            key_concurrency: Some(Some(1)),
            key_rate_limit: Some(Some(RateLimit {
                limit: 100,
                per_ms: 1000,
                burst: 100,
            })),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let jobs: Vec<NewJob> = (0..6)
        .map(|i| NewJob {
            key: Some(JobKey::new(format!("c{}", i % 3)).unwrap()),
            ..job(&format!("j{i}"), 0)
        })
        .collect();
    s.enqueue(&t, &jobs, T0).await.unwrap();
    let k_keys = |conn: &mut redis::Connection| -> Vec<String> {
        let mut k: Vec<String> = conn.keys("dq:{tenants}:k:*").unwrap();
        k.sort();
        k
    };
    assert!(k_keys(&mut conn).contains(&"dq:{tenants}:k:q:c0".to_string()));
    let mut now = T0;
    loop {
        let r = s.reserve(&t, 10, None, now).await.unwrap();
        if r.leases.is_empty() {
            break;
        }
        assert!(r.leases.len() <= 3, "one per key");
        for l in &r.leases {
            s.ack(&t, &l.id, &l.token, now).await.unwrap();
        }
        now += 1;
    }
    assert_eq!(
        k_keys(&mut conn),
        vec!["dq:{tenants}:k:full", "dq:{tenants}:k:rl"],
        "only the buckets, until full"
    );
    // A keyed reserve after the buckets refilled forgets them (the one
    // key it hands out to keeps its own).
    put_keyed(&s, &t, "late", "c9", now).await;
    let r = s.reserve(&t, 10, None, now + 60_000).await.unwrap();
    s.ack(&t, &r.leases[0].id, &r.leases[0].token, now + 60_000)
        .await
        .unwrap();
    let buckets: Vec<String> = conn.hkeys("dq:{tenants}:k:rl").unwrap();
    assert_eq!(buckets, vec!["c9"]);
    // Delete with keyed jobs ready, held and reserved.
    s.enqueue(&t, &jobs, now).await.unwrap();
    s.reserve(&t, 1, None, now).await.unwrap();
    while !s.delete_topic(&t, 2).await.unwrap().1 {}
    let left: Vec<String> = conn.keys("dq:{tenants}:*").unwrap();
    assert!(left.is_empty(), "{left:?}");
}

async fn put_keyed(s: &RedisStore, t: &Topic, id: &str, key: &str, now: u64) {
    let j = NewJob {
        key: Some(JobKey::new(key).unwrap()),
        ..job(id, 0)
    };
    s.enqueue(t, &[j], now).await.unwrap();
}

/// The sorted topic names mirror the topics set: written and removed with
/// it; names an older dq wrote to the set alone (or removed from it alone)
/// are mended at the layout check and at a listing's first page.
#[tokio::test]
async fn topic_names_follow_the_topics_set() {
    let server = RedisServer::start();
    let s = store(server.url());
    let mut conn = server.connection();
    let zset = |conn: &mut redis::Connection| -> Vec<String> {
        conn.zrange("dq:topic-names", 0, -1).unwrap()
    };
    let t = Topic::new("made").unwrap();
    s.enqueue(&t, &[job("a", 0)], T0).await.unwrap();
    assert_eq!(zset(&mut conn), vec!["made"]);
    s.delete_topic(&t, 10).await.unwrap();
    assert!(zset(&mut conn).is_empty());
    let members: Vec<String> = conn.smembers("dq:topics").unwrap();
    assert!(members.is_empty());

    // An older dq: the set alone (and no layout key: layout 1, moved on).
    let old: Vec<String> = (0..2500).map(|i| format!("old{i:04}")).collect();
    for chunk in old.chunks(500) {
        let _: () = conn.sadd("dq:topics", chunk).unwrap();
    }
    assert_eq!(
        s.check_layout("r", true).await.unwrap(),
        Ok(dq_redis::layout::Layout::Upgraded { from: 1 })
    );
    assert_eq!(zset(&mut conn), old, "copied at the layout check");
    // It creates one more, and deletes two.
    let _: () = conn.sadd("dq:topics", "old9999").unwrap();
    let page = s
        .list_topics(&TopicListing::after(
            Some(&Topic::new("old2498").unwrap()),
            "",
            10,
        ))
        .await
        .unwrap();
    assert_eq!(
        page.topics,
        vec![Topic::new("old2499").unwrap()],
        "not on a later page"
    );
    let page = s
        .list_topics(&TopicListing::after(None, "old9", 10))
        .await
        .unwrap();
    assert_eq!(
        page.topics,
        vec![Topic::new("old9999").unwrap()],
        "the first page mends"
    );
    let _: () = conn.srem("dq:topics", &["old0000", "old0001"]).unwrap();
    let page = s
        .list_topics(&TopicListing::after(None, "", 1))
        .await
        .unwrap();
    assert_eq!(page.topics, vec![Topic::new("old0002").unwrap()]);
    assert_eq!(zset(&mut conn).len(), 2499);
    assert!(
        !s.sync_topic_index().await.unwrap(),
        "in step: nothing to do"
    );
}

/// What the Lua `expr` says of the record of `id` in topic `t` (the record
/// is `raw` in it), run on the server by EVAL.
fn on_record<T: redis::FromRedisValue>(
    conn: &mut redis::Connection,
    t: &str,
    id: &str,
    expr: &str,
) -> T {
    redis::cmd("EVAL")
        .arg(format!(
            "local raw = redis.call('HGET', KEYS[1], ARGV[1]) return {expr}"
        ))
        .arg(1)
        .arg(format!("dq:{{{t}}}:jobs"))
        .arg(id)
        .query(conn)
        .unwrap()
}

/// How many MessagePack values the record of `id` in topic `t` holds.
fn record_values(conn: &mut redis::Connection, t: &str, id: &str) -> i64 {
    on_record(conn, t, id, "select('#', cmsgpack.unpack(raw))")
}

/// A record ends at its last value set (8 values for a job just enqueued,
/// 16 in the wheel; a lease does not rewrite it: its token is in `tokens`,
/// and the hash is gone with the last lease), and a record padded with nils
/// to 16 values, as dq wrote them before, reads, leases and acks as before:
/// the scripts read a value left off as nil.
#[tokio::test]
async fn records_end_at_their_last_value_and_padded_ones_still_read() {
    let server = RedisServer::start();
    let s = store(server.url());
    let t = Topic::new("rec").unwrap();
    s.enqueue(&t, &[job("fresh", 0), job("far", 3_600_000)], T0)
        .await
        .unwrap();
    let mut conn = server.connection();
    assert_eq!(record_values(&mut conn, "rec", "fresh"), 8);
    assert_eq!(record_values(&mut conn, "rec", "far"), 16, "w = true");
    // Written as a build before this one did: 16 values, nils included,
    // due now, ready, enqueue order after the fresh job's.
    let _: () = redis::cmd("EVAL")
        .arg(
            "redis.call('HSET', KEYS[1], 'old', cmsgpack.pack(tonumber(ARGV[1]), 1024, 99, 0, 'y', tonumber(ARGV[1]), 'j', '{\"v\":\"old\"}', nil, nil, nil, nil, nil, nil, nil, nil)) \
             redis.call('ZADD', KEYS[2], 1024, string.format('%011x%012x', tonumber(ARGV[1]), 99) .. 'old')",
        )
        .arg(2)
        .arg("dq:{rec}:jobs")
        .arg("dq:{rec}:ready")
        .arg(T0)
        .query(&mut conn)
        .unwrap();
    assert_eq!(record_values(&mut conn, "rec", "old"), 16);
    let old = JobId::new("old").unwrap();
    let info = s
        .get(&t, &old)
        .await
        .unwrap()
        .expect("the padded record reads");
    assert_eq!(
        (info.state, info.due_at_ms, info.attempts),
        (JobState::Ready, T0, 0)
    );
    let leases = s.reserve(&t, 10, None, T0).await.unwrap().leases;
    let ids: Vec<&str> = leases.iter().map(|l| l.id.as_str()).collect();
    assert_eq!(ids, ["fresh", "old"], "enqueue order");
    assert_eq!(leases[1].body, Body::Json("{\"v\":\"old\"}".into()));
    assert_eq!(leases[1].attempt, 1);
    assert_eq!(record_values(&mut conn, "rec", "fresh"), 8);
    assert_eq!(record_values(&mut conn, "rec", "old"), 16, "as it was");
    for l in &leases {
        let token: String = conn.hget("dq:{rec}:tokens", l.id.as_str()).unwrap();
        assert_eq!(token, l.token);
    }
    let info = s.get(&t, &old).await.unwrap().unwrap();
    assert_eq!((info.state, info.attempts), (JobState::Reserved, 1));
    for l in &leases {
        s.ack(&t, &l.id, &l.token, T0).await.unwrap();
    }
    assert!(s.get(&t, &old).await.unwrap().is_none());
    let exists: bool = conn.exists("dq:{rec}:tokens").unwrap();
    assert!(!exists, "no lease left, no tokens hash");
}

/// A reserved job's record says ready (layout 2: its lease is its token):
/// a ready member left behind for it (by a bug, or a hand edit) must not
/// hand it out a second time, on the plain path (a topic without keyed
/// jobs) or on the keys' path.
#[tokio::test]
async fn a_stale_ready_member_of_a_reserved_job_is_not_handed_out_again() {
    let server = RedisServer::start();
    let s = store(server.url());
    let mut conn = server.connection();
    for (name, keyed) in [("plain", false), ("keyed", true)] {
        let t = Topic::new(name).unwrap();
        let mut j = job("j", 0);
        if keyed {
            j.key = Some(JobKey::new("k").unwrap());
        }
        s.enqueue(&t, &[j], T0).await.unwrap();
        let first = s.reserve(&t, 10, None, T0).await.unwrap().leases;
        assert_eq!(first.len(), 1);
        // Its ready member back where reserve took it from.
        let _: () = redis::cmd("EVAL")
            .arg(
                "local d, p, q = cmsgpack.unpack(redis.call('HGET', KEYS[1], 'j')) \
                 local m = string.format('%011x%012x', d, q) .. 'j' \
                 if ARGV[1] == '0' then redis.call('ZADD', KEYS[2], p, m) \
                 else redis.call('ZADD', KEYS[3], p, m) redis.call('ZADD', KEYS[4], 1, 'k') \
                   redis.call('HINCRBY', KEYS[5], 'kready', 1) end",
            )
            .arg(5)
            .arg(format!("dq:{{{name}}}:jobs"))
            .arg(format!("dq:{{{name}}}:ready"))
            .arg(format!("dq:{{{name}}}:k:q:k"))
            .arg(format!("dq:{{{name}}}:k:ring"))
            .arg(format!("dq:{{{name}}}:ctr"))
            .arg(if keyed { "1" } else { "0" })
            .query(&mut conn)
            .unwrap();
        let again = s.reserve(&t, 10, None, T0 + 1).await.unwrap().leases;
        assert!(again.is_empty(), "{name}: handed out twice: {again:?}");
        s.ack(&t, &first[0].id, &first[0].token, T0 + 2)
            .await
            .unwrap();
        let after = s.reserve(&t, 10, None, T0 + 3).await.unwrap().leases;
        assert!(after.is_empty(), "{name}: {after:?}");
    }
}

/// Whether the record of `id` in topic `t` is what cmsgpack.pack writes for
/// its own values (unpacked and packed again, byte for byte).
fn record_is_canonical(conn: &mut redis::Connection, t: &str, id: &str) -> bool {
    let same: i64 = on_record(
        conn,
        t,
        id,
        "cmsgpack.pack(cmsgpack.unpack(raw)) == raw and 1 or 0",
    );
    same == 1
}

/// The state letter (value 5) of the record of `id` in topic `t`.
fn record_state(conn: &mut redis::Connection, t: &str, id: &str) -> String {
    on_record(conn, t, id, "select(5, cmsgpack.unpack(raw))")
}

/// The raw record of `id` in topic `t`.
fn raw_record(conn: &mut redis::Connection, t: &str, id: &str) -> Vec<u8> {
    conn.hget(format!("dq:{{{t}}}:jobs"), id).unwrap()
}

/// The compact enqueue splices each record from pieces (the caller packs
/// kind and body, the call packs its constant values once): every record is
/// byte for byte the one the full form writes with `pack_values` for the
/// same job in the same call position (a topic that gets the same jobs and
/// one with an override, which makes the call full), and what cmsgpack.pack
/// writes for its own values. Over bodies at each of MessagePack's
/// string-header bounds (31/32 bytes, 255/256, 65,535/65,536: the last byte
/// of one header and the first of the next), JSON and bytes; priorities at
/// the integer encodings' bounds; due now, soon, in the wheel, in the past
/// (clamped to now), at a time, at the topic's default delay; with and
/// without a topic's default dedup window. Promoted (a record of 8 values
/// gets its state letter changed in place), rolled out of the wheel and
/// leased, each job comes out in (priority, due, enqueue) order, as sent.
/// Ids that exist, repeat in one call, or are in their dedup window get the
/// old path's answers.
#[tokio::test]
async fn compact_records_are_what_cmsgpack_writes() {
    let server = RedisServer::start();
    let s = store(server.url());
    let mut conn = server.connection();
    let body = |len: usize, json: bool| {
        if json {
            // A JSON string of `len` bytes: the quotes and `len - 2` x's.
            Body::Json(format!("\"{}\"", "x".repeat(len.max(2) - 2)))
        } else {
            // Every byte value, invalid UTF-8 included.
            Body::Bytes((0..len).map(|i| (i % 256) as u8).collect())
        }
    };
    let priorities = [0, 127, 128, 255, 256, 65_535, 65_536, u32::MAX, 1024];
    let whens = [
        ("now", When::DelayMs(0), T0),
        ("soon", When::DelayMs(5_000), T0 + 5_000),
        ("far", When::DelayMs(3_600_000), T0 + 3_600_000),
        ("past", When::DueAtMs(T0 - 1_000), T0),
        ("at", When::DueAtMs(T0 + 5_000), T0 + 5_000),
        ("dflt", When::TopicDefault, T0 + 2_000),
    ];
    // (id, job, due)
    let mut jobs = Vec::new();
    for len in [0, 1, 31, 32, 255, 256, 65_535, 65_536, 70_000] {
        for json in [true, false] {
            if json && len < 2 {
                continue;
            }
            for (when, w, due) in &whens {
                let id = format!("{when}-{len}-{}", if json { "j" } else { "b" });
                let mut j = NewJob::new(JobId::new(&id).unwrap(), body(len, json), *w);
                j.priority = priorities[jobs.len() % priorities.len()];
                jobs.push((id, j, *due));
            }
        }
    }
    let new: Vec<NewJob> = jobs.iter().map(|(_, j, _)| j.clone()).collect();
    let mut full = new.clone();
    let mut odd = NewJob::new(JobId::new("odd").unwrap(), body(3, true), When::DelayMs(0));
    odd.max_attempts = Some(3);
    full.push(odd);
    for (c, f, window) in [("c", "f", None), ("cw", "fw", Some(60_000))] {
        let (c, f) = (Topic::new(c).unwrap(), Topic::new(f).unwrap());
        for t in [&c, &f] {
            let patch = TopicConfigPatch {
                dedup_ms: window,
                default_delay_ms: Some(2_000),
                ..Default::default()
            };
            s.configure_topic(t, &patch).await.unwrap();
        }
        let out = s.enqueue(&c, &new, T0).await.unwrap();
        assert!(out.iter().all(|e| e.created), "{out:?}");
        for (e, (_, _, due)) in out.iter().zip(&jobs) {
            assert_eq!(e.due_at_ms, *due);
        }
        s.enqueue(&f, &full, T0).await.unwrap();
        for (id, j, due) in &jobs {
            let raw = raw_record(&mut conn, c.as_str(), id);
            assert_eq!(
                raw,
                raw_record(&mut conn, f.as_str(), id),
                "{c} {id}: as the full form writes it"
            );
            assert!(record_is_canonical(&mut conn, c.as_str(), id), "{c} {id}");
            let values = record_values(&mut conn, c.as_str(), id);
            let want = match (window, id.starts_with("far")) {
                (Some(_), _) => 21,
                (None, true) => 16,
                (None, false) => 8,
            };
            assert_eq!(values, want, "{c} {id}");
            let info = s.get(&c, &JobId::new(id).unwrap()).await.unwrap().unwrap();
            assert_eq!(
                (info.body.clone(), info.priority, info.due_at_ms),
                (j.body.clone(), j.priority, *due),
                "{c} {id}"
            );
        }
        // Rolled out of the wheel, promoted and leased, in order.
        let leased = s
            .reserve(&c, 1000, None, T0 + 3_600_000)
            .await
            .unwrap()
            .leases;
        let mut order: Vec<(u32, u64, usize)> = jobs
            .iter()
            .enumerate()
            .map(|(i, (_, j, due))| (j.priority, *due, i))
            .collect();
        order.sort();
        let want: Vec<&str> = order.iter().map(|&(_, _, i)| jobs[i].0.as_str()).collect();
        let got: Vec<&str> = leased.iter().map(|l| l.id.as_str()).collect();
        assert_eq!(got, want, "{c}: (priority, due, enqueue) order");
        for (l, &(priority, due, i)) in leased.iter().zip(&order) {
            assert_eq!(
                (l.body.clone(), l.due_at_ms, l.priority, l.attempt),
                (jobs[i].1.body.clone(), due, priority, 1),
                "{c} {}",
                l.id
            );
        }
        for (id, j, _) in &jobs {
            assert!(record_is_canonical(&mut conn, c.as_str(), id), "{c} {id}");
            // A lease is beside the record (layout 2): a leased job's says ready.
            assert_eq!(record_state(&mut conn, c.as_str(), id), "y", "{c} {id}");
            let info = s.get(&c, &JobId::new(id).unwrap()).await.unwrap().unwrap();
            assert_eq!(
                (info.state, info.body.clone()),
                (JobState::Reserved, j.body.clone()),
                "{c} {id}"
            );
        }
        // One job acked (in the windowed topic its id is then in its window),
        // then in one call: that id twice, an existing id, a new id three
        // times, one job due later.
        let first = &leased[0];
        s.ack(&c, &first.id, &first.token, T0 + 3_600_000)
            .await
            .unwrap();
        let now = T0 + 3_600_001;
        let again = |id: &str, delay| {
            NewJob::new(
                JobId::new(id).unwrap(),
                Body::Json("1".into()),
                When::DelayMs(delay),
            )
        };
        let gone = first.id.as_str();
        let out = s
            .enqueue(
                &c,
                &[
                    again(gone, 0),
                    again(gone, 9),
                    again("now-32-b", 9_000),
                    again("thrice", 70_000),
                    again("thrice", 0),
                    again("thrice", 7),
                    again("later", 1_000),
                ],
                now,
            )
            .await
            .unwrap();
        let got: Vec<(bool, bool, u64, JobState)> = out
            .iter()
            .map(|e| (e.created, e.deduplicated, e.due_at_ms, e.state))
            .collect();
        if window.is_some() {
            let head: Vec<(bool, bool, u64)> = got[..2].iter().map(|g| (g.0, g.1, g.2)).collect();
            assert_eq!(
                head,
                [(false, true, 0), (false, true, 0)],
                "{c}: in its window"
            );
        } else {
            assert_eq!(
                got[..2],
                [
                    (true, false, now, JobState::Ready),
                    (false, false, now, JobState::Ready)
                ],
                "{c}: gone, enqueued again, then the first's answer"
            );
        }
        assert_eq!(
            got[2..],
            [
                (false, false, T0, JobState::Reserved),
                (true, false, now + 70_000, JobState::Scheduled),
                (false, false, now + 70_000, JobState::Scheduled),
                (false, false, now + 70_000, JobState::Scheduled),
                (true, false, now + 1_000, JobState::Scheduled),
            ],
            "{c}"
        );
        let info = s
            .get(&c, &JobId::new("thrice").unwrap())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (info.due_at_ms, info.body),
            (now + 70_000, Body::Json("1".into()))
        );
        let info = s
            .get(&c, &JobId::new("now-32-b").unwrap())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(info.body, body(32, false), "{c}: left as it was");
    }
}

/// A job in put order (`NewJob::put_order`, beanstalkd's) keeps its put
/// delay as record value 23 (so it is never an 8-value record, which
/// promote flips in place) and is ranked by its put time in every ready
/// member: the ready set's and its key's lane's, made when it gets ready
/// and rebuilt to leave them (cancel, reschedule, reserve by id, a
/// replace, delete), so no member is left behind. Hand-outs a release
/// gives back are kept as value 24; a job in due order that was never
/// released keeps its 8 values.
#[tokio::test]
async fn put_order_ranks_by_put_time_in_every_ready_member() {
    let server = RedisServer::start();
    let s = store(server.url());
    let mut conn = server.connection();
    let t = Topic::new("po").unwrap();
    let po = |id: &str, delay: u64| NewJob {
        put_order: true,
        ..job(id, delay)
    };
    let get = |id: &'static str| {
        let (s, t) = (&s, &t);
        async move { s.get(t, &JobId::new(id).unwrap()).await.unwrap().unwrap() }
    };
    let mut keyed = po("keyed", 100);
    keyed.key = Some(JobKey::new("g").unwrap());
    // Put at T0 (seq 1 to 5), due at T0 + 100; a job in due order due at
    // T0 + 50 (seq 6).
    s.enqueue(
        &t,
        &[
            po("cancelled", 100),
            po("moved", 100),
            po("by-id", 100),
            po("replaced", 100),
            keyed,
        ],
        T0,
    )
    .await
    .unwrap();
    s.enqueue(&t, &[job("plain", 0)], T0 + 50).await.unwrap();
    for id in ["cancelled", "moved", "by-id", "replaced", "keyed"] {
        assert_eq!(record_values(&mut conn, "po", id), 23, "{id}");
        assert!(record_is_canonical(&mut conn, "po", id), "{id}");
        assert_eq!(get(id).await.put_delay_ms, Some(100), "{id}");
    }
    assert_eq!(record_values(&mut conn, "po", "plain"), 8);
    assert_eq!(get("plain").await.put_delay_ms, None);

    s.promote_due(&t, 100, T0 + 100).await.unwrap();
    let member = |at: u64, seq: u64, id: &str| format!("{at:011x}{seq:012x}{id}");
    let ready = |conn: &mut redis::Connection| -> Vec<String> {
        conn.zrange("dq:{po}:ready", 0, -1).unwrap()
    };
    assert_eq!(
        ready(&mut conn),
        [
            member(T0, 1, "cancelled"),
            member(T0, 2, "moved"),
            member(T0, 3, "by-id"),
            member(T0, 4, "replaced"),
            member(T0 + 50, 6, "plain"),
        ],
        "by put time, not due"
    );
    let lane: Vec<String> = conn.zrange("dq:{po}:k:q:g", 0, -1).unwrap();
    assert_eq!(lane, [member(T0, 5, "keyed")]);

    // Each way out of the ready set takes its member.
    let now = T0 + 200;
    let id = |i: &str| JobId::new(i).unwrap();
    s.cancel(&t, &id("cancelled"), now).await.unwrap();
    s.cancel(&t, &id("keyed"), now).await.unwrap();
    s.reschedule(&t, &id("moved"), now + 5000, false, now)
        .await
        .unwrap();
    let by_id = s
        .reserve_job(&t, &id("by-id"), None, now)
        .await
        .unwrap()
        .unwrap();
    // A replace is put anew: its put time is now's (seq 7).
    s.enqueue(
        &t,
        &[NewJob {
            replace: true,
            ..po("replaced", 0)
        }],
        now,
    )
    .await
    .unwrap();
    assert_eq!(
        ready(&mut conn),
        [member(T0 + 50, 6, "plain"), member(now, 7, "replaced")]
    );
    let lanes: Vec<String> = conn.keys("dq:{po}:k:*").unwrap();
    assert!(lanes.is_empty(), "{lanes:?}");
    let kready: Option<i64> = conn.hget("dq:{po}:ctr", "kready").unwrap();
    assert_eq!(kready.unwrap_or(0), 0);
    assert_eq!(get("replaced").await.put_delay_ms, Some(0));

    // Kicked out of the schedule: back at its put time, counted.
    s.reschedule(&t, &id("moved"), now, true, now)
        .await
        .unwrap();
    assert_eq!(ready(&mut conn)[0], member(T0, 2, "moved"));
    let moved = get("moved").await;
    assert_eq!((moved.counts.kicks, moved.put_delay_ms), (1, Some(100)));

    // Released (a job in due order, then one in put order) and dropped.
    let leases = s.reserve(&t, 10, None, now).await.unwrap().leases;
    let order: Vec<&str> = leases.iter().map(|l| l.id.as_str()).collect();
    assert_eq!(order, ["moved", "plain", "replaced"]);
    let lease = |i: &str| leases.iter().find(|l| l.id.as_str() == i).unwrap();
    let (plain, moved, replaced) = (lease("plain"), lease("moved"), lease("replaced"));
    s.release(&t, &plain.id, &plain.token, 0, GiveBack::Released, now)
        .await
        .unwrap();
    s.release(&t, &moved.id, &moved.token, 0, GiveBack::Dropped, now)
        .await
        .unwrap();
    s.release(
        &t,
        &replaced.id,
        &replaced.token,
        30,
        GiveBack::Released,
        now,
    )
    .await
    .unwrap();
    assert_eq!(record_values(&mut conn, "po", "plain"), 24, "rv set");
    let counted = |j: &JobInfo| {
        (
            j.attempts,
            j.counts.reserves,
            j.counts.releases,
            j.put_delay_ms,
        )
    };
    assert_eq!(counted(&get("plain").await), (0, 1, 1, None));
    assert_eq!(counted(&get("moved").await), (0, 1, 0, Some(100)));
    assert_eq!(counted(&get("replaced").await), (0, 1, 1, Some(30)));
    assert_eq!(counted(&get("by-id").await), (1, 1, 0, Some(100)));
    for i in ["plain", "moved", "replaced", "by-id"] {
        assert!(record_is_canonical(&mut conn, "po", i), "{i}");
    }
    assert_eq!(
        ready(&mut conn),
        [member(T0, 2, "moved"), member(now, 6, "plain")],
        "the job in due order by its new due"
    );
    s.ack(&t, &by_id.id, &by_id.token, now).await.unwrap();
    s.promote_due(&t, 100, now + 30).await.unwrap();
    assert_eq!(ready(&mut conn)[2], member(now, 7, "replaced"));

    // Nacked in a batch: to retry, the wait is the put delay; dead, it is
    // left.
    let leases = s.reserve(&t, 10, None, now + 30).await.unwrap().leases;
    let items: Vec<NackItem> = leases
        .iter()
        .filter(|l| l.id.as_str() != "plain")
        .map(|l| {
            let nack = if l.id.as_str() == "moved" {
                Nack::retry(&l.token, "x").retry_in(70)
            } else {
                Nack::dead(&l.token, "x")
            };
            NackItem::new(&t, &l.id, nack)
        })
        .collect();
    assert_eq!(items.len(), 2);
    for r in s.nack_batch(&items, now + 30).await {
        r.unwrap();
    }
    assert_eq!(get("moved").await.put_delay_ms, Some(70));
    let replaced = get("replaced").await;
    assert_eq!(
        (replaced.state, replaced.put_delay_ms),
        (JobState::Dead, Some(30))
    );

    // Deleted whole.
    while !s.delete_topic(&t, 2).await.unwrap().1 {}
    let left: Vec<String> = conn.keys("dq:{po}:*").unwrap();
    assert!(left.is_empty(), "{left:?}");
}

/// Value 25 of the record of `id` in topic `t` (the trace context), if it
/// has 25 values.
fn record_trace(conn: &mut redis::Connection, t: &str, id: &str) -> Option<String> {
    on_record(conn, t, id, "select(25, cmsgpack.unpack(raw))")
}

/// A job's trace context is record value 25, written only for a job that
/// has one: a job without one keeps exactly the bytes it had (8 values as
/// enqueued, 16 in the wheel; the same bytes whether its call was compact
/// or, because another job of the call has a trace context, full), and
/// one with it has 25 values whatever it goes through (the wheel, promote's
/// slow path, a reserve, a nack, death, a replay, a reserve by id, a
/// release, an import), handed back each time.
#[tokio::test]
async fn a_trace_context_is_value_25_and_a_job_without_one_keeps_its_bytes() {
    let server = RedisServer::start();
    let s = store(server.url());
    let mut conn = server.connection();
    let ctx = TraceContext::parse(
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        Some("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"),
    )
    .unwrap()
    .0;
    let stored = ctx.to_stored();
    let traced = |id: &str, delay: u64| NewJob {
        trace: Some(ctx.clone()),
        ..job(id, delay)
    };
    let (compact, full) = (Topic::new("plain").unwrap(), Topic::new("tr").unwrap());
    let plain = [job("now", 0), job("soon", 5_000), job("far", 3_600_000)];
    s.enqueue(&compact, &plain, T0).await.unwrap();
    let mut mixed = plain.to_vec();
    mixed.extend([
        traced("t-now", 0),
        traced("t-soon", 5_000),
        traced("t-far", 3_600_000),
    ]);
    s.enqueue(&full, &mixed, T0).await.unwrap();
    for (id, values) in [("now", 8), ("soon", 8), ("far", 16)] {
        let raw = raw_record(&mut conn, "tr", id);
        assert_eq!(raw, raw_record(&mut conn, "plain", id), "{id}: same bytes");
        assert_eq!(record_values(&mut conn, "tr", id), values, "{id}");
        assert_eq!(record_trace(&mut conn, "tr", id), None, "{id}");
    }
    let ids = ["t-now", "t-soon", "t-far"];
    let check = |conn: &mut redis::Connection, when: &str| {
        for id in ids {
            assert_eq!(record_values(conn, "tr", id), 25, "{when}: {id}");
            assert!(record_is_canonical(conn, "tr", id), "{when}: {id}");
            assert_eq!(
                record_trace(conn, "tr", id).as_deref(),
                Some(stored.as_str()),
                "{when}: {id}"
            );
        }
    };
    check(&mut conn, "enqueued");
    let get = |id: &'static str| {
        let (s, t) = (&s, &full);
        async move { s.get(t, &JobId::new(id).unwrap()).await.unwrap().unwrap() }
    };
    for id in ids {
        assert_eq!(get(id).await.trace.as_ref(), Some(&ctx), "{id}");
    }
    assert_eq!(get("far").await.trace, None);

    // Rolled out of the wheel and promoted (not the 8-value fast path),
    // then leased: the reply's records carry it.
    let now = T0 + 3_600_000;
    let leases = s.reserve(&full, 10, None, now).await.unwrap().leases;
    assert_eq!(leases.len(), 6);
    for l in &leases {
        let want = l.id.as_str().starts_with("t-").then(|| ctx.clone());
        assert_eq!(l.trace, want, "{}", l.id);
    }
    check(&mut conn, "leased");
    for (id, values) in [("now", 8), ("soon", 8), ("far", 8)] {
        assert_eq!(record_values(&mut conn, "tr", id), values, "{id} leased");
    }
    // Failed to retry, then dead, replayed, reserved by id, released.
    for l in &leases {
        let nack = Nack::retry(&l.token, "again").retry_in(0);
        s.nack(&full, &l.id, nack, now).await.unwrap();
    }
    check(&mut conn, "retried");
    let again = s.reserve(&full, 10, None, now + 1).await.unwrap().leases;
    for l in &again {
        s.nack(&full, &l.id, Nack::dead(&l.token, "x"), now + 1)
            .await
            .unwrap();
    }
    check(&mut conn, "dead");
    assert_eq!(s.replay_dead(&full, None, 10, now + 2).await.unwrap(), 6);
    check(&mut conn, "replayed");
    let by_id = s
        .reserve_job(&full, &JobId::new("t-far").unwrap(), None, now + 2)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(by_id.trace.as_ref(), Some(&ctx));
    s.release(
        &full,
        &by_id.id,
        &by_id.token,
        0,
        GiveBack::Released,
        now + 3,
    )
    .await
    .unwrap();
    check(&mut conn, "released");
    let released = s
        .reserve_job(&full, &by_id.id, None, now + 3)
        .await
        .unwrap();
    assert_eq!(released.unwrap().trace.as_ref(), Some(&ctx));
    for id in ["now", "soon", "far"] {
        assert!(record_values(&mut conn, "tr", id) < 25, "{id}");
        assert_eq!(get(id).await.trace, None, "{id}");
    }

    // An import keeps one and writes none for a job without.
    let imp = Topic::new("imp").unwrap();
    let with = ImportJob {
        trace: Some(ctx.clone()),
        ..imported("with", JobState::Scheduled, now + 5_000)
    };
    let without = imported("without", JobState::Scheduled, now + 5_000);
    s.import_jobs(&imp, &[with, without], now).await.unwrap();
    assert_eq!(
        record_trace(&mut conn, "imp", "with").as_deref(),
        Some(stored.as_str())
    );
    assert_eq!(record_values(&mut conn, "imp", "with"), 25);
    assert!(record_values(&mut conn, "imp", "without") < 25);
    let page = s.list_jobs(&imp, None, None, 10).await.unwrap();
    let mut listed: Vec<(String, Option<TraceContext>)> = page
        .jobs
        .into_iter()
        .map(|j| (j.info.id.to_string(), j.info.trace))
        .collect();
    listed.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        listed,
        [
            ("with".to_string(), Some(ctx.clone())),
            ("without".to_string(), None)
        ]
    );
}
