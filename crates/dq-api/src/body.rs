//! Job bodies on the wire: [`RawJson`], a JSON body kept as its text, and
//! the readers shared by every type that carries a body (`body` or
//! `body_base64`): [`Job`](crate::Job), [`Leased`](crate::Leased),
//! [`JobRecord`](crate::JobRecord).

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// A JSON value kept as its text, byte for byte (a job body).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RawJson(Box<RawValue>);

impl RawJson {
    /// The JSON text.
    pub fn get(&self) -> &str {
        self.0.get()
    }

    /// `text` if it is one JSON value.
    ///
    /// # Errors
    /// When `text` is not JSON.
    pub fn from_text(text: String) -> Result<Self, serde_json::Error> {
        RawValue::from_string(text).map(Self)
    }

    /// `value` written as JSON.
    ///
    /// # Errors
    /// When `value` cannot be written as JSON (a map with non-string keys).
    pub fn from_value<T: Serialize + ?Sized>(value: &T) -> Result<Self, serde_json::Error> {
        serde_json::value::to_raw_value(value).map(Self)
    }

    /// The value as `T`.
    ///
    /// # Errors
    /// When it is not a `T`.
    pub fn parse<'a, T: Deserialize<'a>>(&'a self) -> Result<T, serde_json::Error> {
        serde_json::from_str(self.get())
    }
}

/// A body field that is there, whatever its value: `"body": null` is a
/// body of JSON `null` (the same job as no body), and it counts as given
/// beside `body_base64` (exclusive).
pub(crate) fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<RawJson>, D::Error> {
    RawJson::deserialize(d).map(Some)
}

impl PartialEq for RawJson {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
    }
}

/// A job body as replies carry it: JSON text or base64 bytes.
pub(crate) fn body_bytes(body: Option<&RawJson>, b64: Option<&str>) -> Result<Vec<u8>, String> {
    match (b64, body) {
        (Some(b), _) => B64.decode(b).map_err(|e| e.to_string()),
        (None, Some(j)) => Ok(j.get().as_bytes().to_vec()),
        (None, None) => Ok(b"null".to_vec()),
    }
}

/// A JSON `null` body arrives as no `body` field at all (serde reads
/// `"body": null` as `None`), so neither field means `null`.
pub(crate) fn body_json<'a, T: Deserialize<'a>>(
    body: Option<&'a RawJson>,
    b64: Option<&str>,
) -> Result<T, String> {
    match (body, b64) {
        (Some(j), _) => j.parse().map_err(|e| e.to_string()),
        (None, Some(_)) => Err("the job's body is bytes, not JSON".into()),
        (None, None) => serde_json::from_str("null").map_err(|e| e.to_string()),
    }
}
