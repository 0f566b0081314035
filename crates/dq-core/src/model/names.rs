//! Validated names: [`Topic`], [`JobId`], [`JobKey`].

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::limits::InvalidInput;

/// `.` and `..`: HTTP clients resolve them away as path segments (RFC 3986
/// dot segments), so a topic or id spelled so could be written but never
/// reached again by URL.
fn is_dot_segment(s: &str) -> bool {
    s == "." || s == ".."
}

/// A topic name: 1–200 bytes of `[A-Za-z0-9._:+/;$()-]` (beanstalkd's tube
/// characters and `:`), not `.` or `..`.
///
/// The character set keeps names safe inside Redis hash tags (`{` and `}` are
/// excluded), URLs and log lines.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct Topic(String);

impl Topic {
    /// Longest topic name, in bytes.
    pub const MAX_LEN: usize = 200;

    /// Validates a topic name.
    ///
    /// # Errors
    /// `invalid_topic` when empty, too long, or with a character outside the set.
    pub fn new(name: impl Into<String>) -> Result<Self, InvalidInput> {
        let name = name.into();
        if name.is_empty() || name.len() > Self::MAX_LEN {
            return Err(InvalidInput::new(
                "invalid_topic",
                format!(
                    "topic must be 1-{} bytes, got {}",
                    Self::MAX_LEN,
                    name.len()
                ),
            ));
        }
        if let Some(c) = name.chars().find(|c| !Topic::is_name_char(*c)) {
            return Err(InvalidInput::new(
                "invalid_topic",
                format!("topic may hold only A-Z a-z 0-9 . _ : - + / ; $ ( ), found {c:?}"),
            ));
        }
        if is_dot_segment(&name) {
            return Err(InvalidInput::new(
                "invalid_topic",
                format!("{name:?} is not a topic name: a URL path cannot carry it"),
            ));
        }
        Ok(Self(name))
    }

    /// The store-internal name of partition `p` of this topic: the topic
    /// itself for partition 0 (so a one-partition topic keeps its keys),
    /// `<topic>#<p>` for the others. `#` cannot occur in a topic name, so
    /// these never collide with a real topic; see [`Topic::split_partition`].
    pub fn partition(&self, p: u32) -> Topic {
        if p == 0 {
            self.clone()
        } else {
            Topic(format!("{}#{p}", self.0))
        }
    }

    /// The topic and partition of a store-internal name made by
    /// [`Topic::partition`]; `None` for a name that is neither.
    pub fn split_partition(name: &str) -> Option<(Topic, u32)> {
        match name.split_once('#') {
            None => Topic::new(name).ok().map(|t| (t, 0)),
            Some((t, p)) => {
                let p: u32 = p.parse().ok().filter(|p| *p > 0)?;
                Topic::new(t).ok().map(|t| (t, p))
            }
        }
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `c` may occur in a topic name.
    pub fn is_name_char(c: char) -> bool {
        c.is_ascii_alphanumeric() || "._:-+/;$()".contains(c)
    }

    /// Checks a name prefix a listing filters by ([`crate::Store::list_topics`]):
    /// empty (every topic), or at most [`Topic::MAX_LEN`] bytes of topic
    /// characters — anything else could match no topic, and is more likely a
    /// mistake than a question.
    ///
    /// # Errors
    /// `invalid_prefix`, naming what is wrong.
    pub fn check_prefix(prefix: &str) -> Result<(), InvalidInput> {
        if prefix.len() > Self::MAX_LEN {
            return Err(InvalidInput::new(
                "invalid_prefix",
                format!(
                    "prefix must be at most {} bytes (the longest topic name), got {}",
                    Self::MAX_LEN,
                    prefix.len()
                ),
            ));
        }
        if let Some(c) = prefix.chars().find(|c| !Topic::is_name_char(*c)) {
            return Err(InvalidInput::new(
                "invalid_prefix",
                format!(
                    "prefix may hold only the characters of topic names (A-Z a-z 0-9 . _ : - + / ; $ ( )), found {c:?}"
                ),
            ));
        }
        Ok(())
    }

    /// The names that start with `prefix`, as the range `[start, end)` in
    /// byte order (`end` `None`: no upper bound, for the empty prefix), so a
    /// store can filter on an index instead of a pattern (no `LIKE`, whose
    /// `%` and `_` are wildcards). `None` when no topic name can start with
    /// `prefix` ([`Topic::check_prefix`] refuses it).
    pub fn prefix_range(prefix: &str) -> Option<(String, Option<String>)> {
        Self::check_prefix(prefix).ok()?;
        let Some(last) = prefix.bytes().last() else {
            return Some((String::new(), None));
        };
        // Topic characters are ASCII below 0x7f: the successor of the last
        // byte is still one ASCII byte.
        let mut end = prefix[..prefix.len() - 1].to_string();
        end.push(char::from(last + 1));
        Some((prefix.to_string(), Some(end)))
    }
}

impl fmt::Display for Topic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Topic {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Topic::new(s).map_err(serde::de::Error::custom)
    }
}

/// A job id: 1–256 characters (so at most 1024 bytes), printable, no
/// whitespace.
///
/// Producers choose ids to make enqueue idempotent; when they do not, dq
/// generates a time-ordered UUIDv7.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct JobId(String);

impl JobId {
    /// Longest id, in characters (what JSON Schema's `maxLength` counts).
    pub const MAX_LEN: usize = 256;

