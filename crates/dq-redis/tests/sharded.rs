//! The store over several Redis shards, with partitioned topics: the whole
//! conformance suite on 3 shards; a 16-partition topic spread over them;
//! a shard killed mid-load.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use dq_core::*;
use dq_redis::{RedisConfig, RedisStore, ShardedStore};
use dq_testkit::RedisServer;
use redis::Commands;

const T0: u64 = 1_700_000_000_000;

fn sharded(servers: &[RedisServer]) -> ShardedStore {
    ShardedStore::new(
        servers
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let store = RedisStore::new(&RedisConfig {
                    url: s.url(),
                    response_timeout: std::time::Duration::from_millis(500),
                    connect_timeout: std::time::Duration::from_millis(200),
                    clock: dq_redis::TimeSource::Caller,
                    ..Default::default()
                })
                .unwrap();
                (format!("shard {i}"), store)
            })
            .collect(),
    )
}

async fn fresh() -> (ShardedStore, Vec<RedisServer>) {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    (sharded(&servers), servers)
}

dq_testkit::conformance_tests!(fresh());

/// Outside the macro (it takes the forward sink too): through the sink
/// `dq serve` gives over the three shards.
#[tokio::test]
async fn ack_and_write_elsewhere_does_nothing() {
    let (store, _servers) = fresh().await;
    let store = Arc::new(store);
    let sink = dq_redis::RedisSink::over(store.clone());
    dq_testkit::conformance::ack_and_write_elsewhere_does_nothing(&*store, &sink).await;
}

fn job(id: &str, when: When) -> NewJob {
    NewJob::new(JobId::new(id).unwrap(), Body::Json("{}".into()), when)
}

fn generated(when: When) -> NewJob {
    NewJob::with_generated_id(Body::Json("{}".into()), when)
}

/// Reserves from `t` at `now` until a reserve hands nothing out; how many
/// were handed out.
async fn reserve_all(s: &ShardedStore, t: &Topic, now: u64) -> usize {
    let mut n = 0;
    loop {
        let r = s.reserve(t, 1000, None, now).await.unwrap();
        if r.leases.is_empty() {
            break n;
        }
        n += r.leases.len();
    }
}

async fn partitioned(s: &ShardedStore, t: &Topic, n: u32) {
    s.configure_topic(
        t,
        &TopicConfigPatch {
            partitions: Some(n),
            max_attempts: Some(1),
            ..Default::default()
        },
    )
    .await
    .unwrap();
}

