//! Topics: settings and their defaults, deletion, listing (`topics`,
//! `list_topics` pages and prefixes), stats, pausing (`pause_topic` and the
//! `paused` setting) and the settings version.

use dq_core::*;

use super::T0;
use super::support::{id, ids, job, one, put, ready_jobs, topic};

/// Topic settings: defaults, partial updates, the default delay, listing, deletion.
pub async fn configure_topic_and_list_topics(s: &dyn Store) {
    let t = topic("cfg");
    assert!(s.topic_config(&t).await.unwrap().is_none(), "unknown topic");
    let c = s
        .configure_topic(
            &t,
            &TopicConfigPatch {
                default_delay_ms: Some(777),
                lease_ms: Some(1234),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        (c.default_delay_ms, c.lease_ms, c.max_attempts),
        (777, 1234, 5)
    );
    let c = s
        .configure_topic(
            &t,
            &TopicConfigPatch {
                max_attempts: Some(9),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        (c.default_delay_ms, c.max_attempts),
        (777, 9),
        "others kept"
    );
    assert_eq!(s.topic_config(&t).await.unwrap(), Some(c));

    let e = put(s, &t, job("d", When::TopicDefault), T0).await;
    assert_eq!(e.due_at_ms, T0 + 777);
    // Reads show the limits in effect: the topic's, for a job without its
    // own, whatever the topic says now.
    let info = s.get(&t, &id("d")).await.unwrap().unwrap();
    assert_eq!(
        (info.max_attempts, info.lease_ms),
        (9, 1234),
        "topic's limits"
    );
    let mut own = job("own", When::DelayMs(60_000));
    own.max_attempts = Some(2);
    put(s, &t, own, T0).await;
    let listed = s.list_scheduled(&t, 0, 10).await.unwrap();
    let limits: Vec<(String, u32, u64)> = listed
        .iter()
        .map(|j| (j.id.to_string(), j.max_attempts, j.lease_ms))
        .collect();
    assert_eq!(
        limits,
        vec![("d".into(), 9, 1234), ("own".into(), 2, 1234)],
        "listed with the limits in effect"
    );
    s.cancel(&t, &id("own"), 0).await.unwrap();
    let l = one(s, &t, None, T0 + 777).await;
    assert_eq!(l.lease_deadline_ms, T0 + 777 + 1234, "topic lease");

    put(s, &t, job("x", When::DelayMs(5)), T0).await;
    let other = topic("implicit");
    put(s, &other, job("y", When::DelayMs(5)), T0).await;
    let names: Vec<String> = s
        .topics()
        .await
        .unwrap()
        .iter()
        .map(|t| t.to_string())
        .collect();
    assert_eq!(names, vec!["cfg", "implicit"]);
    assert_eq!(
        s.topic_config(&other).await.unwrap(),
        Some(TopicConfig::default())
    );

    let (n, gone) = s.delete_topic(&t, 1).await.unwrap();
    assert_eq!((n, gone), (1, false), "bounded batch");
    let (n, gone) = s.delete_topic(&t, 100).await.unwrap();
    assert_eq!((n, gone), (1, true));
    assert!(s.topic_config(&t).await.unwrap().is_none());
    assert!(s.get(&t, &id("x")).await.unwrap().is_none());
    assert_eq!(s.topics().await.unwrap(), vec![other]);
}

/// Every page of [`Store::list_topics`] from `after` on, with `limit` each:
/// the names in order, and how many pages it took.
async fn all_pages(s: &dyn Store, prefix: &str, limit: usize) -> (Vec<String>, usize) {
    let (mut names, mut pages, mut after) = (Vec::new(), 0, None::<Topic>);
    loop {
        let page = s
            .list_topics(&TopicListing::after(after.as_ref(), prefix, limit))
            .await
            .unwrap();
        pages += 1;
        assert!(page.topics.len() <= limit, "at most limit: {page:?}");
        assert!(
            !page.more || page.topics.len() == limit,
            "a page that says more is full: {page:?}"
        );
        names.extend(page.topics.iter().map(Topic::to_string));
        if !page.more {
            return (names, pages);
        }
        after = page.topics.last().cloned();
        assert!(pages < 1000, "the listing ends");
    }
}

/// Every page of [`Store::list_topics`] backward from the end, each page's
/// first topic the cursor of the next: the names in order.
async fn all_pages_backward(s: &dyn Store, prefix: &str, limit: usize) -> Vec<String> {
    let (mut pages, mut before) = (Vec::new(), None::<Topic>);
    loop {
        let page = s
            .list_topics(&TopicListing::before(before.as_ref(), prefix, limit))
            .await
            .unwrap();
        assert!(page.topics.len() <= limit, "at most limit: {page:?}");
        assert!(
            page.topics.windows(2).all(|w| w[0] < w[1]),
            "in name order: {page:?}"
        );
        pages.push(page.topics.iter().map(Topic::to_string).collect::<Vec<_>>());
        if !page.more {
            pages.reverse();
            return pages.concat();
        }
        before = page.topics.first().cloned();
        assert!(pages.len() < 1000, "the listing ends");
    }
}

/// `list_topics` pages through every topic once, in name (byte) order,
/// whatever the limit; a topic made by settings alone (no job) is listed,
/// as `topics` lists it; a cursor past the end, or one that names a topic
/// deleted meanwhile, goes on from where it stands.
pub async fn list_topics_pages_in_name_order(s: &dyn Store) {
    assert_eq!(
        s.list_topics(&TopicListing::after(None, "", 10))
            .await
            .unwrap(),
        TopicPage::default(),
        "no topics: an empty last page"
    );
    let mut names: Vec<String> = (0..23).map(|i| format!("t{i:02}")).collect();
    names.extend(["A", "Z-upper", "t", "t.x", "t$", "t_", "u(1)"].map(String::from));
    for n in &names {
        put(s, &topic(n), job("j", When::DelayMs(0)), T0).await;
    }
    // Settings only, no job: a topic as well.
    s.configure_topic(
        &topic("configured"),
        &TopicConfigPatch {
            max_attempts: Some(3),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    names.push("configured".into());
    names.sort();
    let listed: Vec<String> = s
        .topics()
        .await
        .unwrap()
        .iter()
        .map(Topic::to_string)
        .collect();
    assert_eq!(listed, names, "topics lists the same");

    for limit in [1, 2, 7, 30, 31, 1000] {
        let (got, pages) = all_pages(s, "", limit).await;
        assert_eq!(got, names, "limit {limit}");
        assert_eq!(
            pages,
            names.len().div_ceil(limit),
            "limit {limit}: no extra page"
        );
        assert_eq!(
            all_pages_backward(s, "", limit).await,
            names,
            "backward, limit {limit}"
        );
    }
    // Backward: the page before a name, and before the first one.
    let page = s
        .list_topics(&TopicListing::before(Some(&topic("t")), "", 2))
        .await
        .unwrap();
    assert_eq!(page.topics, vec![topic("Z-upper"), topic("configured")]);
    assert!(page.more);
    let page = s
        .list_topics(&TopicListing::before(Some(&topic("A")), "", 5))
        .await
        .unwrap();
    assert_eq!(page, TopicPage::default());
    let page = s
        .list_topics(&TopicListing::after(None, "", 31))
        .await
        .unwrap();
    assert_eq!(page.topics.len(), 31);
    assert!(!page.more, "exactly all: nothing follows");
    let page = s
        .list_topics(&TopicListing::after(None, "", 30))
        .await
        .unwrap();
    assert!(page.more);

    // A cursor after the last name, and one before the first.
    let last = topic(names.last().unwrap());
    assert_eq!(
        s.list_topics(&TopicListing::after(Some(&last), "", 10))
            .await
            .unwrap(),
        TopicPage::default()
    );
    let page = s
        .list_topics(&TopicListing::after(Some(&topic("zzz")), "", 10))
        .await
        .unwrap();
    assert!(page.topics.is_empty() && !page.more);
    let page = s
        .list_topics(&TopicListing::after(Some(&topic("0")), "", 2))
        .await
        .unwrap();
    assert_eq!(page.topics, vec![topic("A"), topic("Z-upper")]);
    assert!(page.more);

    // Deleted between two pages: the cursor topic itself, and one further on.
    let first = s
        .list_topics(&TopicListing::after(None, "t", 3))
        .await
        .unwrap();
    assert_eq!(first.topics, vec![topic("t"), topic("t$"), topic("t.x")]);
    for gone in ["t.x", "t01"] {
        let (_, deleted) = s.delete_topic(&topic(gone), 100).await.unwrap();
        assert!(deleted, "{gone}");
    }
    let next = s
        .list_topics(&TopicListing::after(first.topics.last(), "t", 3))
        .await
        .unwrap();
    assert_eq!(next.topics, vec![topic("t00"), topic("t02"), topic("t03")]);
    assert!(next.more);
}

/// `list_topics`' prefix is a plain prefix, exact: `_` and `%` are
/// characters, not wildcards; a whole name is a prefix of itself; the empty
/// prefix is every topic; a prefix no topic can start with matches none.
pub async fn list_topics_prefix_is_exact(s: &dyn Store) {
    for n in ["a_b", "axb", "a_", "a", "ab", "abc", "b", "a_b.c", "A_b"] {
        put(s, &topic(n), job("j", When::DelayMs(0)), T0).await;
    }
    let names = |p: TopicPage| -> Vec<String> { p.topics.iter().map(Topic::to_string).collect() };
    for (prefix, want) in [
        ("a_", vec!["a_", "a_b", "a_b.c"]),
        ("a_b", vec!["a_b", "a_b.c"]),
        ("abc", vec!["abc"]),
        ("ab", vec!["ab", "abc"]),
        ("a", vec!["a", "a_", "a_b", "a_b.c", "ab", "abc", "axb"]),
        ("b", vec!["b"]),
        ("bb", vec![]),
        ("A", vec!["A_b"]),
        ("a%", vec![]),
        ("%", vec![]),
        ("a b", vec![]),
        (
            "",
            vec!["A_b", "a", "a_", "a_b", "a_b.c", "ab", "abc", "axb", "b"],
        ),
    ] {
        let page = s
            .list_topics(&TopicListing::after(None, prefix, 100))
            .await
            .unwrap();
        assert!(!page.more, "{prefix:?}");
        assert_eq!(names(page), want, "prefix {prefix:?}");
        let (paged, _) = all_pages(s, prefix, 1).await;
        assert_eq!(paged, want, "prefix {prefix:?} one at a time");
        assert_eq!(
            all_pages_backward(s, prefix, 2).await,
            want,
            "prefix {prefix:?} backward"
        );
    }
    // A cursor before the prefix's names starts at the first of them; one
    // past them ends the listing.
    let page = s
        .list_topics(&TopicListing::after(Some(&topic("A")), "ab", 1))
        .await
        .unwrap();
    assert_eq!(
        (names(page.clone()), page.more),
        (vec!["ab".to_string()], true)
    );
    let page = s
        .list_topics(&TopicListing::after(Some(&topic("abc")), "ab", 10))
        .await
        .unwrap();
    assert_eq!(page, TopicPage::default());
    // Backward from past the prefix's names, and from before them.
    let page = s
        .list_topics(&TopicListing::before(Some(&topic("zz")), "a_", 2))
        .await
        .unwrap();
    assert_eq!(
        (names(page.clone()), page.more),
        (vec!["a_b".into(), "a_b.c".into()], true)
    );
    let page = s
        .list_topics(&TopicListing::before(Some(&topic("a")), "a_", 2))
        .await
        .unwrap();
    assert_eq!(page, TopicPage::default());
}

/// Stats count each state and report how overdue the oldest waiting job is.
pub async fn stats_count_states(s: &dyn Store) {
    let t = topic("stats");
    for (i, d) in [0u64, 0, 0, 100, 5000].iter().enumerate() {
        put(s, &t, job(&format!("j{i}"), When::DelayMs(*d)), T0).await;
    }
    let l = one(s, &t, None, T0).await;
    s.ack(&t, &l.id, &l.token, 0).await.unwrap();
    s.reserve(&t, 1, None, T0).await.unwrap();
    let st = s.stats(&t, T0 + 300).await.unwrap();
    assert_eq!((st.scheduled, st.ready, st.reserved, st.dead), (2, 1, 1, 0));
    assert_eq!(st.oldest_overdue_ms, 300, "the ready job has waited 300 ms");
    assert_eq!((st.counters.enqueued, st.counters.acked), (5, 1));
    let p = s.promote_due(&t, 10, T0 + 300).await.unwrap();
    assert_eq!(
        p,
        Promoted {
            moved: 1,
            next_due_ms: Some(T0 + 5000)
        }
    );
    let st = s.stats(&t, T0 + 300).await.unwrap();
    assert_eq!((st.scheduled, st.ready), (1, 2));
    let empty = s.stats(&topic("empty"), T0).await.unwrap();
    assert_eq!(empty, TopicStats::default());
}

/// `paused: true` holds every hand-out (no time to look again: the resume
/// wakes waiters) while enqueues go on; resuming hands the backlog out, in
/// order; the settings say so; a timed pause is a separate thing.
pub async fn paused_topic_holds_hand_outs_until_resumed(s: &dyn Store) {
    let t = topic("held");
    ready_jobs(s, &t, "a", 3, T0).await;
    let paused = |on| TopicConfigPatch {
        paused: Some(on),
        ..Default::default()
    };
    let c = s.configure_topic(&t, &paused(true)).await.unwrap();
    assert!(c.paused);
    assert!(s.topic_config(&t).await.unwrap().unwrap().paused);
    let e = put(s, &t, job("b", When::DelayMs(0)), T0 + 1).await;
    assert!(e.created, "enqueues go on while paused");
    let r = s.reserve(&t, 10, None, T0 + 10_000).await.unwrap();
    assert!(r.leases.is_empty(), "handed out of a paused topic");
    assert_eq!(r.next_due_ms, None, "no time: only the resume ends it");
    let st = s.stats(&t, T0 + 10_000).await.unwrap();
    assert_eq!((st.ready, st.reserved), (4, 0));
    assert_eq!(
        st.oldest_overdue_ms, 10_000,
        "the held jobs' lateness shows"
    );
    // A timed pause that ends does not end `paused`.
    s.pause_topic(&t, T0 + 20_000).await.unwrap();
    s.pause_topic(&t, 0).await.unwrap();
    assert!(
        s.reserve(&t, 10, None, T0 + 20_001)
            .await
            .unwrap()
            .leases
            .is_empty()
    );
    // Any other setting changed keeps it paused.
    let c = s
        .configure_topic(
            &t,
            &TopicConfigPatch {
                lease_ms: Some(5000),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(c.paused);
    let c = s.configure_topic(&t, &paused(false)).await.unwrap();
    assert!(!c.paused);
    let r = s.reserve(&t, 10, None, T0 + 20_002).await.unwrap();
    assert_eq!(ids(&r), vec!["a000", "a001", "a002", "b"]);
    assert!(r.leases.iter().all(|l| l.attempt == 1));
}

/// `pause_topic`: nothing is handed out before the pause ends (the reserve
/// says when to look again), stats report it, and 0 resumes at once.
pub async fn pause_topic_hands_nothing_out(s: &dyn Store) {
    let t = topic("paused");
    put(s, &t, job("a", When::DelayMs(0)), T0).await;
    s.pause_topic(&t, T0 + 5000).await.unwrap();
    let c = s.reserve(&t, 10, None, T0 + 4999).await.unwrap();
    assert!(c.leases.is_empty(), "handed out of a paused topic");
    assert_eq!(c.next_due_ms, Some(T0 + 5000));
    assert_eq!(s.stats(&t, T0).await.unwrap().paused_until_ms, T0 + 5000);
    assert_eq!(
        s.reserve(&t, 10, None, T0 + 5000)
            .await
            .unwrap()
            .leases
            .len(),
        1
    );
    put(s, &t, job("b", When::DelayMs(0)), T0 + 5000).await;
    s.pause_topic(&t, T0 + 60_000).await.unwrap();
    assert!(
        s.reserve(&t, 10, None, T0 + 5001)
            .await
            .unwrap()
            .leases
            .is_empty()
    );
    s.pause_topic(&t, 0).await.unwrap();
    assert_eq!(s.stats(&t, T0).await.unwrap().paused_until_ms, 0);
    assert_eq!(
        s.reserve(&t, 10, None, T0 + 5002)
            .await
            .unwrap()
            .leases
            .len(),
        1
    );
}

/// `settings_version`: a number the store can always give, which moves
/// with every settings change and topic deletion (readers keep settings
/// while it stands still) and stands still for job traffic (or readers
/// would read every topic's settings again under load).
pub async fn settings_version_moves_with_settings_only(s: &dyn Store) {
    let v0 = s.settings_version().await.unwrap().expect("a version");
    let t = topic("sv");
    s.configure_topic(
        &t,
        &TopicConfigPatch {
            max_attempts: Some(3),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let v1 = s.settings_version().await.unwrap().unwrap();
    assert_ne!(v1, v0, "configure moved it");
    put(s, &t, job("a", When::DelayMs(0)), T0).await;
    put(s, &topic("sv-other"), job("a", When::DelayMs(5)), T0).await;
    let r = s.reserve(&t, 1, None, T0).await.unwrap();
    s.ack(&t, &r.leases[0].id, &r.leases[0].token, T0)
        .await
        .unwrap();
    assert_eq!(
        s.settings_version().await.unwrap().unwrap(),
        v1,
        "jobs moving change no settings"
    );
    s.configure_topic(
        &t,
        &TopicConfigPatch {
            paused: Some(true),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let v2 = s.settings_version().await.unwrap().unwrap();
    assert_ne!(v2, v1, "a pause moved it");
    let (_, gone) = s.delete_topic(&t, 100).await.unwrap();
    assert!(gone);
    assert_ne!(
        s.settings_version().await.unwrap().unwrap(),
        v2,
        "a deletion moved it"
    );
}
