//! API keys: create, rotate, revoke, list; this process's copy of them
//! ([`KeyRing`]) and the loop that reads them again every
//! [`keys::REFRESH`], so a key made or revoked on another instance counts
//! here too.

use std::sync::Arc;

use dq_core::{InvalidInput, Store, StoreError};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{Error, Result, Service};
use crate::keys::{self, ApiKey, KeyRing};

/// Reads the keys from `store` into `ring` every [`keys::REFRESH`] until
/// `cancel` fires (a failed read keeps the last copy).
pub(super) fn spawn_refresh(
    store: Arc<dyn Store>,
    ring: Arc<KeyRing>,
    tracker: &TaskTracker,
    cancel: &CancellationToken,
) {
    crate::supervise(tracker, cancel, "key-refresh", move || {
        let (store, ring) = (store.clone(), ring.clone());
        async move {
            loop {
                if let Err(e) = refresh_keys(&*store, &ring).await {
                    tracing::debug!(error = %e, "reading the API keys failed; keeping the last copy");
                }
                tokio::time::sleep(keys::REFRESH).await;
            }
        }
    });
}

/// Reads the keys from `store` into `ring`, one read at a time per ring (a
/// slow read cannot land after a newer one and bring back a revoked key).
async fn refresh_keys(store: &dyn Store, ring: &KeyRing) -> Result<()> {
    let _one = ring.reading().lock().await;
    let mark = ring.begin_read();
    let records = store.list_records(keys::KIND).await?;
    ring.replace(mark, &records);
    Ok(())
}

fn created(key: &ApiKey, secret: String) -> dq_api::KeyCreated {
    let info = key.info();
    dq_api::KeyCreated {
        name: info.name,
        scopes: info.scopes,
        created_ms: info.created_ms,
        secret,
        rate_limit: info.rate_limit,
    }
}

impl Service {
    /// This process's copy of the keys (what requests are checked against).
    pub fn key_ring(&self) -> &KeyRing {
        &self.keys
    }

    /// Reads the keys from the store into [`Service::key_ring`] now (the
    /// background refresh does it every [`keys::REFRESH`]).
    ///
    /// # Errors
    /// A store error; the copy is kept.
    pub async fn refresh_keys(&self) -> Result<()> {
        refresh_keys(&*self.store, &self.keys).await
    }

    /// The key whose secret is `secret`. When this process knows none, it
    /// reads the keys again first (at most every [`keys::REREAD_EVERY`],
    /// whoever asks), so a key made on another instance a moment ago works
    /// here at once.
    pub async fn find_key(&self, secret: &str) -> Option<Arc<ApiKey>> {
        if let Some(k) = self.keys.find(secret) {
            return Some(k);
        }
        if !self.keys.may_reread() {
            return None;
        }
        let _ = self.refresh_keys().await;
        self.keys.find(secret)
    }

    /// Whether the keys were read at least once; if not, tries now (at
    /// most every [`keys::REREAD_EVERY`]). Callers treat `false` as "keys
    /// may exist": they refuse rather than act as if none did.
    pub async fn keys_loaded(&self) -> bool {
        if !self.keys.loaded() && self.keys.may_reread() {
            let _ = self.refresh_keys().await;
        }
        self.keys.loaded()
    }

    /// Creates a key; returns it with its secret (shown this once).
    ///
    /// # Errors
    /// `invalid_key_name`, `invalid_scope`, `too_many_keys`;
    /// [`Error::KeyExists`]; a store error.
    pub async fn create_key(
        &self,
        name: &str,
        scopes: &[String],
        rate_limit: Option<dq_core::RateLimit>,
    ) -> Result<dq_api::KeyCreated> {
        keys::check_name(name)?;
        let scopes = keys::parse_scopes(scopes)?;
        if let Some(r) = &rate_limit {
            r.validate("rate_limit")?;
        }
        if self.store.get_record(keys::KIND, name).await?.is_some() {
            return Err(Error::KeyExists(name.to_string()));
        }
        if self.store.list_records(keys::KIND).await?.len() >= keys::MAX_KEYS {
            return Err(InvalidInput::new(
                "too_many_keys",
                format!(
                    "a store holds at most {} API keys; revoke some first",
                    keys::MAX_KEYS
                ),
            )
            .into());
        }
        let secret = keys::new_secret();
        let key = ApiKey::new(name.to_string(), &secret, scopes, self.now()).limited(rate_limit);
        let fresh = self
            .store
            .put_record(keys::KIND, name, &key.to_record(), 0)
            .await?;
        if !fresh {
            // Another create of this name won the race between the check
            // and the write, and this one replaced it: neither secret may
            // work silently. Both callers are told; one retries.
            self.store.delete_record(keys::KIND, name).await?;
            self.keys.remove(name);
            return Err(Error::KeyExists(name.to_string()));
        }
        tracing::info!(key = %name, scopes = ?key.info().scopes, "API key created");
        let created = created(&key, secret);
        self.keys.insert(key);
        Ok(created)
    }