/// A 16-partition topic over 3 shards: jobs spread over every shard, each
/// handed out once to concurrent reservers; lookups, lists, stats, dead
/// letters and settings see the topic whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_topic_spreads_over_shards() {
    let (s, servers) = fresh().await;
    let s = Arc::new(s);
    let t = Topic::new("hot").unwrap();
    partitioned(&s, &t, 16).await;
    assert_eq!(s.topic_config(&t).await.unwrap().unwrap().partitions, 16);
    assert_eq!(
        s.topics().await.unwrap(),
        vec![t.clone()],
        "partitions are not topics"
    );

    let mut jobs: Vec<NewJob> = (0..500)
        .map(|i| job(&format!("u{i}"), When::DelayMs(0)))
        .collect();
    jobs.extend((0..500).map(|_| generated(When::DelayMs(0))));
    let mut ids = HashSet::new();
    for chunk in jobs.chunks(250) {
        for e in s.enqueue(&t, chunk, T0).await.unwrap() {
            assert!(e.created);
            assert!(ids.insert(e.id.to_string()), "ids are unique");
        }
    }
    assert_eq!(ids.len(), 1000);
    assert!(
        ids.iter().filter(|i| i.contains("~p")).count() == 500,
        "generated ids name their partition"
    );
    for (i, server) in servers.iter().enumerate() {
        let records: usize = server
            .connection()
            .keys::<_, Vec<String>>("dq:{hot*}:jobs")
            .unwrap()
            .len();
        assert!(
            records >= 2,
            "shard {i} holds partitions of the topic ({records})"
        );
    }
    let st = s.stats(&t, T0).await.unwrap();
    assert_eq!((st.ready, st.counters.enqueued), (1000, 1000));

    // Lookups by id reach the right partition.
    let u7 = JobId::new("u7").unwrap();
    assert_eq!(
        s.get(&t, &u7).await.unwrap().unwrap().state,
        JobState::Ready
    );
    let gen_id = JobId::new(ids.iter().find(|i| i.contains("~p")).unwrap().clone()).unwrap();
    assert!(s.get(&t, &gen_id).await.unwrap().is_some());
    assert_eq!(s.cancel(&t, &u7, 0).await.unwrap(), Some(JobState::Ready));

    // Four reservers take everything, each job once.
    let mut handles = Vec::new();
    for _ in 0..4 {
        let (s, t) = (s.clone(), t.clone());
        handles.push(tokio::spawn(async move {
            let mut got = Vec::new();
            loop {
                let c = s.reserve(&t, 50, None, T0 + 1).await.unwrap();
                if c.leases.is_empty() {
                    return got;
                }
                for l in c.leases {
                    assert_eq!(l.topic, t, "leases name the topic, not the partition");
                    got.push(l);
                }
            }
        }));
    }
    let mut leases = Vec::new();
    for h in handles {
        leases.extend(h.await.unwrap());
    }
    let reserved: HashSet<String> = leases.iter().map(|l| l.id.to_string()).collect();
    assert_eq!(leases.len(), 999, "every job but the cancelled one, once");
    assert_eq!(reserved.len(), 999);

    // Ack most, kill three; dead letters of all partitions list as one.
    for (k, l) in leases.iter().enumerate() {
        if k < 3 {
            s.nack(
                &t,
                &l.id,
                Nack::retry(&l.token, &format!("boom {k}")),
                T0 + 10 + k as u64,
            )
            .await
            .unwrap();
        } else {
            s.ack(&t, &l.id, &l.token, 0).await.unwrap();
        }
    }
    let dead = s.list_dead(&t, 0, 10).await.unwrap();
    assert_eq!(dead.len(), 3);
    assert_eq!(
        dead.iter()
            .map(|j| j.last_error.clone().unwrap())
            .collect::<Vec<_>>(),
        ["boom 0", "boom 1", "boom 2"],
        "oldest death first across partitions"
    );
    assert_eq!(s.list_dead(&t, 1, 1).await.unwrap()[0].id, dead[1].id);

    // Scheduled jobs list in due order across partitions.
    for i in 0..20u64 {
        s.enqueue(
            &t,
            &[job(&format!("s{i}"), When::DueAtMs(T0 + 100_000 - i))],
            T0,
        )
        .await
        .unwrap();
    }
    let next = s.list_scheduled(&t, 0, 5).await.unwrap();
    assert_eq!(
        next.iter().map(|j| j.id.to_string()).collect::<Vec<_>>(),
        ["s19", "s18", "s17", "s16", "s15"]
    );

    // The partition count changes only on an empty topic.
    let e = s
        .configure_topic(
            &t,
            &TopicConfigPatch {
                partitions: Some(4),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&e, StoreError::Invalid(i) if i.code == "invalid_partitions"),
        "{e:?}"
    );
    assert_eq!(s.topic_config(&t).await.unwrap().unwrap().partitions, 16);
    assert_eq!(
        s.replay_dead(&t, Some(&[dead[0].id.clone()]), 10, T0 + 20)
            .await
            .unwrap(),
        1
    );
    assert_eq!(s.purge_dead(&t, 100).await.unwrap(), 2);
    let (deleted, gone) = s.delete_topic(&t, 1000).await.unwrap();
    assert!(gone);
    assert_eq!(deleted, 21, "the replayed job and the scheduled ones");
    assert!(s.topics().await.unwrap().is_empty());
    for server in &servers {
        let left: Vec<String> = server.connection().keys("dq:{hot*").unwrap();
        assert!(left.is_empty(), "nothing of the topic left: {left:?}");
    }
}

