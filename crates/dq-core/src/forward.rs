//! Forwarding: topics whose due jobs dq writes into a Redis Stream or list
//! that existing consumers already read (`XREADGROUP`, `BRPOP`), then acks.
//!
//! What is written for a job is decided here, once, for both ways of
//! writing it (a script on the store's own Redis that acks in the same
//! step, or a pipeline to another Redis followed by the ack):
//!
//! - a stream entry ([`StreamFields::Flat`]): fields `id`, `topic`,
//!   `attempt`, `due_at_ms`, `body` (the body's bytes as sent), and
//!   `traceparent` and `tracestate` when the job carries a trace context;
//!   with [`StreamFields::Json`] one field `job` holding the
//!   [envelope](envelope);
//! - a list element: the body's bytes ([`ListPayload::Body`]) or the
//!   envelope ([`ListPayload::Envelope`]).
//!
//! The envelope is a JSON object `{"id", "topic", "attempt", "due_at_ms",
//! "traceparent", "tracestate", "body"}` (the two trace fields only when the
//! job carries them), where `body` is the JSON body itself, or
//! `"body_base64"` for a body of bytes.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use serde::{Deserialize, Serialize};

use crate::limits::InvalidInput;
use crate::model::{Body, JobId, Lease};

/// Where a `redis_stream` topic writes its due jobs.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamTarget {
    /// The Redis server (`redis://` or `rediss://`, user and password
    /// allowed; replies and logs show the password redacted).
    pub url: String,
    /// The stream's key.
    pub stream: String,
    /// Trims the stream to about this many entries on every write
    /// (`XADD … MAXLEN ~ N`); none: never trimmed.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::nulls::not_null"
    )]
    pub maxlen: Option<u64>,
    /// One field per job attribute (default), or one `job` field of JSON.
    #[serde(default)]
    pub fields: StreamFields,
}

/// How a job becomes a stream entry's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StreamFields {
    /// `id`, `topic`, `attempt`, `due_at_ms`, `body`.
    #[default]
    Flat,
    /// `job`: the envelope as JSON.
    Json,
}

/// Where a `redis_list` topic writes its due jobs.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListTarget {
    /// The Redis server, as for [`StreamTarget::url`].
    pub url: String,
    /// The list's key.
    pub list: String,
    /// `left` (default, `LPUSH`: workers `BRPOP` in due order) or `right`
    /// (`RPUSH`, for workers that `BLPOP`).
    #[serde(default)]
    pub side: ListSide,
    /// What an element holds: the body (default) or the envelope.
    #[serde(default)]
    pub payload: ListPayload,
}

/// Which end of the list jobs are pushed onto.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ListSide {
    /// `LPUSH`.
    #[default]
    Left,
    /// `RPUSH`.
    Right,
}

/// What one list element holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ListPayload {
    /// The job's body, as sent.
    #[default]
    Body,
    /// The envelope (JSON with id, topic, attempt, due time and body).
    Envelope,
}

/// A forwarding target of either kind, borrowed from a topic's delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target<'a> {
    /// A stream.
    Stream(&'a StreamTarget),
    /// A list.
    List(&'a ListTarget),
}

/// One write into the target, for one job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    /// `XADD key [MAXLEN ~ n] * field value …`.
    Xadd {
        /// The stream.
        key: String,
        /// The trim bound.
        maxlen: Option<u64>,
        /// Field-value pairs in order.
        fields: Vec<(&'static str, Vec<u8>)>,
    },
    /// `LPUSH` (left) or `RPUSH` key value.
    Push {
        /// The list.
        key: String,
        /// `LPUSH` when true.
        left: bool,
        /// The element.
        value: Vec<u8>,
    },
}

/// The [`crate::StoreError::Storage`] code of an item whose write the
/// target refused in [`crate::ForwardSink::ack_and_write`] (the job stays
/// reserved, not acked).
pub const TARGET_REFUSED: &str = "target_refused";

/// One reserved job to ack and write in one step
/// ([`crate::ForwardSink::ack_and_write`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckWrite<'a> {
    /// The job.
    pub id: &'a JobId,
    /// Its lease token.
    pub token: &'a str,
    /// What to write for it.
    pub write: &'a Write,
}

