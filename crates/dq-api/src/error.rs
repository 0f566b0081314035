//! The body of every refusal (`{"error": {"code", "message"}}`), and the
//! reader the untagged per-item results of the batch routes share.

use serde::{Deserialize, Serialize};

/// An error: `{"error": {"code", "message"}}`, the body of every refusal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorBody {
    /// What went wrong.
    pub error: ErrorDetail,
}

/// The inside of an [`ErrorBody`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorDetail {
    /// Stable, machine-readable (`lease_mismatch`); clients match on it.
    pub code: String,
    /// For a person.
    pub message: String,
}

// The four per-item results of the batch routes are untagged on the wire
// (`{"error": …}` or the item's answer). serde's derive for an untagged enum
// buffers each item into an intermediate tree and tries every variant in
// turn, building an error message for each miss: a third of the Rust
// client's CPU per acked job in `perf`. These read each item once into its
// fields and pick the variant from which of them are there.

/// An untagged result read from its fields: the refusal (`error`) or the
/// answer (present when its required fields are), exactly one of them.
pub(crate) fn refusal_or<T, E: serde::de::Error>(
    what: &str,
    error: Option<ErrorDetail>,
    answer: Option<T>,
) -> Result<Result<T, ErrorBody>, E> {
    match (error, answer) {
        (Some(error), None) => Ok(Err(ErrorBody { error })),
        (None, Some(answer)) => Ok(Ok(answer)),
        (Some(_), Some(_)) => Err(E::custom(format!("{what}: both an error and an answer"))),
        (None, None) => Err(E::custom(format!("{what}: neither an error nor an answer"))),
    }
}