/// One of three shards dies mid-load: enqueues with generated ids keep
/// succeeding, reserves keep handing out the other shards' jobs, and after the
/// shard is back (its data on disk) its jobs come out too; none lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_shard_delays_only_its_own_jobs() {
    let mut servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start_durable()).collect();
    let s = sharded(&servers);
    let t = Topic::new("orders").unwrap();
    partitioned(&s, &t, 12).await;

    let mut enqueued = HashSet::new();
    for _ in 0..10 {
        for e in s
            .enqueue(
                &t,
                &(0..50)
                    .map(|_| generated(When::DelayMs(0)))
                    .collect::<Vec<_>>(),
                T0,
            )
            .await
            .unwrap()
        {
            enqueued.insert(e.id.to_string());
        }
    }
    servers[1].stop();

    // Generated ids go to partitions that answer.
    for _ in 0..10 {
        let r = s
            .enqueue(
                &t,
                &(0..50)
                    .map(|_| generated(When::DelayMs(0)))
                    .collect::<Vec<_>>(),
                T0,
            )
            .await
            .expect("enqueue with generated ids while a shard is down");
        enqueued.extend(r.into_iter().map(|e| e.id.to_string()));
    }
    assert_eq!(enqueued.len(), 1000);
    // A producer's own id on the dead shard is refused, not lost.
    let on_dead = (0..1000)
        .map(|i| format!("mine-{i}"))
        .find(|id| {
            let p = dq_redis::sharded::partition_of(id, 12);
            s.shard_of_partition(&t.partition(p)) == 1
        })
        .unwrap();
    assert!(matches!(
        s.enqueue(&t, &[job(&on_dead, When::DelayMs(0))], T0).await,
        Err(StoreError::Unavailable(_))
    ));

    // Reserves hand out everything the live shards hold.
    let mut got: HashMap<String, u32> = HashMap::new();
    loop {
        let c = s.reserve(&t, 100, Some(600_000), T0 + 1).await.unwrap();
        if c.leases.is_empty() {
            break;
        }
        for l in c.leases {
            *got.entry(l.id.to_string()).or_default() += 1;
            s.ack(&t, &l.id, &l.token, 0).await.unwrap();
        }
    }
    let before = got.len();
    assert!(before >= 500, "the live shards' jobs came out: {before}");
    assert!(before < 1000, "the dead shard's did not");
    let health = s.health().await;
    assert!(health[1].1.is_err() && health[0].1.is_ok() && health[2].1.is_ok());
    assert!(s.ping().await.is_ok(), "ready while any shard answers");

    // The shard comes back with its data: the rest comes out, once each.
    servers[1].restart();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while got.len() < 1000 {
        assert!(
            std::time::Instant::now() < deadline,
            "only {} of 1000",
            got.len()
        );
        let c = s.reserve(&t, 100, None, T0 + 2).await;
        if let Ok(c) = c {
            for l in c.leases {
                *got.entry(l.id.to_string()).or_default() += 1;
                s.ack(&t, &l.id, &l.token, 0).await.unwrap();
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(got.values().all(|n| *n == 1), "each job handed out once");
    assert_eq!(got.keys().cloned().collect::<HashSet<_>>(), enqueued);
}

/// The shard holding partition 0 — the topic's count of partitions, its
/// first copy of the settings, its name in the topics set — is the one a
/// store would lean on; killing it must still delay only its own jobs, for
/// an instance that knew the topic (cached count) and for one that starts
/// cold (another dq instance, a restart).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shard_of_partition_zero_down_delays_only_its_own_jobs() {
    let mut servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start_durable()).collect();
    let s = sharded(&servers);
    // A topic whose partitions 0 and 1 sit on different shards (else the
    // second copy of the settings is down too).
    let t = (0..)
        .map(|i| Topic::new(format!("orders-{i}")).unwrap())
        .find(|t| s.shard_of_partition(&t.partition(0)) != s.shard_of_partition(&t.partition(1)))
        .unwrap();
    partitioned(&s, &t, 12).await;
    let zero = s.shard_of_partition(&t.partition(0));
    let on_live = (1..12)
        .filter(|p| s.shard_of_partition(&t.partition(*p)) != zero)
        .count();
    assert!(on_live > 0);
    let jobs: Vec<NewJob> = (0..300).map(|_| generated(When::DelayMs(0))).collect();
    s.enqueue(&t, &jobs, T0).await.unwrap();
    assert!(s.stats(&t, T0).await.unwrap().missing.is_empty());

    servers[zero].stop();
    let cold = sharded(&servers);
    for (who, st) in [("warm", &s), ("cold", &cold)] {
        assert!(
            st.topics().await.unwrap().contains(&t),
            "{who}: the topic is still listed"
        );
        let cfg = st
            .topic_config(&t)
            .await
            .unwrap_or_else(|e| panic!("{who}: settings unreadable: {e}"));
        assert_eq!(cfg.map(|c| c.partitions), Some(12), "{who}");
        let more: Vec<NewJob> = (0..50).map(|_| generated(When::DelayMs(0))).collect();
        let r = st
            .enqueue(&t, &more, T0)
            .await
            .unwrap_or_else(|e| panic!("{who}: generated-id enqueue refused: {e}"));
        assert_eq!(r.len(), 50);
        let c = st
            .reserve(&t, 100, Some(600_000), T0 + 1)
            .await
            .unwrap_or_else(|e| panic!("{who}: reserve refused: {e}"));
        assert!(!c.leases.is_empty(), "{who}: live partitions hand out");
        let stats = st
            .stats(&t, T0 + 1)
            .await
            .unwrap_or_else(|e| panic!("{who}: stats refused: {e}"));
        assert!(stats.partial, "{who}: {stats:?}");
        assert_eq!(stats.missing, [format!("shard {zero}")], "{who}");
    }

    servers[zero].restart();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match s.stats(&t, T0 + 2).await {
            Ok(st) if !st.partial => break,
            _ => {}
        }
        assert!(std::time::Instant::now() < deadline, "shard back");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Export and import over a partitioned topic: an import spreads the jobs
/// over their partitions (each on its shard), and a listing walks every
/// partition in turn, each job once; a cursor naming a partition the topic
/// does not have is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_and_import_cross_every_partition() {
    let (s, _servers) = fresh().await;
    let t = Topic::new("parted").unwrap();
    partitioned(&s, &t, 5).await;
    let jobs: Vec<ImportJob> = (0..200u64)
        .map(|i| ImportJob {
            id: JobId::new(format!("imp-{i}")).unwrap(),
            state: if i % 10 == 0 {
                JobState::Dead
            } else {
                JobState::Scheduled
            },
            due_at_ms: T0 + i * 1000,
            priority: 7,
            attempts: (i % 3) as u32,
            max_attempts: None,
            lease_ms: None,
            retry: None,
            dedup_ms: None,
            body: Body::Bytes(vec![i as u8]),
            last_error: (i % 10 == 0).then(|| "gone".to_string()),
            errors: Vec::new(),
            created_at_ms: T0 - 1,
            key: None,
            died_at_ms: (i % 10 == 0).then_some(T0),
            trace: None,
        })
        .collect();
    let out = s.import_jobs(&t, &jobs, T0).await.unwrap();
    assert!(
        out.iter()
            .zip(&jobs)
            .all(|(o, j)| o.created && o.id == j.id)
    );
    let st = s.stats(&t, T0).await.unwrap();
    assert_eq!((st.scheduled, st.ready, st.dead), (180, 0, 20));

    let mut seen = HashMap::new();
    let mut partitions = HashSet::new();
    let mut cursor: Option<String> = None;
    loop {
        let p = s.list_jobs(&t, None, cursor.as_deref(), 7).await.unwrap();
        for j in p.jobs {
            *seen.entry(j.info.id.to_string()).or_insert(0) += 1;
        }
        match p.cursor {
            Some(c) => {
                partitions.insert(c.split_once('.').unwrap().0.to_string());
                cursor = Some(c);
            }
            None => break,
        }
    }
    assert_eq!(seen.len(), 200);
    assert!(seen.values().all(|n| *n == 1));
    // Each of the small partitions is one page: the cursors name the next ones.
    assert_eq!(
        partitions.len(),
        4,
        "went on to every partition after the first"
    );
    let again = s.import_jobs(&t, &jobs, T0 + 5).await.unwrap();
    assert!(again.iter().all(|o| !o.created));
    assert_eq!(s.stats(&t, T0).await.unwrap().dead, 20);
    let e = s.list_jobs(&t, None, Some("5.0"), 7).await.unwrap_err();
    assert!(matches!(&e, StoreError::Invalid(i) if i.code == "invalid_cursor"));
}