impl Target<'_> {
    /// The Redis server's URL.
    pub fn url(&self) -> &str {
        match self {
            Target::Stream(s) => &s.url,
            Target::List(l) => &l.url,
        }
    }

    /// What is written for `lease`.
    pub fn write_for(&self, lease: &Lease) -> Write {
        match self {
            Target::Stream(s) => Write::Xadd {
                key: s.stream.clone(),
                maxlen: s.maxlen,
                fields: match s.fields {
                    StreamFields::Flat => {
                        let mut f = vec![
                            ("id", lease.id.as_str().as_bytes().to_vec()),
                            ("topic", lease.topic.as_str().as_bytes().to_vec()),
                            ("attempt", lease.attempt.to_string().into_bytes()),
                            ("due_at_ms", lease.due_at_ms.to_string().into_bytes()),
                            ("body", lease.body.as_bytes().to_vec()),
                        ];
                        if let Some(t) = &lease.trace {
                            f.push(("traceparent", t.traceparent().as_bytes().to_vec()));
                            if let Some(state) = t.tracestate() {
                                f.push(("tracestate", state.as_bytes().to_vec()));
                            }
                        }
                        f
                    }
                    StreamFields::Json => vec![("job", envelope(lease))],
                },
            },
            Target::List(l) => Write::Push {
                key: l.list.clone(),
                left: l.side == ListSide::Left,
                value: match l.payload {
                    ListPayload::Body => lease.body.as_bytes().to_vec(),
                    ListPayload::Envelope => envelope(lease),
                },
            },
        }
    }
}

/// The JSON envelope of a job (see the module docs). A JSON body goes in
/// as its text, byte for byte.
pub fn envelope(lease: &Lease) -> Vec<u8> {
    let text = |s: &str| serde_json::to_string(s).expect("a string serializes");
    let mut out = format!(
        "{{\"id\":{},\"topic\":{},\"attempt\":{},\"due_at_ms\":{},",
        text(lease.id.as_str()),
        text(lease.topic.as_str()),
        lease.attempt,
        lease.due_at_ms
    )
    .into_bytes();
    if let Some(t) = &lease.trace {
        out.extend_from_slice(format!("\"traceparent\":{},", text(t.traceparent())).as_bytes());
        if let Some(state) = t.tracestate() {
            out.extend_from_slice(format!("\"tracestate\":{},", text(state)).as_bytes());
        }
    }
    match &lease.body {
        Body::Json(json) => {
            out.extend_from_slice(b"\"body\":");
            out.extend_from_slice(json.as_bytes());
        }
        Body::Bytes(b) => {
            out.extend_from_slice(b"\"body_base64\":");
            out.extend_from_slice(text(&B64.encode(b)).as_bytes());
        }
    }
    out.push(b'}');
    out
}

/// Most bytes of a stream or list key.
const MAX_KEY: usize = 1024;