    /// Validates an id.
    ///
    /// # Errors
    /// `invalid_id` when empty, too long, or holding whitespace or control characters.
    pub fn new(id: impl Into<String>) -> Result<Self, InvalidInput> {
        let id = id.into();
        printable("id", "invalid_id", Self::MAX_LEN, &id)?;
        if is_dot_segment(&id) {
            return Err(InvalidInput::new(
                "invalid_id",
                format!("{id:?} is not a job id: a URL path cannot carry it"),
            ));
        }
        Ok(Self(id))
    }

    /// A new time-ordered id (UUIDv7).
    pub fn generate() -> Self {
        Self(uuid::Uuid::now_v7().to_string())
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for JobId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        JobId::new(s).map_err(serde::de::Error::custom)
    }
}

/// Checks that `value` (a `what`) is 1 to `max` characters, none of them
/// whitespace or control; else `code`.
fn printable(what: &str, code: &'static str, max: usize, value: &str) -> Result<(), InvalidInput> {
    // Visible ASCII only (most ids, topics and keys): one byte per
    // character, none of them whitespace or control; checked in one pass
    // the compiler vectorizes, without decoding characters (every id and
    // topic of every call comes through here).
    if !value.is_empty() && value.len() <= max && value.bytes().all(|b| (0x21..0x7f).contains(&b)) {
        return Ok(());
    }
    let chars = value.chars().count();
    if chars == 0 || chars > max {
        return Err(InvalidInput::new(
            code,
            format!("{what} must be 1-{max} characters, got {chars}"),
        ));
    }
    if let Some(c) = value.chars().find(|c| c.is_whitespace() || c.is_control()) {
        return Err(InvalidInput::new(
            code,
            format!("{what} may not hold whitespace or control characters, found {c:?}"),
        ));
    }
    Ok(())
}

/// A job's flow-control key (e.g. `customer-17`): jobs of one key share
/// the topic's `key_concurrency` and `key_rate_limit`, and the keys of a
/// topic take turns at hand-out (issue #18). 1–128 characters, printable,
/// no whitespace.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct JobKey(String);

impl JobKey {
    /// Longest key, in characters.
    pub const MAX_LEN: usize = 128;

    /// Validates a key.
    ///
    /// # Errors
    /// `invalid_key` when empty, too long, or holding whitespace or control
    /// characters.
    pub fn new(key: impl Into<String>) -> Result<Self, InvalidInput> {
        let key = key.into();
        printable("key", "invalid_key", Self::MAX_LEN, &key)?;
        Ok(Self(key))
    }

    /// The key.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for JobKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for JobKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        JobKey::new(s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_rules() {
        assert!(Topic::new("orders.close-unpaid:v2_x").is_ok());
        assert_eq!(Topic::new("").unwrap_err().code, "invalid_topic");
        assert!(Topic::new("a".repeat(200)).is_ok());
        assert!(Topic::new("a".repeat(201)).is_err());
        for bad in ["a b", "a{b}", "a#1", "a%2F", "é", ".", "..", "a?b"] {
            assert!(Topic::new(bad).is_err(), "{bad}");
        }
        assert!(Topic::new("...").is_ok() && Topic::new(".a").is_ok());
        // beanstalkd's tube characters.
        assert!(Topic::new("mail/out+retry;v1$(x)").is_ok());
    }

    #[test]
    fn prefix_ranges() {
        assert_eq!(Topic::prefix_range(""), Some((String::new(), None)));
        assert_eq!(
            Topic::prefix_range("ab"),
            Some(("ab".to_string(), Some("ac".to_string())))
        );
        // `_` is a topic character like any other, not a wildcard.
        assert_eq!(
            Topic::prefix_range("a_"),
            Some(("a_".to_string(), Some("a`".to_string())))
        );
        assert_eq!(
            Topic::prefix_range("z"),
            Some(("z".to_string(), Some("{".to_string())))
        );
        for bad in ["a%", "a b", "é", "#"] {
            assert_eq!(Topic::prefix_range(bad), None, "{bad}");
            assert_eq!(Topic::check_prefix(bad).unwrap_err().code, "invalid_prefix");
        }
        assert!(Topic::check_prefix(&"a".repeat(200)).is_ok());
        assert!(Topic::check_prefix(&"a".repeat(201)).is_err());
        // Every name with the prefix is in the range, and no other.
        let (start, end) = Topic::prefix_range("ab").unwrap();
        let end = end.unwrap();
        for (name, inside) in [
            ("ab", true),
            ("ab.x", true),
            ("abz", true),
            ("aa", false),
            ("ac", false),
            ("a", false),
        ] {
            let n = name.to_string();
            assert_eq!(n >= start && n < end, inside, "{name}");
        }
    }

    #[test]
    fn id_rules() {
        assert!(JobId::new("order-42/ünï").is_ok());
        assert!(JobId::new("...").is_ok() && JobId::new("./a").is_ok());
        assert!(JobId::new("x".repeat(256)).is_ok());
        assert!(JobId::new("x".repeat(257)).is_err());
        for bad in ["", "a b", "a\tb", "a\u{7}b", "a\nb", ".", ".."] {
            assert_eq!(JobId::new(bad).unwrap_err().code, "invalid_id", "{bad:?}");
        }
        let a = JobId::generate();
        let b = JobId::generate();
        assert_ne!(a, b);
        assert!(JobId::new(a.as_str()).is_ok());
    }
}
