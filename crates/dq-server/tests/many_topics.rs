//! Many idle topics cost nothing while idle: the dispatcher passes only the
//! topics with timed work (what the store announced, what this process
//! handed out, a small sweep), and a reserve naming many topics asks the
//! store only about those that may have work.
//!
//! Work is counted, not timed: the scripts a real `redis-server` ran
//! (`INFO commandstats`, `cmdstat_evalsha`), before and after.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use dq_core::{Body, Clock, JobId, Limits, NewJob, Store, SystemClock, Topic, When};
use dq_server::AppState;
use dq_server::dispatcher::{Dispatcher, SWEEP, owns};
use dq_testkit::RedisServer;
use tokio_util::sync::CancellationToken;

/// Scripts (`EVALSHA`) the Redis has run so far.
fn scripts_run(redis: &RedisServer) -> u64 {
    let out = std::process::Command::new("redis-cli")
        .args(["-p", &redis.port().to_string(), "info", "commandstats"])
        .output()
        .expect("redis-cli runs");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn job(id: &str, when: When) -> NewJob {
    NewJob::new(JobId::new(id).unwrap(), Body::Json("{}".into()), when)
}

/// `n` topics `t0000…`, each holding one job due in an hour.
async fn idle_topics(store: &Arc<dyn Store>, n: usize) -> Vec<Topic> {
    let now = SystemClock.now_ms();
    let mut topics = Vec::with_capacity(n);
    for i in 0..n {
        let t = Topic::new(format!("t{i:04}")).unwrap();
        store
            .enqueue(&t, &[job("later", When::DelayMs(3_600_000))], now)
            .await
            .unwrap();
        topics.push(t);
    }
    topics
}

/// Waits until `f` holds, for at most `within`.
async fn until(within: Duration, mut f: impl AsyncFnMut() -> bool) -> bool {
    let end = Instant::now() + within;
    while Instant::now() < end {
        if f().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    f().await
}

/// Waits until the Redis runs at most `per_second` scripts a second (the
/// passes at start are over), for at most 30 s.
async fn settled(redis: &RedisServer, per_second: u64) {
    let end = Instant::now() + Duration::from_secs(30);
    let mut last = scripts_run(redis);
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = scripts_run(redis);
        if now - last <= per_second / 2 {
            return;
        }
        last = now;
    }
    panic!("the Redis never settled under {per_second} scripts/s");
}

/// The scripts run over 2 s of idling, once the passes at start (at least
/// `started` scripts in all) are over.
async fn idle_scripts(redis: &RedisServer, started: u64) -> u64 {
    assert!(
        until(Duration::from_secs(20), async || scripts_run(redis)
            >= started)
        .await,
        "the start pass ran"
    );
    settled(redis, (2 * SWEEP * 2) as u64).await;
    let from = scripts_run(redis);
    tokio::time::sleep(Duration::from_secs(2)).await;
    scripts_run(redis) - from
}

/// The service over a store of its own on `redis` (what one `dq serve` has).
fn instance(redis: &RedisServer) -> (Arc<dyn Store>, AppState) {
    let store: Arc<dyn Store> = Arc::new(support::sharded_redis_at(&redis.url()));
    let state = AppState::new(store.clone(), Arc::new(SystemClock), Limits::default());
    (store, state)
}

/// A dispatcher of `state`'s instance (a sweep step each second), running
/// until the token is cancelled.
fn run_dispatcher(
    store: &Arc<dyn Store>,
    state: &AppState,
) -> (CancellationToken, tokio::task::JoinHandle<()>) {
    let d = Dispatcher::new(
        store.clone(),
        Arc::new(SystemClock),
        state.service.wakers().clone(),
        Duration::from_secs(1),
    );
    let cancel = CancellationToken::new();
    let run = tokio::spawn(d.run(cancel.clone()));
    (cancel, run)
}

#[tokio::test]
async fn idle_topics_are_not_passed_again_and_an_announced_one_is_at_once() {
    let redis = RedisServer::start();
    let (store, state) = instance(&redis);
    let topics = idle_topics(&store, 600).await;
    let before = scripts_run(&redis);
    let (cancel, run) = run_dispatcher(&store, &state);
    // The pass at start: two scripts per topic.
    let idle = idle_scripts(&redis, before + 1200).await;
    // Two seconds of idling: at most three sweep steps of SWEEP topics (two
    // scripts each), where a pass over every topic each second ran 2,400.
    assert!(
        idle <= (3 * SWEEP * 2) as u64,
        "{idle} scripts in 2 s idle with 600 topics"
    );

    // A job due soon, written through another instance: announced, so the
    // dispatcher passes that topic and promotes the job when due, not
    // before, long before any sweep would reach it.
    let (other, _other_state) = instance(&redis);
    let t = &topics[300];
    let written = Instant::now();
    other
        .enqueue(t, &[job("soon", When::DelayMs(400))], SystemClock.now_ms())
        .await
        .unwrap();
    let ready = async || store.stats(t, SystemClock.now_ms()).await.unwrap().ready == 1;
    assert!(until(Duration::from_secs(2), ready).await, "promoted");
    let took = written.elapsed();
    assert!(
        took >= Duration::from_millis(400),
        "promoted after {took:?}, before it was due"
    );
    cancel.cancel();
    run.await.unwrap();
}

/// Jobs falling due every millisecond: each reserve promotes what is due,
/// so the dispatcher passes such a topic at most every `PROMOTE_GAP_MS`
/// (it used to pass it back to back, two scripts per pass) and still
/// promotes every job.
#[tokio::test]
async fn a_topic_due_every_millisecond_is_passed_at_most_every_gap() {
    let redis = RedisServer::start();
    let (store, state) = instance(&redis);
    let t = Topic::new("dense").unwrap();
    let first = SystemClock.now_ms() + 700;
    let jobs: Vec<NewJob> = (0..300u64)
        .map(|i| job(&format!("j{i:03}"), When::DueAtMs(first + i)))
        .collect();
    store
        .enqueue(&t, &jobs, SystemClock.now_ms())
        .await
        .unwrap();
    let (cancel, run) = run_dispatcher(&store, &state);
    // The pass at start and the announced enqueue's are over well before
    // the first job is due.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let before = scripts_run(&redis);
    let all_ready = async || store.stats(&t, SystemClock.now_ms()).await.unwrap().ready == 300;
    assert!(
        until(Duration::from_secs(5), all_ready).await,
        "every job promoted"
    );
    let passes = (scripts_run(&redis) - before) / 2;
    // 300 ms of due jobs: about 30 passes; a sweep step or two on top.
    assert!(
        passes <= 300 / dq_server::dispatcher::PROMOTE_GAP_MS + 10,
        "{passes} passes for 300 jobs due 1 ms apart"
    );
    cancel.cancel();
    run.await.unwrap();
}

#[tokio::test]
async fn a_lease_handed_out_here_is_taken_back_here_whoever_owns_the_topic() {
    let redis = RedisServer::start();
    let (store, state) = instance(&redis);
    let d = Dispatcher::new(
        store.clone(),
        Arc::new(SystemClock),
        state.service.wakers().clone(),
        // No sweep step within the test: only the lease note can do it.
        Duration::from_secs(30),
    );
    // Another instance is alive and owns the topic; it never passes it.
    let members = vec![d.id.clone(), "other".to_string()];
    let mut elsewhere = (0..)
        .map(|i| Topic::new(format!("owned-elsewhere-{i}")).unwrap())
        .filter(|t| owns(&members, "other", t.as_str()));
    let (t, touched) = (elsewhere.next().unwrap(), elsewhere.next().unwrap());
    let ttl = d.member_ttl().as_millis() as u64;
    store
        .members("other", SystemClock.now_ms(), ttl)
        .await
        .unwrap();
    let svc = state.service.clone();
    svc.enqueue(&t, job("j", When::DelayMs(0))).await.unwrap();
    svc.enqueue(&touched, job("j", When::DelayMs(0)))
        .await
        .unwrap();
    let cancel = CancellationToken::new();
    let run = tokio::spawn(d.run(cancel.clone()));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let leases = svc
        .reserve(std::slice::from_ref(&t), 1, Some(300), 0)
        .await
        .unwrap();
    assert_eq!(leases.len(), 1);
    // Not cut short: still held until its deadline.
    while SystemClock.now_ms() + 20 < leases[0].lease_deadline_ms {
        let s = store.stats(&t, SystemClock.now_ms()).await.unwrap();
        assert_eq!(
            (s.reserved, s.counters.expired),
            (1, 0),
            "lease taken back before its deadline"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let back = async || {
        let s = store.stats(&t, SystemClock.now_ms()).await.unwrap();
        s.reserved == 0 && s.counters.expired == 1
    };
    assert!(
        until(Duration::from_secs(3), back).await,
        "the expired lease was taken back"
    );

    // A lease of an hour, cut to 300 ms by a touch: taken back then.
    let l = svc
        .reserve(std::slice::from_ref(&touched), 1, Some(3_600_000), 0)
        .await
        .unwrap()
        .pop()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    svc.touch(&touched, &l.id, &l.token, Some(300))
        .await
        .unwrap();
    let back = async || {
        let s = store.stats(&touched, SystemClock.now_ms()).await.unwrap();
        s.reserved == 0 && s.counters.expired == 1
    };
    assert!(
        until(Duration::from_secs(3), back).await,
        "the shortened lease was taken back"
    );
    cancel.cancel();
    run.await.unwrap();
}

#[tokio::test]
async fn a_reserve_over_many_topics_asks_only_those_that_may_have_work() {
    let redis = RedisServer::start();
    let (store, state) = instance(&redis);
    let svc = state.service.clone();
    let topics = idle_topics(&store, 400).await;
    // The first reserve asks every topic; what it learnt holds after.
    let first = scripts_run(&redis);
    assert!(svc.reserve(&topics, 1, None, 0).await.unwrap().is_empty());
    assert!(scripts_run(&redis) - first >= 400, "asked each topic once");
    let again = scripts_run(&redis);
    assert!(svc.reserve(&topics, 1, None, 0).await.unwrap().is_empty());
    assert_eq!(
        scripts_run(&redis) - again,
        0,
        "nothing changed: asked none"
    );

    // A job enqueued here is found at once, asking only its topic.
    svc.enqueue(&topics[399], job("now", When::DelayMs(0)))
        .await
        .unwrap();
    let asked = scripts_run(&redis);
    let got = svc.reserve(&topics, 1, None, 0).await.unwrap();
    assert_eq!(got.len(), 1, "the last topic of the list");
    assert_eq!(got[0].topic, topics[399]);
    assert_eq!(scripts_run(&redis) - asked, 1, "asked only that topic");

    // The first topic, through another instance: the long-poll wakes for its
    // announcement and finds it.
    let (other, _other_state) = instance(&redis);
    let waiter = {
        let (svc, topics) = (svc.clone(), topics.clone());
        tokio::spawn(async move { svc.reserve(&topics, 1, None, 5_000).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let written = Instant::now();
    other
        .enqueue(
            &topics[0],
            &[job("remote", When::DelayMs(0))],
            SystemClock.now_ms(),
        )
        .await
        .unwrap();
    let got = waiter.await.unwrap().unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].id.as_str(), "remote");
    assert!(
        written.elapsed() < Duration::from_secs(4),
        "woken, not timed out"
    );

    // A job due later than the hint said nothing before: due in 300 ms, it
    // is handed out once due and not before.
    let enqueued = Instant::now();
    svc.enqueue(&topics[200], job("later-on", When::DelayMs(300)))
        .await
        .unwrap();
    let got = svc.reserve(&topics, 1, None, 3_000).await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].id.as_str(), "later-on");
    assert!(
        enqueued.elapsed() >= Duration::from_millis(300),
        "never early"
    );
}

#[tokio::test]
async fn on_the_embedded_store_a_reserve_over_many_topics_sees_every_change() {
    let (store, _dir) = support::embedded_store();
    let state = AppState::new(store.clone(), Arc::new(SystemClock), Limits::default());
    let svc = state.service.clone();
    let topics = idle_topics(&store, 200).await;
    assert!(svc.reserve(&topics, 1, None, 0).await.unwrap().is_empty());
    // Written straight into the store (as a process's other parts do): its
    // announcement makes the next reserve look.
    store
        .enqueue(
            &topics[150],
            &[job("direct", When::DelayMs(0))],
            SystemClock.now_ms(),
        )
        .await
        .unwrap();
    let got = svc.reserve(&topics, 1, None, 0).await.unwrap();
    assert_eq!(got.len(), 1, "no wait needed: the store announced it");
    // A nack back to ready is seen too.
    let l = &got[0];
    svc.nack(
        &l.topic,
        &l.id,
        dq_core::Nack {
            token: &l.token,
            error: "again",
            retry_in_ms: Some(0),
            dead: false,
            priority: None,
        },
    )
    .await
    .unwrap();
    let got = svc.reserve(&topics, 1, None, 0).await.unwrap();
    assert_eq!(got.len(), 1, "nacked job handed out again");
}

#[tokio::test]
async fn beyond_metrics_max_topics_only_named_and_active_topics_get_series() {
    let (store, _dir) = support::embedded_store();
    let state = AppState::new(store.clone(), Arc::new(SystemClock), Limits::default());
    let svc = state.service.clone();
    for t in ["a", "b", "c", "d", "keep-1"] {
        svc.enqueue(&Topic::new(t).unwrap(), job("j", When::DelayMs(0)))
            .await
            .unwrap();
    }
    let b = Topic::new("b").unwrap();
    assert_eq!(svc.reserve(&[b], 1, None, 0).await.unwrap().len(), 1);
    let series = |text: &str, t: &str| {
        text.contains(&format!("dq_topic_jobs{{topic=\"{t}\",state=\"ready\"}}"))
    };

    // Within the bound: every topic.
    let text = svc.metrics_text().await;
    assert!(
        ["a", "b", "c", "d", "keep-1"]
            .iter()
            .all(|t| series(&text, t))
    );
    assert!(text.contains("\ndq_topics 5\n"));
    assert!(text.contains("\ndq_topics_without_series 0\n"));

    // Beyond it: the named ones and the one handed out of here.
    state
        .metrics
        .set_topic_series(dq_server::metrics::TopicSeries {
            max_topics: 3,
            topics: vec![dq_server::keys::TopicPattern::parse("keep-*").unwrap()],
        });
    let text = svc.metrics_text().await;
    assert!(series(&text, "b"), "active here");
    assert!(series(&text, "keep-1"), "named");
    for t in ["a", "c", "d"] {
        assert!(!series(&text, t), "{t} has no series of its own");
    }
    assert!(text.contains("\ndq_topics 5\n"));
    assert!(text.contains("\ndq_topics_without_series 3\n"));
}

#[tokio::test]
async fn a_dispatcher_among_others_stays_idle_while_they_come_and_go_in_any_order() {
    let redis = RedisServer::start();
    let (store, _state) = instance(&redis);
    idle_topics(&store, 600).await;
    let d = Dispatcher::new(
        store.clone(),
        Arc::new(SystemClock),
        Arc::new(dq_server::wakers::Wakers::default()),
        Duration::from_secs(1),
    );
    let ttl = d.member_ttl().as_millis() as u64;
    // Two other instances, seen alive in turn: the store lists the members
    // by when each was last seen, so their order keeps changing.
    let heartbeats = {
        let store = store.clone();
        tokio::spawn(async move {
            for i in 0.. {
                let m = if i % 2 == 0 { "other-1" } else { "other-2" };
                if store.members(m, SystemClock.now_ms(), ttl).await.is_err() {
                    return;
                }
                // Not a divisor of the dispatcher's second: it sees both orders.
                tokio::time::sleep(Duration::from_millis(130)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = scripts_run(&redis);
    let cancel = CancellationToken::new();
    let run = tokio::spawn(d.run(cancel.clone()));
    // The pass at start: its share of the 600 topics, two scripts each.
    let idle = idle_scripts(&redis, before + 200).await;
    // Were a new order a change of members, it would pass its ~200 topics
    // again on every look (each second at least): 800 scripts.
    assert!(
        idle <= (3 * SWEEP * 2) as u64,
        "{idle} scripts in 2 s idle with 600 topics among three instances"
    );
    cancel.cancel();
    run.await.unwrap();
    heartbeats.abort();
}
