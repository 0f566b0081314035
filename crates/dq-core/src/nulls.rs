//! How an optional field of the wire reads `null`.
//!
//! The OpenAPI document types most optional fields without `null`: such a
//! field is either left out or a value. Serde reads `null` into an
//! `Option` as `None`, which would take a request the document calls
//! invalid; [`not_null`] refuses it instead (the wire's `invalid_json`).

use serde::Deserialize;

/// An optional field that, when given, is a value: `null` is refused, as
/// the OpenAPI document's non-nullable types say. Use with
/// `#[serde(default, deserialize_with = "not_null")]`.
///
/// # Errors
/// A serde error for `null`, or for a value that is not a `T`.
pub fn not_null<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    match Option::<T>::deserialize(d)? {
        Some(v) => Ok(Some(v)),
        None => Err(serde::de::Error::custom(
            "null is not a value here: leave the field out instead",
        )),
    }
}
