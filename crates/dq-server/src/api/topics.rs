//! Topics: listed page by page with their counts, read, configured,
//! deleted.

use axum::extract::{Extension, State};
use dq_api as wire;
use dq_core::limits;
use dq_core::*;

use super::{ApiResult, reply, topic};
use crate::AppState;
use crate::auth::Access;
use crate::extract::{ApiPath as Path, ApiQuery as Query, JsonBody};
use crate::keys::Action;

/// `GET /v1/topics?limit=&cursor=&prefix=` — one page of the topics in
/// name order, with their counts (read concurrently); `next_cursor` goes
/// on. Topics the key may not read are left out of the page, so a page
/// may be short while more follow.
pub(crate) async fn list_topics(
    State(st): State<AppState>,
    Extension(access): Extension<Access>,
    Query(q): Query<wire::TopicListQuery>,
) -> ApiResult {
    let page = st
        .service
        .list_topics(
            q.cursor.as_deref(),
            false,
            q.prefix.as_deref().unwrap_or(""),
            q.limit.unwrap_or(limits::TOPICS_PAGE),
        )
        .await?;
    let next_cursor = match page.more {
        true => page.topics.last().map(Topic::to_string),
        false => None,
    };
    let visible: Vec<Topic> = page
        .topics
        .into_iter()
        .filter(|t| access.allows(Action::Read, t.as_str()))
        .collect();
    let stats = st.service.stats_of(&visible).await?;
    reply(wire::TopicList {
        topics: visible
            .into_iter()
            .zip(stats)
            .map(|(t, stats)| wire::TopicInfo {
                name: t.to_string(),
                stats,
                config: None,
                config_sources: None,
            })
            .collect(),
        next_cursor,
    })
}

/// `GET /v1/topics/{topic}`
pub(crate) async fn get_topic(State(st): State<AppState>, Path(t): Path<String>) -> ApiResult {
    let t = topic(t)?;
    let cfg = st.service.known_topic(&t).await?;
    reply(wire::TopicInfo {
        stats: st.service.stats(&t).await?,
        name: t.to_string(),
        config_sources: Some(wire::config_sources(&cfg)),
        config: Some(cfg.redacted()),
    })
}

/// `PUT /v1/topics/{topic}` — fields left out keep their value.
pub(crate) async fn put_topic(
    State(st): State<AppState>,
    Path(t): Path<String>,
    JsonBody(patch): JsonBody<wire::PutTopicRequest>,
) -> ApiResult {
    let t = topic(t)?;
    let cfg = st.service.configure_topic(&t, patch).await?;
    reply(wire::TopicConfigured {
        name: t.to_string(),
        config_sources: wire::config_sources(&cfg),
        config: cfg.redacted(),
    })
}

/// `DELETE /v1/topics/{topic}` — deletes the topic and all its jobs.
pub(crate) async fn delete_topic(State(st): State<AppState>, Path(t): Path<String>) -> ApiResult {
    let t = topic(t)?;
    let deleted = st.service.delete_topic(&t).await?;
    reply(wire::TopicDeleted {
        name: t.to_string(),
        deleted_jobs: deleted,
    })
}
