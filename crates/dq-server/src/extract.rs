//! Request body extraction with our own errors: 415 for a wrong content type,
//! 413 over the request size limit, 400 with serde's message for bad JSON.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{StatusCode, header};
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// A JSON request body. An empty body reads as `{}`.
#[derive(Debug)]
pub(crate) struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let ct = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(|v| {
                v.split(';')
                    .next()
                    .unwrap_or("")
                    .trim()
                    .to_ascii_lowercase()
            });
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            if timed_out(&e) {
                ApiError::new(
                    StatusCode::REQUEST_TIMEOUT,
                    "request_timeout",
                    "the request body did not arrive within the server's http_body_timeout",
                )
            } else if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "request_too_large",
                    "request body is over the server's max_request_bytes",
                )
            } else {
                ApiError::bad_request("invalid_body", e.body_text())
            }
        })?;
        if bytes.is_empty() {
            return parse(b"{}").map(JsonBody);
        }
        match ct.as_deref() {
            Some("application/json") => {}
            Some(other) => {
                return Err(ApiError::new(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "unsupported_media_type",
                    format!("content type must be application/json, got {other:?}"),
                ));
            }
            None => {
                return Err(ApiError::new(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "unsupported_media_type",
                    "content type must be application/json",
                ));
            }
        }
        // Every request body is an object (serde would also read a struct
        // from an array of its fields in order: `[null, null]`).
        if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return Err(ApiError::bad_request(
                "invalid_json",
                "the request body must be a JSON object",
            ));
        }
        parse(&bytes).map(JsonBody)
    }
}

/// Whether reading the body failed on the listener's body timeout.
fn timed_out(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if err.is::<tower_http::timeout::TimeoutError>() {
            return true;
        }
        cur = err.source();
    }
    false
}

/// Parses JSON with a 400 `invalid_json` error naming where it broke.
/// Numbers written with a fraction or an exponent that are whole (`670.0`,
/// `1e3`) are read as the integers they are (JSON, and the OpenAPI
/// document's `integer`, do not tell them apart), except inside a `body`,
/// which is kept as sent.
pub(crate) fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let bytes = integral_numbers(bytes);
    serde_json::from_slice(&bytes).map_err(|e| ApiError::bad_request("invalid_json", e.to_string()))
}

