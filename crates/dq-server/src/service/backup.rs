//! Backups: a consistent copy of the store while it serves, where the
//! store can make one ([`dq_core::Store::backup`]: the embedded store;
//! Redis is backed up by Redis itself).

use std::path::Path;

use dq_core::{BackupError, BackupReport};

use super::Service;

impl Service {
    /// Whether [`Service::backup`] can copy this instance's store; asked
    /// before a destination is checked, so a store dq does not copy is
    /// refused first.
    pub fn can_backup(&self) -> bool {
        self.store.can_backup()
    }

    /// What to use instead for a store dq does not copy, when the store
    /// says ([`dq_core::Store::backup_advice`]).
    pub fn backup_advice(&self) -> Option<String> {
        self.store.backup_advice()
    }

    /// Writes a consistent copy of the store to the new file `to` on this
    /// machine (writes go on meanwhile) and returns when it is whole.
    ///
    /// # Errors
    /// [`BackupError::Unsupported`] for a store dq does not copy;
    /// [`BackupError::Exists`] when `to` exists; [`BackupError::Failed`].
    pub async fn backup(&self, to: &Path) -> Result<BackupReport, BackupError> {
        self.store.backup(to).await
    }
}