    /// Gives a key a new secret (same name and scopes); the old one stops
    /// working at once here and within [`keys::REFRESH`] everywhere.
    ///
    /// # Errors
    /// [`Error::KeyNotFound`]; a store error.
    pub async fn rotate_key(&self, name: &str) -> Result<dq_api::KeyCreated> {
        let old = self.load_key(name).await?;
        let secret = keys::new_secret();
        let key = ApiKey::new(name.to_string(), &secret, old.scopes.clone(), self.now())
            .limited(old.rate_limit);
        let revoked_meanwhile = self
            .store
            .put_record(keys::KIND, name, &key.to_record(), old.last_used_ms())
            .await?;
        if revoked_meanwhile {
            // Revoked between the read and the write: it stays revoked.
            self.store.delete_record(keys::KIND, name).await?;
            return Err(Error::KeyNotFound(name.to_string()));
        }
        tracing::info!(key = %name, "API key rotated");
        let created = created(&key, secret);
        self.keys.insert(key);
        Ok(created)
    }

    /// Revokes (deletes) a key: at once here, within [`keys::REFRESH`]
    /// on every instance.
    ///
    /// # Errors
    /// [`Error::KeyNotFound`]; a store error.
    pub async fn revoke_key(&self, name: &str) -> Result<()> {
        keys::check_name(name).map_err(|_| Error::KeyNotFound(name.to_string()))?;
        // The store first: a refresh between the two cannot bring it back.
        let deleted = self.store.delete_record(keys::KIND, name).await?;
        self.keys.remove(name);
        if !deleted {
            return Err(Error::KeyNotFound(name.to_string()));
        }
        tracing::info!(key = %name, "API key revoked");
        Ok(())
    }

    /// Every key, by name, as the store holds them now (never a secret).
    ///
    /// # Errors
    /// A store error.
    pub async fn list_keys(&self) -> Result<Vec<dq_api::KeyInfo>> {
        let mut out = Vec::new();
        for (name, rec) in self.store.list_records(keys::KIND).await? {
            match ApiKey::from_record(&name, &rec) {
                Ok(k) => out.push(self.key_info(k)),
                Err(e) => tracing::warn!(key = %name, error = %e, "stored API key is not valid"),
            }
        }
        Ok(out)
    }

    /// One key (never its secret).
    ///
    /// # Errors
    /// [`Error::KeyNotFound`]; a store error.
    pub async fn key(&self, name: &str) -> Result<dq_api::KeyInfo> {
        let k = self.load_key(name).await?;
        Ok(self.key_info(k))
    }

    /// A stored key with the latest use this process knows of.
    fn key_info(&self, k: ApiKey) -> dq_api::KeyInfo {
        let mut info = k.info();
        let here = self
            .keys
            .named(&k.name)
            .map_or(0, |known| known.last_used_ms());
        let used = here.max(info.last_used_ms.unwrap_or(0));
        info.last_used_ms = (used > 0).then_some(used);
        info
    }

    async fn load_key(&self, name: &str) -> Result<ApiKey> {
        keys::check_name(name).map_err(|_| Error::KeyNotFound(name.to_string()))?;
        let rec = self
            .store
            .get_record(keys::KIND, name)
            .await?
            .ok_or_else(|| Error::KeyNotFound(name.to_string()))?;
        ApiKey::from_record(name, &rec).map_err(|e| {
            StoreError::Unavailable(format!("stored API key {name:?} is not valid: {e}")).into()
        })
    }

    /// Notes that `key` was used now, writing it to the store at most once
    /// a minute (in the background: a request never waits for it).
    pub fn note_key_use(&self, key: &ApiKey) {
        let now = self.now();
        if key.note_use(now) {
            let (store, name) = (self.store.clone(), key.name.clone());
            tokio::spawn(async move {
                let _ = store.raise_mark(keys::KIND, &name, now).await;
            });
        }
    }
}
