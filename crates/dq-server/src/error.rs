//! The one error type of the HTTP API: a status, a stable machine-readable
//! code and a message, as `{"error": {"code", "message"}}`. Internal details
//! (Redis errors) are logged, not returned.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use dq_core::{InvalidInput, StoreError};

/// An API error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Stable code, e.g. `lease_mismatch`.
    pub code: &'static str,
    /// For a person.
    pub message: String,
}

impl ApiError {
    /// An error with any status.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }

    /// 400 with a code.
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    /// 404 for a job.
    pub fn job_not_found() -> Self {
        Self::new(StatusCode::NOT_FOUND, "job_not_found", "no such job")
    }

    /// 404 for a topic.
    pub fn topic_not_found(topic: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "topic_not_found",
            format!("no topic named {topic:?}"),
        )
    }

    /// 503 while shutting down.
    pub fn shutting_down() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting_down",
            "this dq instance is shutting down; retry on another",
        )
    }
}

impl ApiError {
    /// 503 while draining.
    pub fn draining() -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "draining",
            "this dq instance is draining (taken out for a restart); reserve on another",
        )
    }
}

impl From<InvalidInput> for ApiError {
    fn from(e: InvalidInput) -> Self {
        let status = if e.too_large {
            StatusCode::PAYLOAD_TOO_LARGE
        } else {
            StatusCode::BAD_REQUEST
        };
        Self::new(status, e.code, e.message)
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound => Self::job_not_found(),
            StoreError::NotInState(s) => Self::new(
                StatusCode::CONFLICT,
                "not_in_state",
                format!("job is {s}; this call is not allowed in that state"),
            ),
            StoreError::LeaseMismatch => Self::new(
                StatusCode::CONFLICT,
                "lease_mismatch",
                "token does not match the job's current lease (the lease expired and the job was handed out again, or the token is wrong)",
            ),
            StoreError::Invalid(i) => i.into(),
            StoreError::Storage { code, message } => {
                tracing::error!(code, error = %message, "store cannot write");
                Self::new(StatusCode::SERVICE_UNAVAILABLE, code, message)
            }
            StoreError::Unavailable(detail) => {
                tracing::warn!(error = %detail, "store unavailable");
                Self::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "store_unavailable",
                    "the store is unavailable; retry later",
                )
            }
        }
    }
}

impl From<crate::service::Error> for ApiError {
    fn from(e: crate::service::Error) -> Self {
        use crate::service::Error;
        match e {
            Error::Store(e) => e.into(),
            Error::TopicNotFound(t) => Self::topic_not_found(&t),
            Error::TopicIsDelivered(_) => {
                Self::new(StatusCode::CONFLICT, "topic_is_push", e.to_string())
            }
            Error::TopicExists(t) => Self::new(
                StatusCode::CONFLICT,
                "topic_exists",
                format!("topic {t:?} exists already; change it on its page"),
            ),
            Error::ShuttingDown => Self::shutting_down(),
            Error::ScheduleNotFound(n) => Self::new(
                StatusCode::NOT_FOUND,
                "schedule_not_found",
                format!("no schedule named {n:?}"),
            ),
            Error::Draining => Self::draining(),
            Error::KeyNotFound(_) => {
                Self::new(StatusCode::NOT_FOUND, "key_not_found", e.to_string())
            }
            Error::KeyExists(_) => Self::new(StatusCode::CONFLICT, "key_exists", e.to_string()),
        }
    }
}

impl ApiError {
    /// The JSON body, `{"error": {"code", "message"}}` (the wire type every
    /// refusal uses, alone or as one result of a batch).
    pub fn body(&self) -> dq_api::ErrorBody {
        dq_api::ErrorBody {
            error: dq_api::ErrorDetail {
                code: self.code.to_string(),
                message: self.message.clone(),
            },
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut res = (self.status, axum::Json(self.body())).into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            res.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        res
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_errors_map_to_statuses_and_codes() {
        let cases = [
            (StoreError::NotFound, 404, "job_not_found"),
            (StoreError::LeaseMismatch, 409, "lease_mismatch"),
            (
                StoreError::NotInState(dq_core::JobState::Dead),
                409,
                "not_in_state",
            ),
            (
                StoreError::Unavailable("redis: refused".into()),
                503,
                "store_unavailable",
            ),
            (
                StoreError::Storage {
                    code: "store_full",
                    message: "disk is full".into(),
                },
                503,
                "store_full",
            ),
        ];
        for (e, status, code) in cases {
            let a = ApiError::from(e);
            assert_eq!((a.status.as_u16(), a.code), (status, code));
            let res = a.clone().into_response();
            assert_eq!(
                res.headers().contains_key(header::RETRY_AFTER),
                status == 503
            );
        }
        let a = ApiError::from(StoreError::Unavailable("secret detail".into()));
        assert!(
            !a.message.contains("secret"),
            "internal details are not returned"
        );
    }
}
