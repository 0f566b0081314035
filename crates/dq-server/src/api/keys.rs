//! API keys: create, list, get, rotate, revoke (the admin's alone).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use dq_api as wire;

use super::{ApiResult, reply};
use crate::AppState;
use crate::error::ApiError;
use crate::extract::{ApiPath as Path, JsonBody};
use crate::keys::Action;

/// Without an admin token, keep an admin key: else nobody could manage
/// keys any more. Refuses (409 `admin_key_needed`) a change that would leave
/// none: a first key without `admin`, or revoking the last admin key.
fn keep_an_admin(st: &AppState, making_admin: bool, revoking: Option<&str>) -> ApiResult<()> {
    if st.admin.has_token() {
        return Ok(());
    }
    let ring = st.service.key_ring();
    let admins_left = match revoking {
        Some(name) => ring
            .named(name)
            .is_none_or(|k| !k.is_admin() || ring.admin_count() > 1),
        None => making_admin || ring.has_admin(),
    };
    if admins_left {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::CONFLICT,
        "admin_key_needed",
        "this dq has no admin_token, so it keeps at least one key with the admin scope: create an admin key first (--scope admin), or set admin_token",
    ))
}

/// `POST /v1/keys` — 201 with the secret, shown this once.
pub(crate) async fn create_key(
    State(st): State<AppState>,
    JsonBody(req): JsonBody<wire::CreateKeyRequest>,
) -> ApiResult {
    let making_admin = req
        .scopes
        .iter()
        .any(|s| crate::keys::Scope::parse(s).is_ok_and(|scope| scope.action() == Action::Admin));
    keep_an_admin(&st, making_admin, None)?;
    let created = st
        .service
        .create_key(&req.name, &req.scopes, req.rate_limit)
        .await?;
    Ok(no_store(
        (StatusCode::CREATED, Json(created)).into_response(),
    ))
}

/// A reply holding a secret: no cache may keep it.
fn no_store(mut res: Response) -> Response {
    res.headers_mut().insert(
        axum::http::header::CACHE_CONTROL,
        axum::http::HeaderValue::from_static("no-store"),
    );
    res
}

/// `GET /v1/keys` — never a secret.
pub(crate) async fn list_keys(State(st): State<AppState>) -> ApiResult {
    reply(wire::KeyList {
        keys: st.service.list_keys().await?,
    })
}

/// `GET /v1/keys/{name}`
pub(crate) async fn get_key(State(st): State<AppState>, Path(name): Path<String>) -> ApiResult {
    reply(st.service.key(&name).await?)
}

/// `DELETE /v1/keys/{name}` — revoked here at once, everywhere within 1 s.
pub(crate) async fn revoke_key(State(st): State<AppState>, Path(name): Path<String>) -> ApiResult {
    keep_an_admin(&st, false, Some(&name))?;
    st.service.revoke_key(&name).await?;
    reply(wire::KeyRevoked {
        name,
        revoked: true,
    })
}

/// `POST /v1/keys/{name}/rotate` — a new secret, shown this once; the old
/// one stops working.
pub(crate) async fn rotate_key(State(st): State<AppState>, Path(name): Path<String>) -> ApiResult {
    Ok(no_store(
        Json(st.service.rotate_key(&name).await?).into_response(),
    ))
}