/// Checks a target URL: `redis://` or `rediss://` with a host, no
/// redacted password sent back, printable ASCII (the OpenAPI document's
/// pattern says the same).
fn check_url(url: &str) -> Result<(), InvalidInput> {
    let bad = |m: String| Err(InvalidInput::new("invalid_target", m));
    let rest = match url.split_once("://") {
        Some(("redis" | "rediss", rest)) if !rest.is_empty() => rest,
        _ => {
            return bad(format!(
                "url must be redis:// or rediss://, got {:?}",
                redact_url(url)
            ));
        }
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if host.is_empty() || host.starts_with(':') {
        return bad("url needs a host".into());
    }
    if url.contains('…') {
        return bad(
            "url: its password is a redacted copy (passwords are never shown); send the url itself"
                .into(),
        );
    }
    if url.len() > 2048 || !url.bytes().all(|b| b.is_ascii_graphic()) {
        return bad(
            "url must be at most 2048 printable ASCII characters, no spaces (percent-encode others)"
                .into(),
        );
    }
    Ok(())
}

fn check_key(what: &str, key: &str) -> Result<(), InvalidInput> {
    if key.is_empty() || key.len() > MAX_KEY {
        return Err(InvalidInput::new(
            "invalid_target",
            format!("{what} must be 1 to {MAX_KEY} bytes, got {}", key.len()),
        ));
    }
    Ok(())
}

impl StreamTarget {
    /// Checks what can be checked without the network.
    ///
    /// # Errors
    /// `invalid_target` naming the field.
    pub fn validate(&self) -> Result<(), InvalidInput> {
        check_url(&self.url)?;
        check_key("stream", &self.stream)?;
        if self.maxlen == Some(0) {
            return Err(InvalidInput::new(
                "invalid_target",
                "maxlen must be at least 1 (leave it out to never trim)",
            ));
        }
        Ok(())
    }

    /// A copy fit to show: the URL's password redacted.
    pub fn redacted(&self) -> Self {
        Self {
            url: redact_url(&self.url),
            ..self.clone()
        }
    }
}

impl ListTarget {
    /// Checks what can be checked without the network.
    ///
    /// # Errors
    /// `invalid_target` naming the field.
    pub fn validate(&self) -> Result<(), InvalidInput> {
        check_url(&self.url)?;
        check_key("list", &self.list)
    }

    /// A copy fit to show: the URL's password redacted.
    pub fn redacted(&self) -> Self {
        Self {
            url: redact_url(&self.url),
            ..self.clone()
        }
    }
}

impl std::fmt::Debug for StreamTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamTarget")
            .field("url", &redact_url(&self.url))
            .field("stream", &self.stream)
            .field("maxlen", &self.maxlen)
            .field("fields", &self.fields)
            .finish()
    }
}

impl std::fmt::Debug for ListTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListTarget")
            .field("url", &redact_url(&self.url))
            .field("list", &self.list)
            .field("side", &self.side)
            .field("payload", &self.payload)
            .finish()
    }
}

/// The host and port a target URL connects to (port 6379 when none is
/// given); `None` when the URL has no host.
pub fn host_port(url: &str) -> Option<(&str, u16)> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?', '#']).next()?;
    let hp = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let (host, port) = if let Some(v6) = hp.strip_prefix('[') {
        let (h, tail) = v6.split_once(']')?;
        (h, tail.strip_prefix(':'))
    } else {
        match hp.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (hp, None),
        }
    };
    let port = match port {
        Some(p) => p.parse().ok()?,
        None => 6379,
    };
    (!host.is_empty()).then_some((host, port))
}

