//! What a command answers ([`Reply`]) and its bytes on the wire: a line,
//! or a line, a body and `\r\n`; the YAML bodies of `stats*` and
//! `list-tubes*`; a service error as the reference would say it.

use dq_core::{Body, StoreError};

use crate::service::Error;

/// What a command answers.
pub(super) enum Reply {
    Line(String),
    /// A line, then a body and `\r\n`.
    Data(String, Vec<u8>),
    Quit,
}

impl Reply {
    /// The bytes on the wire; None for `Quit` (the connection closes).
    pub(super) fn into_bytes(self) -> Option<Vec<u8>> {
        Some(match self {
            Reply::Quit => return None,
            Reply::Line(l) => format!("{l}\r\n").into_bytes(),
            Reply::Data(l, body) => {
                let mut v = format!("{l}\r\n").into_bytes();
                v.extend_from_slice(&body);
                v.extend_from_slice(b"\r\n");
                v
            }
        })
    }
}

pub(super) fn line(s: impl Into<String>) -> Reply {
    Reply::Line(s.into())
}

pub(super) fn bad_format() -> Reply {
    line("BAD_FORMAT")
}

pub(super) fn not_found() -> Reply {
    line("NOT_FOUND")
}

/// A store or service error as the reference would say it.
pub(super) fn failed(e: &Error) -> Reply {
    match e {
        Error::Store(StoreError::NotFound | StoreError::LeaseMismatch)
        | Error::Store(StoreError::NotInState(_)) => not_found(),
        Error::Store(StoreError::Invalid(_)) => bad_format(),
        Error::ShuttingDown | Error::Draining => line("DRAINING"),
        other => {
            tracing::warn!(error = %other, "beanstalkd command failed");
            line("INTERNAL_ERROR")
        }
    }
}

pub(super) fn yaml(pairs: &[(&str, String)]) -> Vec<u8> {
    let mut out = String::from("---\n");
    for (k, v) in pairs {
        out.push_str(k);
        out.push_str(": ");
        out.push_str(v);
        out.push('\n');
    }
    out.into_bytes()
}

pub(super) fn yaml_list(items: &[String]) -> Vec<u8> {
    let mut out = String::from("---\n");
    for i in items {
        out.push_str("- ");
        out.push_str(i);
        out.push('\n');
    }
    out.into_bytes()
}

pub(super) fn ok_yaml(body: Vec<u8>) -> Reply {
    Reply::Data(format!("OK {}", body.len()), body)
}

pub(super) fn body_bytes(b: &Body) -> Vec<u8> {
    match b {
        Body::Bytes(v) => v.clone(),
        Body::Json(s) => s.as_bytes().to_vec(),
    }
}