/// A rate limit on a topic of 4 partitions: each partition keeps a quarter
/// of the rate and burst, so with a backlog in every partition the topic
/// hands out exactly its limit per window, across shards.
#[tokio::test]
async fn a_partitioned_topic_keeps_its_rate_limit() {
    let (s, _servers) = fresh().await;
    let t = Topic::new("limited-hot").unwrap();
    partitioned(&s, &t, 4).await;
    s.configure_topic(
        &t,
        &TopicConfigPatch {
            rate_limit: Some(Some(RateLimit {
                limit: 40,
                per_ms: 1000,
                burst: 40,
            })),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let jobs: Vec<NewJob> = (0..400)
        .map(|i| job(&format!("u{i}"), When::DelayMs(0)))
        .collect();
    for chunk in jobs.chunks(100) {
        s.enqueue(&t, chunk, T0).await.unwrap();
    }
    let count = |now| reserve_all(&s, &t, now);
    assert_eq!(count(T0).await, 40, "the burst, over every partition");
    assert_eq!(
        count(T0 + 99).await,
        0,
        "each partition's next token is at +100"
    );
    assert_eq!(
        count(T0 + 1000).await,
        40,
        "a second later, the limit again"
    );
    let st = s.stats(&t, T0 + 1000).await.unwrap();
    assert_eq!((st.reserved, st.ready), (80, 320));
    assert!(st.counters.rate_limited > 0);
}

/// A partitioned topic splits `key_concurrency` over its partitions (each
/// allows K / P, at least 1), so one key never holds more than K leases
/// when K >= P, and at most P when K < P (docs/design.md says so); the
/// keys' turns and lanes hold in every partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_topic_splits_its_key_concurrency() {
    let (s, _servers) = fresh().await;
    let t = Topic::new("keyed-hot").unwrap();
    partitioned(&s, &t, 4).await;
    let limit = |k| TopicConfigPatch {
        key_concurrency: Some(Some(k)),
        ..Default::default()
    };
    s.configure_topic(&t, &limit(8)).await.unwrap();
    let jobs: Vec<NewJob> = (0..200)
        .map(|i| NewJob {
            key: Some(JobKey::new("x").unwrap()),
            ..job(&format!("x{i}"), When::DelayMs(0))
        })
        .collect();
    for chunk in jobs.chunks(100) {
        s.enqueue(&t, chunk, T0).await.unwrap();
    }
    let count = |now| reserve_all(&s, &t, now);
    assert_eq!(count(T0).await, 8, "2 in each of 4 partitions");
    s.configure_topic(&t, &limit(10)).await.unwrap();
    assert_eq!(count(T0 + 1).await, 0, "10 / 4 is still 2 each");
    s.configure_topic(&t, &limit(2)).await.unwrap();
    let st = s.stats(&t, T0 + 2).await.unwrap();
    assert_eq!((st.reserved, st.ready), (8, 192));
    // Expired leases come back; at K < P each partition allows one.
    s.requeue_expired(&t, 1000, T0 + 60_000).await.unwrap();
    assert_eq!(count(T0 + 60_000).await, 4, "one in each partition");
}

/// A second instance that looked at a topic before it existed, then
/// enqueues right after another instance made it with 8 partitions: its
/// jobs go where their ids lead, so the first instance finds and acks
/// them (a count of 1 remembered from before would put them all in
/// partition 0, out of reach of every lookup by id).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_looked_at_before_it_was_made_is_not_remembered_as_one_partition() {
    let (a, servers) = fresh().await;
    let b = sharded(&servers);
    let t = Topic::new("late").unwrap();
    assert!(
        b.get(&t, &JobId::new("x").unwrap())
            .await
            .unwrap()
            .is_none()
    );
    partitioned(&a, &t, 8).await;
    let jobs: Vec<NewJob> = (0..40)
        .map(|i| job(&format!("j{i}"), When::DueAtMs(1)))
        .collect();
    b.enqueue(&t, &jobs, 1_000).await.unwrap();
    for i in 0..40 {
        let id = JobId::new(format!("j{i}")).unwrap();
        assert!(a.get(&t, &id).await.unwrap().is_some(), "j{i} found by id");
    }
}

