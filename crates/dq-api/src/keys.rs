//! API keys: create, list, rotate, revoke.

use serde::{Deserialize, Serialize};

/// `POST /v1/keys`: a new API key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateKeyRequest {
    /// 1-64 bytes of `A-Z a-z 0-9 _ -`, unique.
    pub name: String,
    /// `action:pattern` each (`consume:billing-*`, `read:*`, `admin`).
    pub scopes: Vec<String>,
    /// Most requests per window this key may make to each instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<dq_core::RateLimit>,
}

/// A key as `GET /v1/keys` shows it: never its secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyInfo {
    /// The key's name.
    pub name: String,
    /// What it may do, `action:pattern` each.
    pub scopes: Vec<String>,
    /// When it was created or last rotated, Unix ms.
    pub created_ms: u64,
    /// When it was last used, Unix ms (to within a minute); left out if never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_used_ms: Option<u64>,
    /// Most requests per window it may make to each instance; left out: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<dq_core::RateLimit>,
}

/// `POST /v1/keys` (201) and `POST /v1/keys/{name}/rotate`: the key and its
/// secret, shown this once.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyCreated {
    /// The key's name.
    pub name: String,
    /// What it may do.
    pub scopes: Vec<String>,
    /// When it was created (or rotated), Unix ms.
    pub created_ms: u64,
    /// The secret (`dqk_…`), for `Authorization: Bearer`. dq keeps only its
    /// SHA-256: it cannot be shown again.
    pub secret: String,
    /// Most requests per window it may make to each instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limit: Option<dq_core::RateLimit>,
}

impl std::fmt::Debug for KeyCreated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyCreated")
            .field("name", &self.name)
            .field("scopes", &self.scopes)
            .field("created_ms", &self.created_ms)
            .field("secret", &"dqk_…")
            .field("rate_limit", &self.rate_limit)
            .finish()
    }
}

/// `GET /v1/keys`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyList {
    /// Every key, by name.
    pub keys: Vec<KeyInfo>,
}

/// `DELETE /v1/keys/{name}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyRevoked {
    /// The key.
    pub name: String,
    /// Always true (an unknown key is 404).
    pub revoked: bool,
}
