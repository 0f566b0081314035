//! `/`: the stores' health, a page of the topics with their counts, rates
//! and lateness, the form registering one.

use askama::Template;
use dq_core::{Topic, TopicStats};

use super::Layout;
use super::format::{done_text, overdue, secs_bound, topic_href};
use crate::admin::Viewer;

/// `/`: the stores' health, a page of the topics (with a search by name
/// prefix), the form registering one.
#[derive(Template)]
#[template(path = "overview.html")]
pub(in crate::admin) struct OverviewPage<'a> {
    page: Layout<'a>,
    /// What the last action did.
    flash: Option<String>,
    stores: Vec<StoreRow>,
    topics: Vec<TopicRow>,
    listing: TopicListing,
    /// The viewer may register topics.
    manage: bool,
}

/// Which page of the topics the overview shows, and the links around it.
pub(in crate::admin) struct TopicListing {
    /// The search: topics whose name starts with it ("" for all).
    pub(in crate::admin) prefix: String,
    /// Why the search or page was refused (a bad prefix or cursor).
    pub(in crate::admin) error: Option<String>,
    /// The link to the previous page, when there is one.
    pub(in crate::admin) prev: Option<String>,
    /// The link to the next page, when there is one.
    pub(in crate::admin) next: Option<String>,
}

impl<'a> OverviewPage<'a> {
    pub(in crate::admin) fn new(
        v: &'a Viewer,
        done: Option<(String, u64)>,
        stores: Vec<StoreRow>,
        topics: Vec<TopicRow>,
        listing: TopicListing,
    ) -> Self {
        Self {
            page: Layout::new(v, "Topics", true),
            flash: done.and_then(|(code, n)| done_text(&code, n)),
            stores,
            topics,
            listing,
            manage: v.access.allows_any(crate::keys::Action::Manage),
        }
    }
}

/// A store (or one of its parts) and whether it answers.
pub(in crate::admin) struct StoreRow {
    name: String,
    /// Why it does not answer; None when it does.
    error: Option<String>,
}

impl StoreRow {
    pub(in crate::admin) fn new(name: &str, error: Option<String>) -> Self {
        Self {
            name: name.to_string(),
            error,
        }
    }
}

/// A topic on the overview.
pub(in crate::admin) struct TopicRow {
    name: String,
    href: String,
    /// "pull", "push", or "?" when its config could not be read.
    mode: &'static str,
    stats: TopicStats,
    overdue: String,
    enqueued_rate: String,
    acked_rate: String,
    lateness_p50: String,
    lateness_p99: String,
}

impl TopicRow {
    /// `rates`: enqueued and acked per second; `lateness`: p50 and p99
    /// bucket bounds in seconds; "–" where not known yet.
    pub(in crate::admin) fn new(
        t: &Topic,
        mode: &'static str,
        stats: TopicStats,
        rates: Option<(f64, f64)>,
        lateness: Option<(f64, f64)>,
    ) -> Self {
        let (enqueued_rate, acked_rate) = rates.map_or(("–".into(), "–".into()), |(e, a)| {
            (format!("{e:.1}"), format!("{a:.1}"))
        });
        let (lateness_p50, lateness_p99) = lateness
            .map_or(("–".into(), "–".into()), |(p50, p99)| {
                (secs_bound(p50), secs_bound(p99))
            });
        Self {
            name: t.as_str().to_string(),
            href: topic_href(t.as_str()),
            mode,
            overdue: overdue(stats.oldest_overdue_ms),
            stats,
            enqueued_rate,
            acked_rate,
            lateness_p50,
            lateness_p99,
        }
    }
}
