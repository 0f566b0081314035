//! A posted form: its fields, its CSRF check, and the push settings in it.

use axum::body::Bytes;
use axum::http::StatusCode;
use dq_core::{PushConfig, PushMethod};

use super::Viewer;
use crate::AppState;
use crate::error::ApiError;

/// A submitted form: every field, repeated names kept.
pub(super) struct Form(Vec<(String, String)>);

impl Form {
    pub(super) fn parse(bytes: &[u8]) -> Self {
        Self(
            form_urlencoded::parse(bytes)
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }

    /// The first value of `name`, trimmed; None if missing or blank.
    pub(super) fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.trim())
            .filter(|v| !v.is_empty())
    }

    /// Every value of `name`, as sent.
    pub(super) fn all(&self, name: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// The fields re-posting this form from a confirmation page (all but
    /// `confirm`, which that page's button adds).
    pub(super) fn resubmitted(&self) -> Vec<(&str, &str)> {
        self.0
            .iter()
            .filter(|(k, _)| k != "confirm")
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect()
    }

    /// `name` as a duration such as `10m` or `2h`, in ms; `what` names it
    /// in the messages ("delay", "pause").
    ///
    /// # Errors
    ///
    /// `invalid_delay` when it is missing or not a duration.
    pub(super) fn duration_ms(&self, name: &str, what: &str) -> Result<u64, ApiError> {
        let text = self.get(name).ok_or_else(|| {
            ApiError::bad_request("invalid_delay", format!("give a {what} such as 10m or 2h"))
        })?;
        dq_api::units::parse_ms(text, what).map_err(|e| ApiError::bad_request("invalid_delay", e))
    }

    /// `name` as a duration in the CLI's units (`30s`, `5m`), in ms, if
    /// given: a setting.
    ///
    /// # Errors
    ///
    /// `invalid_config` when it is given but is not a duration.
    pub(super) fn setting_ms(&self, name: &str) -> Result<Option<u64>, ApiError> {
        self.get(name)
            .map(|v| {
                dq_api::units::parse_ms(v, name)
                    .map_err(|e| ApiError::bad_request("invalid_config", e))
            })
            .transpose()
    }

    /// `name` as a number, if given.
    ///
    /// # Errors
    ///
    /// `invalid_config` when it is given but is not a number.
    pub(super) fn number<T: std::str::FromStr>(&self, name: &str) -> Result<Option<T>, ApiError> {
        self.get(name)
            .map(|v| {
                v.parse().map_err(|_| {
                    ApiError::bad_request(
                        "invalid_config",
                        format!("{name}: {v:?} is not a number"),
                    )
                })
            })
            .transpose()
    }
}

/// Parses a posted form and checks its CSRF token against the viewer's
/// session.
///
/// # Errors
///
/// 403 `csrf_mismatch` when the token is missing or not this session's.
pub(super) fn checked(st: &AppState, v: &Viewer, body: &Bytes) -> Result<Form, ApiError> {
    let form = Form::parse(body);
    if !crate::auth::csrf_ok_for(st, &v.session, &v.access, form.get("csrf").unwrap_or("")) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "csrf_mismatch",
            "the form's CSRF token is missing or stale; reload the page and try again",
        ));
    }
    Ok(form)
}

/// The push settings in a form; secrets and headers kept from `old`,
/// a new secret (field `secret`) replacing them.
///
/// # Errors
///
/// `invalid_callback` without a URL or with a method other than POST or
/// GET; `invalid_config` for a timeout that is not a duration or a
/// concurrency that is not a number.
pub(super) fn push_config(f: &Form, old: Option<&PushConfig>) -> Result<PushConfig, ApiError> {
    let url = f.get("url").ok_or_else(|| {
        ApiError::bad_request("invalid_callback", "push delivery needs a callback URL")
    })?;
    let method = match f.get("method") {
        Some("GET") => PushMethod::Get,
        Some("POST") | None => PushMethod::Post,
        Some(m) => {
            return Err(ApiError::bad_request(
                "invalid_callback",
                format!("method {m:?} is neither POST nor GET"),
            ));
        }
    };
    let mut secrets = old.map(|o| o.secrets.clone()).unwrap_or_default();
    if let Some(s) = f.get("secret") {
        secrets = vec![s.to_string()];
    }
    Ok(PushConfig {
        url: url.to_string(),
        method,
        timeout_ms: f
            .setting_ms("timeout")?
            .or(old.map(|o| o.timeout_ms))
            .unwrap_or(dq_core::topic::PUSH_TIMEOUT_MS),
        headers: old.map(|o| o.headers.clone()).unwrap_or_default(),
        concurrency: f
            .number("concurrency")?
            .or(old.map(|o| o.concurrency))
            .unwrap_or(dq_core::topic::PUSH_CONCURRENCY),
        secrets,
    })
}
