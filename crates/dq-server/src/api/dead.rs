//! Dead letters: list, replay, purge.

use axum::extract::State;
use dq_api as wire;
use dq_core::limits::MAX_BATCH;
use serde::Deserialize;

use super::{ApiResult, job, job_id, reply, topic};
use crate::AppState;
use crate::error::ApiError;
use crate::extract::{ApiPath as Path, ApiQuery as Query, JsonBody};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DeadQuery {
    offset: Option<usize>,
    limit: Option<usize>,
}

/// `GET /v1/topics/{topic}/dead?offset=&limit=` — oldest death first.
pub(crate) async fn list_dead(
    State(st): State<AppState>,
    Path(t): Path<String>,
    Query(q): Query<DeadQuery>,
) -> ApiResult {
    let t = topic(t)?;
    let jobs = st
        .service
        .list_dead(&t, q.offset.unwrap_or(0), q.limit.unwrap_or(100))
        .await?;
    reply(wire::DeadList {
        jobs: jobs.iter().map(job).collect(),
    })
}

/// `POST /v1/topics/{topic}/dead/replay` — the named dead letters, or all.
pub(crate) async fn replay_dead(
    State(st): State<AppState>,
    Path(t): Path<String>,
    JsonBody(req): JsonBody<wire::ReplayRequest>,
) -> ApiResult {
    let t = topic(t)?;
    let ids = match req.ids {
        Some(ids) => {
            if ids.len() > MAX_BATCH {
                return Err(ApiError::bad_request(
                    "invalid_batch",
                    format!("ids may hold at most {MAX_BATCH} ids"),
                ));
            }
            Some(ids.into_iter().map(job_id).collect::<Result<Vec<_>, _>>()?)
        }
        None => None,
    };
    let replayed = st.service.replay_dead(&t, ids.as_deref()).await?;
    reply(wire::Replayed { replayed })
}

/// `DELETE /v1/topics/{topic}/dead`
pub(crate) async fn purge_dead(State(st): State<AppState>, Path(t): Path<String>) -> ApiResult {
    let t = topic(t)?;
    let purged = st.service.purge_dead(&t).await?;
    reply(wire::Purged { purged })
}
