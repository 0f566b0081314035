//! Dead letters: list, replay, purge.

use serde::{Deserialize, Serialize};

use crate::jobs::Job;

/// `GET /v1/topics/{topic}/dead`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeadList {
    /// Oldest death first.
    pub jobs: Vec<Job>,
}

/// `POST /v1/topics/{topic}/dead/replay`: the named dead letters, or (no
/// `ids`) all.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplayRequest {
    /// At most 1000 ids. Only a missing field means "all": `"ids": null` is
    /// refused, so a client that sends an unset list replays nothing by
    /// mistake rather than everything.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "ids_not_null"
    )]
    pub ids: Option<Vec<String>>,
}

fn ids_not_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    match Option::<Vec<String>>::deserialize(d)? {
        Some(ids) => Ok(Some(ids)),
        None => Err(serde::de::Error::custom(
            "ids: null is not a list of ids; leave ids out to replay all dead letters",
        )),
    }
}

/// The answer to a replay.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replayed {
    /// How many became due.
    pub replayed: u64,
}

/// `DELETE /v1/topics/{topic}/dead`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Purged {
    /// How many were deleted.
    pub purged: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_all_only_without_ids() {
        let all: ReplayRequest = serde_json::from_str("{}").unwrap();
        assert_eq!(all.ids, None);
        let some: ReplayRequest = serde_json::from_str(r#"{"ids": []}"#).unwrap();
        assert_eq!(some.ids, Some(vec![]));
        let e = serde_json::from_str::<ReplayRequest>(r#"{"ids": null}"#).unwrap_err();
        assert!(e.to_string().contains("leave ids out"), "{e}");
    }
}
