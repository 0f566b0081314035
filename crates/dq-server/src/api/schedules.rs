//! Schedules: put, list, get, delete, pause, resume (each checked against
//! the key's scopes on the schedule's topic).

use axum::Json;
use axum::extract::{Extension, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use dq_api as wire;

use super::{ApiResult, reply};
use crate::AppState;
use crate::auth::Access;
use crate::extract::{ApiPath as Path, JsonBody};
use crate::keys::Action;

/// `PUT /v1/schedules/{name}` — 201 created, 200 replaced; the reply
/// shows the next slots.
pub(crate) async fn put_schedule(
    State(st): State<AppState>,
    Extension(access): Extension<Access>,
    Path(name): Path<String>,
    JsonBody(spec): JsonBody<wire::ScheduleSpec>,
) -> ApiResult {
    access.require(Action::Manage, &spec.topic)?;
    if !matches!(access, Access::Open | Access::Admin) {
        // Replacing a schedule moves its jobs off its old topic too.
        match st.service.schedule(&name).await {
            Ok(old) => access.require(Action::Manage, &old.spec.topic)?,
            Err(crate::service::Error::ScheduleNotFound(_)) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let (created, info) = st.service.put_schedule(&name, spec).await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(info)).into_response())
}

/// `GET /v1/schedules`
pub(crate) async fn list_schedules(
    State(st): State<AppState>,
    Extension(access): Extension<Access>,
) -> ApiResult {
    let mut schedules = st.service.schedules().await?;
    schedules.retain(|s| access.allows(Action::Read, &s.spec.topic));
    reply(wire::ScheduleList { schedules })
}

/// `GET /v1/schedules/{name}`
pub(crate) async fn get_schedule(
    State(st): State<AppState>,
    Extension(access): Extension<Access>,
    Path(name): Path<String>,
) -> ApiResult {
    let info = st.service.schedule(&name).await?;
    access.require(Action::Read, &info.spec.topic)?;
    reply(info)
}

/// Checks `access` may manage the schedule `name` (its topic's scope; a
/// stored schedule dq cannot read is the admin's).
async fn may_manage_schedule(st: &AppState, access: &Access, name: &str) -> ApiResult<()> {
    if matches!(access, Access::Open | Access::Admin) {
        return Ok(());
    }
    match st.service.schedule(name).await {
        Ok(info) => access.require(Action::Manage, &info.spec.topic),
        Err(crate::service::Error::ScheduleNotFound(n)) => {
            Err(crate::service::Error::ScheduleNotFound(n).into())
        }
        Err(_) => access.require(Action::Admin, ""),
    }
}

/// `DELETE /v1/schedules/{name}`
pub(crate) async fn delete_schedule(
    State(st): State<AppState>,
    Extension(access): Extension<Access>,
    Path(name): Path<String>,
) -> ApiResult {
    may_manage_schedule(&st, &access, &name).await?;
    st.service.delete_schedule(&name).await?;
    reply(wire::ScheduleDeleted {
        name,
        deleted: true,
    })
}

/// `POST /v1/schedules/{name}/pause`
pub(crate) async fn pause_schedule(
    State(st): State<AppState>,
    Extension(access): Extension<Access>,
    Path(name): Path<String>,
) -> ApiResult {
    may_manage_schedule(&st, &access, &name).await?;
    reply(st.service.pause_schedule(&name, true).await?)
}

/// `POST /v1/schedules/{name}/resume`
pub(crate) async fn resume_schedule(
    State(st): State<AppState>,
    Extension(access): Extension<Access>,
    Path(name): Path<String>,
) -> ApiResult {
    may_manage_schedule(&st, &access, &name).await?;
    reply(st.service.pause_schedule(&name, false).await?)
}
