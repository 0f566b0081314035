//! Errors of the client, mirroring the API's error codes.

/// What went wrong with a call.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// 404 `job_not_found` / `topic_not_found`.
    #[error("not found ({code}): {message}")]
    NotFound {
        /// `job_not_found`, `topic_not_found` or `route_not_found`.
        code: String,
        /// The server's message.
        message: String,
    },
    /// 409 `lease_mismatch`: the lease is no longer yours.
    #[error("lease mismatch: {0}")]
    LeaseMismatch(String),
    /// 409 `not_in_state`.
    #[error("not in state: {0}")]
    NotInState(String),
    /// 400 or 413 or 415: the request was refused and changed nothing.
    #[error("invalid request ({code}): {message}")]
    Invalid {
        /// The API's code, e.g. `invalid_delay`.
        code: String,
        /// The server's message.
        message: String,
    },
    /// 503: the store (or the server) is unavailable; try again later.
    #[error("unavailable ({code}): {message}")]
    Unavailable {
        /// `store_unavailable`, `shutting_down`, `store_full`, …
        code: String,
        /// The server's message.
        message: String,
        /// The server's `Retry-After`, in seconds.
        retry_after_s: Option<u64>,
    },
    /// 401 or 403: the server wants `admin_token` for this call (see
    /// [`crate::Client::token`]), or refused the request's origin.
    #[error("not allowed ({code}): {message}")]
    Unauthorized {
        /// `unauthorized` or `cross_origin`.
        code: String,
        /// The server's message.
        message: String,
    },
    /// Any other HTTP error.
    #[error("HTTP {status} ({code}): {message}")]
    Http {
        /// HTTP status.
        status: u16,
        /// The API's code, if any.
        code: String,
        /// The server's message.
        message: String,
    },
    /// The server could not be reached, or the connection broke.
    #[error("cannot reach dq: {0}")]
    Transport(#[from] reqwest::Error),
    /// The reply was not what the API documents.
    #[error("unexpected reply: {0}")]
    Decode(String),
}

impl Error {
    /// Builds the error for a non-2xx reply.
    pub(crate) fn from_reply(
        status: u16,
        body: &serde_json::Value,
        retry_after_s: Option<u64>,
    ) -> Self {
        let code = body["error"]["code"].as_str().unwrap_or("").to_string();
        let message = body["error"]["message"].as_str().unwrap_or("").to_string();
        match (status, code.as_str()) {
            (404, _) => Error::NotFound { code, message },
            (409, "lease_mismatch") => Error::LeaseMismatch(message),
            (409, "not_in_state") => Error::NotInState(message),
            (400 | 413 | 415, _) => Error::Invalid { code, message },
            (401 | 403, _) => Error::Unauthorized { code, message },
            (503, _) => Error::Unavailable {
                code,
                message,
                retry_after_s,
            },
            _ => Error::Http {
                status,
                code,
                message,
            },
        }
    }

    /// The API's machine-readable code, when the server answered with one.
    pub fn code(&self) -> Option<&str> {
        match self {
            Error::NotFound { code, .. }
            | Error::Invalid { code, .. }
            | Error::Unavailable { code, .. }
            | Error::Unauthorized { code, .. }
            | Error::Http { code, .. } => Some(code),
            Error::LeaseMismatch(_) => Some("lease_mismatch"),
            Error::NotInState(_) => Some("not_in_state"),
            Error::Transport(_) | Error::Decode(_) => None,
        }
    }

    /// Whether trying again later may succeed (unavailable, or no connection).
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Unavailable { .. } => true,
            Error::Transport(e) => e.is_connect() || e.is_timeout() || e.is_request(),
            _ => false,
        }
    }
}

/// A client result.
pub type Result<T> = std::result::Result<T, Error>;