/// `json` with whole numbers written as integers (see [`parse`]); the value
/// of every `"body"` key is copied as it is. Text that is not JSON comes
/// out as unchanged as the parser needs to report it.
pub(crate) fn integral_numbers(json: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    // Fast path: no number with a fraction or exponent outside strings.
    if !has_fraction_or_exponent(json) {
        return std::borrow::Cow::Borrowed(json);
    }
    let mut out = Vec::with_capacity(json.len());
    let mut i = 0;
    // The last string read and whether it was followed by ':' (a key).
    let mut last_key: Option<(usize, usize)> = None;
    while i < json.len() {
        let b = json[i];
        match b {
            b'"' => {
                let end = string_end(json, i);
                out.extend_from_slice(&json[i..end]);
                last_key = Some((i + 1, end.saturating_sub(1)));
                i = end;
                continue;
            }
            b':' => {
                out.push(b);
                i += 1;
                if let Some((a, z)) = last_key.take()
                    && &json[a..z.max(a)] == b"body"
                {
                    // Copy the body's value verbatim.
                    while i < json.len() && json[i].is_ascii_whitespace() {
                        out.push(json[i]);
                        i += 1;
                    }
                    let end = value_end(json, i);
                    out.extend_from_slice(&json[i..end]);
                    i = end;
                }
                continue;
            }
            b'-' | b'0'..=b'9' => {
                let mut end = i + 1;
                while end < json.len()
                    && matches!(json[end], b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-')
                {
                    end += 1;
                }
                match whole(&json[i..end]) {
                    Some(int) => out.extend_from_slice(int.as_bytes()),
                    None => out.extend_from_slice(&json[i..end]),
                }
                last_key = None;
                i = end;
                continue;
            }
            _ => {
                if !b.is_ascii_whitespace() {
                    last_key = None;
                }
                out.push(b);
                i += 1;
            }
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Whether a number token outside strings has a fraction or an exponent (a
/// plain scan for `.`/`e` would send every request with a key like `"delay"`
/// or a value like `true` the slow way).
fn has_fraction_or_exponent(json: &[u8]) -> bool {
    let mut i = 0;
    while i < json.len() {
        match json[i] {
            b'"' => i = string_end(json, i),
            b'-' | b'0'..=b'9' => {
                i += 1;
                while i < json.len() && matches!(json[i], b'0'..=b'9' | b'+' | b'-') {
                    i += 1;
                }
                if i < json.len() && matches!(json[i], b'.' | b'e' | b'E') {
                    return true;
                }
            }
            _ => i += 1,
        }
    }
    false
}

/// Where the string starting at `start` (a `"`) ends, past its closing quote.
fn string_end(json: &[u8], start: usize) -> usize {
    let mut i = start + 1;
    // memchr skips the string's plain bytes a word at a time: every request
    // is scanned once before it is parsed, and bodies are mostly strings.
    while let Some(at) = json
        .get(i..)
        .and_then(|rest| memchr::memchr2(b'"', b'\\', rest))
    {
        i += at;
        if json[i] == b'"' {
            return i + 1;
        }
        i += 2;
    }
    json.len()
}

/// Where the JSON value starting at `start` ends.
fn value_end(json: &[u8], start: usize) -> usize {
    let mut depth = 0usize;
    let mut i = start;
    while i < json.len() {
        match json[i] {
            b'"' => {
                i = string_end(json, i);
                if depth == 0 {
                    return i;
                }
                continue;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                if depth == 0 {
                    return i;
                }
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            b',' if depth == 0 => return i,
            _ => {}
        }
        i += 1;
    }
    json.len()
}

/// The integer a JSON number token is, if it has a fraction or an exponent
/// and is whole (and has at most 20 digits); None otherwise.
fn whole(token: &[u8]) -> Option<String> {
    let t = std::str::from_utf8(token).ok()?;
    if !t.contains(['.', 'e', 'E']) {
        return None;
    }
    let (neg, t) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t),
    };
    let (mantissa, exp) = match t.find(['e', 'E']) {
        Some(p) => (&t[..p], t[p + 1..].parse::<i32>().ok()?),
        None => (t, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if int.is_empty()
        || !int.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let frac = frac.trim_end_matches('0');
    let mut digits: String = format!("{int}{frac}").trim_start_matches('0').to_string();
    let mut e = exp.checked_sub(i32::try_from(frac.len()).ok()?)?;
    while e < 0 && digits.ends_with('0') {
        digits.pop();
        e += 1;
    }
    if e < 0 && !digits.is_empty() {
        return None;
    }
    if digits.is_empty() {
        return Some("0".into());
    }
    let e = usize::try_from(e.max(0)).ok()?;
    if digits.len() + e > 20 {
        return None;
    }
    Some(format!(
        "{}{digits}{}",
        if neg { "-" } else { "" },
        "0".repeat(e)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(s: &str) -> String {
        String::from_utf8(integral_numbers(s.as_bytes()).into_owned()).unwrap()
    }

    #[test]
    fn whole_numbers_become_integers_and_bodies_stay_as_sent() {
        assert_eq!(norm(r#"{"lease_ms": 670.0}"#), r#"{"lease_ms": 670}"#);
        assert_eq!(
            norm(r#"{"a":1e3,"b":1.5e1,"c":-2.50e1,"d":0.0,"e":1500e-2}"#),
            r#"{"a":1000,"b":15,"c":-25,"d":0,"e":15}"#
        );
        assert_eq!(
            norm(r#"{"a":1.5,"b":1e-3,"c":2.0e30}"#),
            r#"{"a":1.5,"b":1e-3,"c":2.0e30}"#
        );
        let body =
            r#"{"body": {"x": 1.0, "s": "2.0 \" 3.0", "n": [4.0]}, "priority": 7.0, "id": "5.0"}"#;
        assert_eq!(
            norm(body),
            r#"{"body": {"x": 1.0, "s": "2.0 \" 3.0", "n": [4.0]}, "priority": 7, "id": "5.0"}"#
        );
        assert_eq!(
            norm(r#"{"jobs":[{"body":1.0,"delay_ms":2.0},{"body":"x","delay_ms":3.0}]}"#),
            r#"{"jobs":[{"body":1.0,"delay_ms":2},{"body":"x","delay_ms":3}]}"#
        );
        assert_eq!(norm(r#"{"body":2.0}"#), r#"{"body":2.0}"#);
        assert_eq!(norm("{\"a\": 1"), "{\"a\": 1");
        assert_eq!(norm("{\"body\": "), "{\"body\": ");
        assert_eq!(
            norm(r#"["body", 1.0]"#),
            r#"["body", 1]"#,
            "a string value is not a key"
        );
    }

    /// A string's end is its first unescaped quote, whatever escapes come
    /// before it; a string cut short ends with the text, also when the
    /// text's last byte is a backslash.
    #[test]
    fn a_string_ends_at_its_first_unescaped_quote() {
        for (text, end) in [
            (r#""" x"#, 2),
            (r#""a" x"#, 3),
            (r#""\"" x"#, 4),
            (r#""\\" x"#, 4),
            (r#""\\\"a" x"#, 7),
            (r#""abc"#, 4),
            (r#""abc\"#, 5),
            (r#""\"#, 2),
        ] {
            assert_eq!(string_end(text.as_bytes(), 0), end, "{text}");
        }
    }

    #[test]
    fn only_numbers_with_a_fraction_or_exponent_take_the_slow_way() {
        for plain in [
            r#"{"delay_ms": 5, "ok": true, "no": false, "body": {"e": "1.5e3"}}"#,
            r#"{"id": "a.b", "priority": -7, "n": null}"#,
            r#"{"s": "\"1.0"}"#,
            "{\"a\": 1",
        ] {
            assert!(!has_fraction_or_exponent(plain.as_bytes()), "{plain}");
            assert!(matches!(
                integral_numbers(plain.as_bytes()),
                std::borrow::Cow::Borrowed(_)
            ));
        }
        for rewritten in [
            r#"{"a": 1.0}"#,
            r#"{"a": -1e3}"#,
            r#"{"a": 0E1}"#,
            r#"{"body": 2.5}"#,
            r#"[1, 2, 3.0]"#,
        ] {
            assert!(
                has_fraction_or_exponent(rewritten.as_bytes()),
                "{rewritten}"
            );
        }
    }
}

/// Path parameters with our own error: 400 `invalid_path` (JSON) when a
/// segment does not decode (e.g. `%FF`, not UTF-8), instead of axum's text.
#[derive(Debug)]
pub(crate) struct ApiPath<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> axum::extract::FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, ApiError> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| ApiPath(p.0))
            .map_err(|e| ApiError::bad_request("invalid_path", e.body_text()))
    }
}

/// A query string with our own error: 400 `invalid_query` (JSON) naming the
/// parameter, instead of axum's text.
#[derive(Debug)]
pub(crate) struct ApiQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> axum::extract::FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _state: &S,
    ) -> Result<Self, ApiError> {
        axum::extract::Query::<T>::try_from_uri(&parts.uri)
            .map(|q| ApiQuery(q.0))
            .map_err(|e| ApiError::bad_request("invalid_query", e.body_text()))
    }
}