/// A Redis URL fit to show: its password replaced by `…` (the user name
/// kept): `redis://app:…@host:6379/0`.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    // The userinfo ends at the last `@` (a password may hold `/`, `?`, `#`
    // unencoded); without one, there is nothing to hide.
    let Some(at) = rest.rfind('@') else {
        return url.to_string();
    };
    let end = at
        + 1
        + rest[at + 1..]
            .find(['/', '?', '#'])
            .unwrap_or(rest.len() - at - 1);
    let (authority, tail) = rest.split_at(end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
            if userinfo.contains(':') {
                format!("{scheme}://{user}:…@{host}{tail}")
            } else {
                // redis://password@host is read as a password by some clients.
                format!("{scheme}://…@{host}{tail}")
            }
        }
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Topic;

    fn lease(body: Body) -> Lease {
        Lease {
            topic: Topic::new("orders").unwrap(),
            id: JobId::new("o-1").unwrap(),
            token: "t".into(),
            attempt: 2,
            due_at_ms: 1_700_000_000_000,
            lease_deadline_ms: 0,
            priority: 0,
            body,
            trace: None,
        }
    }

    #[test]
    fn passwords_never_show() {
        assert_eq!(
            redact_url("redis://app:s3cret@host:6379/0"),
            "redis://app:…@host:6379/0"
        );
        assert_eq!(redact_url("rediss://:pw@h/1"), "rediss://:…@h/1");
        assert_eq!(redact_url("redis://pw@h"), "redis://…@h");
        assert_eq!(redact_url("redis://h:6379"), "redis://h:6379");
        assert_eq!(redact_url("redis://u:pa/s?s#@h:1/0"), "redis://u:…@h:1/0");
        assert_eq!(redact_url("http://u:pa/ss@h"), "http://u:…@h");
        let t = StreamTarget {
            url: "redis://u:hunter2hunter2@h".into(),
            stream: "s".into(),
            maxlen: None,
            fields: StreamFields::Flat,
        };
        assert!(!format!("{t:?}").contains("hunter2"));
        assert!(
            !serde_json::to_string(&t.redacted())
                .unwrap()
                .contains("hunter2")
        );
        let back = StreamTarget {
            url: t.redacted().url,
            ..t.clone()
        };
        let e = back.validate().unwrap_err();
        assert!(e.message.contains("redacted copy"), "{e:?}");
    }

    #[test]
    fn bad_targets_are_named() {
        let s = |url: &str, stream: &str, maxlen| StreamTarget {
            url: url.into(),
            stream: stream.into(),
            maxlen,
            fields: StreamFields::Flat,
        };
        for (t, want) in [
            (s("http://h", "s", None), "redis://"),
            (s("redis://", "s", None), "redis://"),
            (s("redis://:pw@", "s", None), "host"),
            (s("redis://h", "", None), "stream must be"),
            (s("redis://h", "s", Some(0)), "maxlen"),
        ] {
            let e = t.validate().unwrap_err();
            assert_eq!(e.code, "invalid_target");
            assert!(e.message.contains(want), "{want}: {}", e.message);
        }
        assert!(s("rediss://u:p@h:1/2", "s", Some(10)).validate().is_ok());
        assert_eq!(host_port("redis://u:p@h:1/2"), Some(("h", 1)));
        assert_eq!(host_port("redis://[::1]/0"), Some(("::1", 6379)));
        assert_eq!(host_port("redis://h:x"), None);
    }

    #[test]
    fn writes_as_documented() {
        let json = lease(Body::Json(r#"{"order": 7}"#.into()));
        let flat = StreamTarget {
            url: "redis://h".into(),
            stream: "due".into(),
            maxlen: Some(5),
            fields: StreamFields::Flat,
        };
        let Write::Xadd {
            key,
            maxlen,
            fields,
        } = Target::Stream(&flat).write_for(&json)
        else {
            panic!("a stream write")
        };
        assert_eq!((key.as_str(), maxlen), ("due", Some(5)));
        let names: Vec<&str> = fields.iter().map(|(k, _)| *k).collect();
        assert_eq!(names, ["id", "topic", "attempt", "due_at_ms", "body"]);
        assert_eq!(fields[4].1, br#"{"order": 7}"#.to_vec(), "body as sent");
        assert!(
            String::from_utf8(envelope(&json))
                .unwrap()
                .ends_with(r#""body":{"order": 7}}"#),
            "the body's text as sent"
        );
        let env: serde_json::Value = serde_json::from_slice(&envelope(&json)).unwrap();
        assert_eq!(
            env,
            serde_json::json!({"id": "o-1", "topic": "orders", "attempt": 2,
                "due_at_ms": 1_700_000_000_000u64, "body": {"order": 7}})
        );
        let bytes = lease(Body::Bytes(vec![0, 255]));
        let env: serde_json::Value = serde_json::from_slice(&envelope(&bytes)).unwrap();
        assert_eq!(env["body_base64"], "AP8=");
        // A job's trace context goes with it, in both forms.
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let traced = Lease {
            trace: Some(crate::TraceContext::parse(tp, Some("rojo=1")).unwrap().0),
            ..json.clone()
        };
        let env: serde_json::Value = serde_json::from_slice(&envelope(&traced)).unwrap();
        assert_eq!(
            (env["traceparent"].as_str(), env["tracestate"].as_str()),
            (Some(tp), Some("rojo=1"))
        );
        let Write::Xadd { fields, .. } = Target::Stream(&flat).write_for(&traced) else {
            panic!("a stream write")
        };
        let names: Vec<&str> = fields.iter().map(|(k, _)| *k).collect();
        assert_eq!(
            names,
            [
                "id",
                "topic",
                "attempt",
                "due_at_ms",
                "body",
                "traceparent",
                "tracestate"
            ]
        );
        let list = ListTarget {
            url: "redis://h".into(),
            list: "l".into(),
            side: ListSide::Right,
            payload: ListPayload::Body,
        };
        assert_eq!(
            Target::List(&list).write_for(&bytes),
            Write::Push {
                key: "l".into(),
                left: false,
                value: vec![0, 255]
            }
        );
    }
}
