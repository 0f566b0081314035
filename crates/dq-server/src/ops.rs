//! Operations on this instance, under `/v1/admin` (admin only, see
//! [`crate::auth`]):
//!
//! - `POST /v1/admin/backup` `{"path": "/abs/file"}`: [`crate::Service::backup`]
//!   — writes a consistent copy of the embedded store to a new file on the
//!   server's machine (SQLite's online backup API; writes go on meanwhile)
//!   and answers when it is whole. One at a time. On Redis it is refused
//!   (409 `backup_unsupported`): back up Redis itself.
//! - `POST /v1/admin/drain` `{"wait_ms": N}`: [`crate::Service::drain`] —
//!   this instance stops handing out jobs, `/readyz` answers 503
//!   `draining`, and the answer says whether its deliveries in flight have
//!   finished within `wait_ms`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use dq_api as wire;
use dq_core::BackupError;

use crate::AppState;
use crate::error::ApiError;
use crate::extract::JsonBody;

/// Longest `wait_ms` of a drain.
pub const MAX_DRAIN_WAIT_MS: i64 = 600_000;

/// `POST /v1/admin/backup`.
pub(crate) async fn backup(
    State(st): State<AppState>,
    JsonBody(req): JsonBody<wire::BackupRequest>,
) -> Result<Response, ApiError> {
    if !st.service.can_backup() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "backup_unsupported",
            st.service.backup_advice().unwrap_or_else(|| {
                "this dq's store is Redis, which dq does not copy: back up Redis itself (RDB snapshots, AOF, replicas; see docs/operations.md#backups)".into()
            }),
        ));
    }
    let path = PathBuf::from(&req.path);
    check_path(&path)?;
    let Ok(_one) = st.backup_lock.clone().try_lock_owned() else {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "backup_in_progress",
            "a backup of this store is being written; wait for it to finish",
        ));
    };
    tracing::info!(path = %path.display(), "backup started");
    // The copy runs to the end even if the client goes away: a file under
    // `path` is always a whole backup.
    let report = st.service.backup(&path).await.map_err(|e| match e {
        BackupError::Exists(m) => ApiError::new(StatusCode::CONFLICT, "backup_exists", m),
        e => {
            tracing::error!(path = %path.display(), error = %e, "backup failed");
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "backup_failed",
                e.to_string(),
            )
        }
    })?;
    tracing::info!(path = %path.display(), bytes = report.bytes, took_ms = report.took.as_millis() as u64, "backup written");
    Ok(Json(wire::BackupDone {
        path: req.path,
        bytes: report.bytes,
        pages: report.pages,
        schema_version: report.schema_version,
        took_ms: report.took.as_millis() as u64,
    })
    .into_response())
}

/// A backup's destination: absolute, new, in a directory that exists.
fn check_path(path: &Path) -> Result<(), ApiError> {
    let invalid = |m: String| ApiError::bad_request("invalid_backup_path", m);
    if !path.is_absolute() {
        return Err(invalid(format!(
            "path must be absolute (a file on the server's machine), got {:?}",
            path.display().to_string()
        )));
    }
    let parent = path.parent().filter(|p| p.is_dir());
    if parent.is_none() || path.file_name().is_none() {
        return Err(invalid(format!(
            "the directory of {} does not exist on the server",
            path.display()
        )));
    }
    if path.symlink_metadata().is_ok() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "backup_exists",
            format!(
                "{} exists; a backup never overwrites a file: choose a new name",
                path.display()
            ),
        ));
    }
    Ok(())
}

/// `POST /v1/admin/drain`.
pub(crate) async fn drain(
    State(st): State<AppState>,
    JsonBody(req): JsonBody<wire::DrainRequest>,
) -> Result<Response, ApiError> {
    let wait = req.wait_ms.unwrap_or(0);
    if !(0..=MAX_DRAIN_WAIT_MS).contains(&wait) {
        return Err(ApiError::bad_request(
            "invalid_wait",
            format!("wait_ms must be 0 to {MAX_DRAIN_WAIT_MS}, got {wait}"),
        ));
    }
    let state = st.service.drain(Duration::from_millis(wait as u64)).await;
    Ok(Json(wire::DrainStatus {
        draining: true,
        in_flight: state.in_flight,
        drained: state.drained,
    })
    .into_response())
}
