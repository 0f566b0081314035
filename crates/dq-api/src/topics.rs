//! Topics: their settings and counts, listed page by page, configured,
//! deleted.

use dq_core::{TopicConfig, TopicConfigPatch, TopicStats};
use serde::{Deserialize, Serialize};

/// A topic with its counts, and on `GET /v1/topics/{topic}` its settings.
/// Push secrets and header values come redacted (`whsec_…a1b2`): they are
/// write-only.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopicInfo {
    /// Its name.
    pub name: String,
    /// Counts and counters.
    pub stats: TopicStats,
    /// Settings (absent in listings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<TopicConfig>,
}

/// The answer to `PUT /v1/topics/{topic}`: the settings now in force
/// (push credentials redacted).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopicConfigured {
    /// Its name.
    pub name: String,
    /// Its settings.
    pub config: TopicConfig,
}

/// `GET /v1/topics?limit=&cursor=&prefix=`: which page of the topics.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopicListQuery {
    /// Topics per page: 1 to [`MAX_TOPICS_PAGE`](dq_core::limits::MAX_TOPICS_PAGE)
    /// (default [`TOPICS_PAGE`](dq_core::limits::TOPICS_PAGE)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    /// The previous page's `next_cursor`; absent for the first page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    /// Only topics whose name starts with it (a plain prefix, no
    /// wildcards; at most 200 bytes of topic characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
}

/// `GET /v1/topics`: one page of the topics, in name order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopicList {
    /// The page's topics with their counts (those the key may read: a
    /// page may be short, even empty, while more follow).
    pub topics: Vec<TopicInfo>,
    /// Pass it as `cursor` for the next page (with the same `prefix`);
    /// `null`: this is the last page.
    pub next_cursor: Option<String>,
}

/// `PUT /v1/topics/{topic}`'s body: the settings to change.
pub type PutTopicRequest = TopicConfigPatch;

/// `DELETE /v1/topics/{topic}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicDeleted {
    /// The topic.
    pub name: String,
    /// Jobs deleted with it.
    pub deleted_jobs: u64,
}
