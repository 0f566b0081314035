//! Every Redis key and channel dq uses, built in one place.
//!
//! All keys of one topic share the hash tag `{<topic>}` so that each script
//! touches one Cluster slot. Topic names cannot hold `{` or `}` (see
//! `dq_core::Topic`), so the tag is always the whole name.

use dq_core::Topic;

/// Key builder for one namespace (default `dq`).
#[derive(Debug, Clone)]
pub struct Keys {
    prefix: String,
}

/// The keys of one topic, in the order every script receives them in KEYS.
#[derive(Debug, Clone)]
pub(crate) struct TopicKeys {
    pub(crate) all: [String; 12],
}

impl TopicKeys {
    pub(crate) fn sched(&self) -> &str {
        &self.all[0]
    }
    pub(crate) fn ready(&self) -> &str {
        &self.all[1]
    }
    pub(crate) fn lease(&self) -> &str {
        &self.all[2]
    }
    pub(crate) fn dead(&self) -> &str {
        &self.all[3]
    }
    pub(crate) fn ctr(&self) -> &str {
        &self.all[4]
    }
    pub(crate) fn cfg(&self) -> &str {
        &self.all[5]
    }
    /// The HASH of the key_rate_limit buckets (see common.lua's `KR.rl`).
    pub(crate) fn key_buckets(&self) -> String {
        format!("{}rl", self.all[10])
    }
    /// The ZSET of the keys' lane heads by due time (common.lua's `KR.due`).
    pub(crate) fn key_heads(&self) -> String {
        format!("{}due", self.all[10])
    }
    /// When those buckets are full again (common.lua's `KR.full`).
    pub(crate) fn key_buckets_full(&self) -> String {
        format!("{}full", self.all[10])
    }
}

impl Keys {
    /// Keys under `prefix` (e.g. `dq`).
    pub fn new(prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
        }
    }

    /// The set of all topic names (not hash-tagged: it is never touched by a script).
    pub fn topics(&self) -> String {
        format!("{}:topics", self.prefix)
    }

    /// The ZSET of the same names, every score 0, for listings in name
    /// order (see `topic_index`; not hash-tagged, like [`Keys::topics`]).
    pub fn topic_names(&self) -> String {
        format!("{}:topic-names", self.prefix)
    }

    /// The layout version (see [`crate::layout`]; not hash-tagged: one key).
    pub fn layout(&self) -> String {
        format!("{}:layout", self.prefix)
    }

    /// The counter `name` (`Store::next_seq`; not hash-tagged: one key).
    pub fn seq(&self, name: &str) -> String {
        format!("{}:seq:{name}", self.prefix)
    }

    /// The HASH of the named records of `kind` (`Store::put_record`; not
    /// hash-tagged: one key): field `v:<name>` holds a record's value,
    /// `m:<name>` its mark.
    pub fn records(&self, kind: &str) -> String {
        format!("{}:records:{kind}", self.prefix)
    }

    /// The counter bumped after every change of a topic's settings and every
    /// topic deletion (`Store::settings_version`; not hash-tagged: one key).
    pub fn settings_version(&self) -> String {
        format!("{}:settings_version", self.prefix)
    }

    /// The ZSET of live dispatchers (member: instance id, score: last seen ms).
    pub fn members(&self) -> String {
        format!("{}:dispatchers", self.prefix)
    }

    /// The pub/sub channel on which scripts announce "topic X has a job due earlier".
    pub fn wake_channel(&self) -> String {
        format!("{}:wake", self.prefix)
    }

    /// The keys of one topic: sched, ready, lease, dead, ctr, cfg, jobs,
    /// wheel, the prefix of the wheel's bucket lists (`w:<bucket ms>`),
    /// the ids in a dedup window (`dedup`), the prefix of the
    /// flow-control keys' structures (`k:`, see common.lua), and the lease
    /// tokens of the reserved jobs (`tokens`, layout 2).
    pub(crate) fn topic(&self, topic: &Topic) -> TopicKeys {
        let base = format!("{}:{{{}}}:", self.prefix, topic.as_str());
        TopicKeys {
            all: [
                format!("{base}sched"),
                format!("{base}ready"),
                format!("{base}lease"),
                format!("{base}dead"),
                format!("{base}ctr"),
                format!("{base}cfg"),
                format!("{base}jobs"),
                format!("{base}wheel"),
                format!("{base}w:"),
                format!("{base}dedup"),
                format!("{base}k:"),
                format!("{base}tokens"),
            ],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_topic_keys_share_one_hash_tag() {
        let k = Keys::new("dq");
        let t = Topic::new("orders").unwrap();
        let tk = k.topic(&t);
        for key in &tk.all {
            assert!(key.starts_with("dq:{orders}:"), "{key}");
        }
        assert_eq!(tk.all[6], "dq:{orders}:jobs");
        assert_eq!(k.topics(), "dq:topics");
        assert_eq!(k.topic_names(), "dq:topic-names");
    }
}