/// Topics split into partitions over 3 shards are listed once each, in
/// order, page after page, with a prefix; a shard holding only some of a
/// topic's partitions (not partition 0) still makes it known.
#[tokio::test]
async fn list_topics_merges_shards_and_partitions() {
    let (s, _servers) = fresh().await;
    let mut names = Vec::new();
    for i in 0..12 {
        let t = Topic::new(format!("p{i:02}")).unwrap();
        partitioned(&s, &t, 1 + (i % 5) * 7).await;
        names.push(t);
    }
    for i in 0..9 {
        let t = Topic::new(format!("q{i}")).unwrap();
        s.enqueue(&t, &[job("a", When::DelayMs(0))], T0)
            .await
            .unwrap();
        names.push(t);
    }
    // Partitions sort right after their topic: `p00` (1 partition), then
    // `p01#1`…: `p01` is still one name.
    for limit in [1, 2, 5, 21, 100] {
        let (mut got, mut after) = (Vec::new(), None::<Topic>);
        loop {
            let page = s
                .list_topics(&TopicListing::after(after.as_ref(), "", limit))
                .await
                .unwrap();
            assert!(page.topics.len() <= limit);
            got.extend(page.topics.iter().cloned());
            if !page.more {
                break;
            }
            after = page.topics.last().cloned();
        }
        assert_eq!(got, names, "limit {limit}");
        let (mut pages, mut before) = (Vec::new(), None::<Topic>);
        loop {
            let page = s
                .list_topics(&TopicListing::before(before.as_ref(), "", limit))
                .await
                .unwrap();
            pages.push(page.topics.clone());
            if !page.more {
                break;
            }
            before = page.topics.first().cloned();
        }
        pages.reverse();
        assert_eq!(pages.concat(), names, "backward, limit {limit}");
    }
    let page = s
        .list_topics(&TopicListing::after(None, "p1", 100))
        .await
        .unwrap();
    let want: Vec<Topic> = names[10..12].to_vec();
    assert_eq!((page.topics, page.more), (want, false));
    let page = s
        .list_topics(&TopicListing::after(Some(&names[3]), "p", 2))
        .await
        .unwrap();
    assert_eq!((page.topics, page.more), (names[4..6].to_vec(), true));
}

