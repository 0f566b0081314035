//! API keys: create, list, revoke, rotate.

use dq_api as wire;
use reqwest::Method;

use super::{Client, NONE, encode_segment};
use crate::error::Result;
// Named by the `# Errors` doc links only.
#[cfg(doc)]
use crate::error::Error;

impl Client {
    /// Creates an API key (admin only), optionally with a request rate
    /// limit per instance; the reply holds its secret, which the server
    /// cannot show again.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad name or scope; [`Error::Http`] 409
    /// `key_exists`; [`Error::Unauthorized`] without an admin key.
    pub async fn create_key(
        &self,
        name: &str,
        scopes: &[String],
        rate_limit: Option<dq_core::RateLimit>,
    ) -> Result<wire::KeyCreated> {
        let req = wire::CreateKeyRequest {
            name: name.to_string(),
            scopes: scopes.to_vec(),
            rate_limit,
        };
        self.call(
            Method::POST,
            format!("{}/v1/keys", self.base),
            Some(&req),
            false,
        )
        .await
    }

    /// Every API key (never a secret).
    ///
    /// # Errors
    /// [`Error::Unauthorized`] without an admin key.
    pub async fn keys(&self) -> Result<Vec<wire::KeyInfo>> {
        let r: wire::KeyList = self
            .call(Method::GET, format!("{}/v1/keys", self.base), NONE, true)
            .await?;
        Ok(r.keys)
    }

    /// Revokes an API key: it stops working on every instance within a second.
    ///
    /// # Errors
    /// [`Error::NotFound`] for an unknown key.
    pub async fn revoke_key(&self, name: &str) -> Result<()> {
        let _: wire::KeyRevoked = self
            .call(
                Method::DELETE,
                format!("{}/v1/keys/{}", self.base, encode_segment(name)),
                NONE,
                false,
            )
            .await?;
        Ok(())
    }

    /// Gives an API key a new secret (returned); the old one stops working.
    ///
    /// # Errors
    /// [`Error::NotFound`] for an unknown key.
    pub async fn rotate_key(&self, name: &str) -> Result<wire::KeyCreated> {
        self.call(
            Method::POST,
            format!("{}/v1/keys/{}/rotate", self.base, encode_segment(name)),
            NONE,
            false,
        )
        .await
    }
}
