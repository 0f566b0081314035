//! Topics: list (page by page, or all), read, configure, delete.

use dq_api as wire;
use dq_core::{TopicConfig, TopicConfigPatch};
use reqwest::Method;
use serde_json::Value;

use super::{Client, NONE, TopicInfo, encode_segment};
use crate::error::{Error, Result};

impl Client {
    /// Every topic with its counts (those whose name starts with
    /// `prefix`, when given), in name order: [`Client::list_topics`] page
    /// after page, following `next_cursor`, 1000 topics a request.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a prefix no topic name can start with;
    /// [`Error::Unavailable`], [`Error::Transport`].
    pub async fn topics_with_prefix(&self, prefix: Option<&str>) -> Result<Vec<TopicInfo>> {
        let mut query = wire::TopicListQuery {
            limit: Some(dq_core::limits::MAX_TOPICS_PAGE),
            cursor: None,
            prefix: prefix.map(str::to_string),
        };
        let mut out = Vec::new();
        loop {
            let page = self.list_topics(&query).await?;
            out.extend(page.topics);
            match page.next_cursor {
                Some(c) => query.cursor = Some(c),
                None => return Ok(out),
            }
        }
    }

    /// Every topic with its counts ([`Client::topics_with_prefix`] without
    /// a prefix).
    ///
    /// # Errors
    /// [`Error::Unavailable`], [`Error::Transport`].
    pub async fn topics(&self) -> Result<Vec<TopicInfo>> {
        self.topics_with_prefix(None).await
    }

    /// One page of the topics in name order (`GET /v1/topics`): pass the
    /// page's `next_cursor` as the next query's `cursor` until it is `None`.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a limit outside 1–1000, a cursor the server
    /// did not hand out or a bad prefix; [`Error::Unavailable`],
    /// [`Error::Transport`].
    pub async fn list_topics(&self, query: &wire::TopicListQuery) -> Result<wire::TopicList> {
        let mut url = format!("{}/v1/topics", self.base);
        let mut sep = '?';
        let params = [
            ("limit", query.limit.map(|l| l.to_string())),
            ("cursor", query.cursor.clone()),
            ("prefix", query.prefix.clone()),
        ];
        for (name, value) in params {
            if let Some(v) = value {
                url.push(sep);
                url.push_str(name);
                url.push('=');
                url.push_str(&encode_segment(&v));
                sep = '&';
            }
        }
        self.call(Method::GET, url, NONE, true).await
    }

    /// One topic's settings and counts.
    ///
    /// # Errors
    /// [`Error::NotFound`] for an unknown topic.
    pub async fn topic(&self, topic: &str) -> Result<TopicInfo> {
        self.call(
            Method::GET,
            format!("{}/v1/topics/{}", self.base, encode_segment(topic)),
            NONE,
            true,
        )
        .await
    }

    /// Creates or updates a topic's settings; fields left out keep their
    /// value. Returns the settings now in force (push credentials redacted).
    ///
    /// # Errors
    /// [`Error::Invalid`] for settings out of range.
    pub async fn configure_topic(
        &self,
        topic: &str,
        patch: &TopicConfigPatch,
    ) -> Result<TopicConfig> {
        let body = serde_json::to_value(patch).map_err(|e| Error::Decode(e.to_string()))?;
        let mut body = strip_nulls(body);
        // The nulls that mean something: remove a limit.
        if let Value::Object(m) = &mut body {
            for (name, removed) in [
                ("rate_limit", patch.rate_limit == Some(None)),
                ("key_rate_limit", patch.key_rate_limit == Some(None)),
                ("key_concurrency", patch.key_concurrency == Some(None)),
            ] {
                if removed {
                    m.insert(name.into(), Value::Null);
                }
            }
        }
        let r: wire::TopicConfigured = self
            .call(
                Method::PUT,
                format!("{}/v1/topics/{}", self.base, encode_segment(topic)),
                Some(&body),
                true,
            )
            .await?;
        Ok(r.config)
    }

    /// Deletes a topic and all its jobs; returns how many jobs.
    ///
    /// # Errors
    /// [`Error::NotFound`] for an unknown topic.
    pub async fn delete_topic(&self, topic: &str) -> Result<u64> {
        let r: wire::TopicDeleted = self
            .call(
                Method::DELETE,
                format!("{}/v1/topics/{}", self.base, encode_segment(topic)),
                NONE,
                false,
            )
            .await?;
        Ok(r.deleted_jobs)
    }
}

fn strip_nulls(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(m.into_iter().filter(|(_, v)| !v.is_null()).collect()),
        other => other,
    }
}