/// Ready and scheduled jobs of a partitioned topic page after page: every
/// page is the slice of the whole list at its offset (none missed, none
/// twice), ready jobs without a key in hand-out order before the keys'
/// lanes, scheduled ones by due time.
#[tokio::test]
async fn a_partitioned_topic_pages_its_waiting_jobs_whole() {
    let (s, _servers) = fresh().await;
    let t = Topic::new("paged").unwrap();
    partitioned(&s, &t, 4).await;
    let mut jobs = Vec::new();
    for i in 0..40u32 {
        let mut j = job(&format!("r{i:02}"), When::DelayMs(0));
        j.priority = (i * 7) % 5;
        if i % 4 == 0 {
            j.key = Some(JobKey::new(format!("k{}", i % 3)).unwrap());
        }
        jobs.push(j);
    }
    for i in 0..30u64 {
        jobs.push(job(
            &format!("s{i:02}"),
            When::DueAtMs(T0 + 60_000 + (i % 7) * 1000),
        ));
    }
    s.enqueue(&t, &jobs, T0).await.unwrap();
    let ids = |v: Vec<JobInfo>| v.into_iter().map(|j| j.id.to_string()).collect::<Vec<_>>();
    let ready = ids(s.list_ready(&t, 0, 100).await.unwrap());
    assert_eq!(ready.len(), 40);
    let all = s.list_ready(&t, 0, 100).await.unwrap();
    let first_keyed = all.iter().position(|j| j.key.is_some()).unwrap();
    assert!(all[first_keyed..].iter().all(|j| j.key.is_some()));
    assert!(
        all[..first_keyed]
            .windows(2)
            .all(|w| (w[0].priority, w[0].due_at_ms) <= (w[1].priority, w[1].due_at_ms)),
        "hand-out order"
    );
    let scheduled = ids(s.list_scheduled(&t, 0, 100).await.unwrap());
    assert_eq!(scheduled.len(), 30);
    for size in [1, 3, 7] {
        let (mut r, mut u) = (Vec::new(), Vec::new());
        for offset in (0..45).step_by(size) {
            r.extend(ids(s.list_ready(&t, offset, size).await.unwrap()));
            u.extend(ids(s.list_scheduled(&t, offset, size).await.unwrap()));
        }
        assert_eq!(r, ready, "ready pages of {size}");
        assert_eq!(u, scheduled, "scheduled pages of {size}");
    }
}

