//! Health: `/healthz` and `/readyz`.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use dq_api as wire;
use dq_core::*;

use super::{ApiResult, reply};
use crate::AppState;
use crate::error::ApiError;

/// `GET /healthz` — the process answers.
pub(crate) async fn healthz() -> ApiResult {
    reply(wire::Health {
        status: "ok".into(),
        stores: Vec::new(),
        clock_offset_ms: None,
    })
}

/// `GET /readyz` — the store answers (with shards: any of them) and the
/// instance is not draining, with the health of each part of the store.
pub(crate) async fn readyz(State(st): State<AppState>) -> ApiResult {
    let health = tokio::time::timeout(Duration::from_secs(2), st.service.health()).await;
    let Ok(health) = health else {
        return Err(StoreError::Unavailable("health check timed out".into()).into());
    };
    let parts: Vec<wire::StoreHealth> = health
        .iter()
        .map(|(name, r)| wire::StoreHealth {
            name: name.clone(),
            up: r.is_ok(),
            error: r.as_ref().err().map(ToString::to_string),
        })
        .collect();
    let clock_offset_ms =
        Some(st.service.clock().now_ms() as i64 - dq_core::SystemClock.now_ms() as i64);
    if st.service.is_draining() {
        // A load balancer moves away; the store's health is still shown.
        let body = wire::NotReady {
            status: "draining".into(),
            stores: parts,
            clock_offset_ms,
            error: ApiError::draining().body().error,
        };
        return Ok((
            StatusCode::SERVICE_UNAVAILABLE,
            [(axum::http::header::RETRY_AFTER, "1")],
            Json(body),
        )
            .into_response());
    }
    if health.iter().any(|(_, r)| r.is_ok()) {
        return reply(wire::Health {
            status: "ready".into(),
            stores: parts,
            clock_offset_ms,
        });
    }
    let e = ApiError::from(
        health
            .into_iter()
            .find_map(|(_, r)| r.err())
            .unwrap_or_else(|| StoreError::Unavailable("no store".into())),
    );
    let body = wire::NotReady {
        status: "unavailable".into(),
        stores: parts,
        clock_offset_ms,
        error: e.body().error,
    };
    Ok((
        e.status,
        [(axum::http::header::RETRY_AFTER, "1")],
        Json(body),
    )
        .into_response())
}