/// The ready jobs of a partitioned topic are listed in hand-out order
/// across partitions when some are in put order: a job in put order by
/// its put time (it was put before the others, due after them), one in
/// due order by its due, page after page.
#[tokio::test]
async fn a_partitioned_topic_lists_put_order_jobs_by_put_time() {
    let (s, _servers) = fresh().await;
    let t = Topic::new("put-order").unwrap();
    partitioned(&s, &t, 4).await;
    // Put at T0 + i, due at T0 + 1000 (i < 12) or T0 + i (12 ≤ i < 24);
    // then jobs in due order, due at T0 + 500 + i.
    for i in 0..24u64 {
        let delay = if i < 12 { 1000 - i } else { 0 };
        let j = NewJob {
            put_order: true,
            priority: (i % 2) as u32,
            ..job(&format!("p{i:02}"), When::DelayMs(delay))
        };
        s.enqueue(&t, &[j], T0 + i).await.unwrap();
    }
    for i in 0..12u64 {
        let j = NewJob {
            priority: (i % 2) as u32,
            ..job(&format!("d{i:02}"), When::DueAtMs(T0 + 500 + i))
        };
        s.enqueue(&t, &[j], T0 + 30).await.unwrap();
    }
    s.promote_due(&t, 100, T0 + 1000).await.unwrap();
    let ids = |v: Vec<JobInfo>| v.into_iter().map(|j| j.id.to_string()).collect::<Vec<_>>();
    let all = ids(s.list_ready(&t, 0, 100).await.unwrap());
    let mut want: Vec<(u64, u64, String)> = (0..24u64)
        .map(|i| (i % 2, T0 + i, format!("p{i:02}")))
        .chain((0..12u64).map(|i| (i % 2, T0 + 500 + i, format!("d{i:02}"))))
        .collect();
    want.sort();
    let want: Vec<String> = want.into_iter().map(|w| w.2).collect();
    assert_eq!(all, want);
    for size in [1, 5] {
        let mut r = Vec::new();
        for offset in (0..40).step_by(size) {
            r.extend(ids(s.list_ready(&t, offset, size).await.unwrap()));
        }
        assert_eq!(r, want, "pages of {size}");
    }
}

/// A partitioned topic hands each job's trace context back whichever
/// partition and shard holds it: in a reserve across partitions, in a
/// reserve by id, in get and in the listing of every partition; a job
/// without one has none.
#[tokio::test]
async fn a_partitioned_topic_hands_trace_contexts_back() {
    let (s, _servers) = fresh().await;
    let t = Topic::new("traced-hot").unwrap();
    partitioned(&s, &t, 4).await;
    let ctx = |i: usize| {
        let parent = format!("00-{:032x}-{:016x}-01", i + 1, i + 100);
        TraceContext::parse(&parent, Some("vendor=v1")).unwrap().0
    };
    // Even jobs traced, odd ones plain: one call of both, another plain.
    let jobs: Vec<NewJob> = (0..40usize)
        .map(|i| NewJob {
            trace: i.is_multiple_of(2).then(|| ctx(i)),
            ..job(&format!("t{i}"), When::DelayMs(0))
        })
        .collect();
    s.enqueue(&t, &jobs, T0).await.unwrap();
    let plain: Vec<NewJob> = (40..50)
        .map(|i| job(&format!("t{i}"), When::DelayMs(0)))
        .collect();
    s.enqueue(&t, &plain, T0).await.unwrap();
    let want = |id: &JobId| {
        let i: usize = id.as_str()[1..].parse().unwrap();
        (i < 40 && i.is_multiple_of(2)).then(|| ctx(i))
    };
    let r = s.reserve(&t, 30, None, T0).await.unwrap();
    assert_eq!(r.leases.len(), 30);
    for l in &r.leases {
        assert_eq!(l.trace, want(&l.id), "{}", l.id);
        assert_eq!(l.topic, t, "the lease names the topic");
    }
    let mut listed = 0;
    let mut cursor: Option<String> = None;
    loop {
        let p = s.list_jobs(&t, None, cursor.as_deref(), 7).await.unwrap();
        for j in &p.jobs {
            assert_eq!(j.info.trace, want(&j.info.id), "listed: {}", j.info.id);
        }
        listed += p.jobs.len();
        cursor = p.cursor;
        if cursor.is_none() {
            break;
        }
    }
    assert_eq!(listed, 50);
    let leased: HashSet<String> = r.leases.iter().map(|l| l.id.to_string()).collect();
    for i in 0..50 {
        let id = JobId::new(format!("t{i}")).unwrap();
        assert_eq!(s.get(&t, &id).await.unwrap().unwrap().trace, want(&id));
        if !leased.contains(id.as_str()) {
            let l = s.reserve_job(&t, &id, None, T0).await.unwrap().unwrap();
            assert_eq!(l.trace, want(&id), "by id: {id}");
        }
    }
}
