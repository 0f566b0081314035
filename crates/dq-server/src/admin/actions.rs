//! What the admin forms post to. Each checks the form's CSRF token, calls
//! the [`Service`](crate::Service), and answers with a redirect (303) to
//! the page with a `done=` code, a confirmation page (replay and purge ask
//! first), or an error page with the API's error.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use dq_core::{Delivery, JobId, OnExpiry, RateLimit, Topic, TopicConfigPatch};

use super::forms::{Form, checked, push_config};
use super::views::{ConfirmPage, enc, topic_href};
use super::{Viewer, error_page, render, see_other};
use crate::AppState;
use crate::auth::{SESSION_COOKIE, SESSION_MAX_AGE_MS};
use crate::error::ApiError;

/// `POST /admin/topics` (name, mode, url): registers a topic.
pub(crate) async fn create_topic(
    State(st): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let v = Viewer::of(&st, &headers);
    let r = async {
        let f = checked(&st, &v, &body)?;
        let name = f
            .get("name")
            .ok_or_else(|| ApiError::bad_request("invalid_topic", "give the topic a name"))?;
        let patch = TopicConfigPatch {
            delivery: Some(match f.get("mode") {
                Some("push") => Delivery::Push(push_config(&f, None)?),
                _ => Delivery::Pull {},
            }),
            ..Default::default()
        };
        let t = Topic::new(name.to_string())?;
        v.access.require(crate::keys::Action::Manage, t.as_str())?;
        st.service.create_topic(&t, patch).await?;
        Ok::<_, ApiError>(t)
    }
    .await;
    match r {
        Ok(t) => see_other(&format!("{}?done=created", topic_href(t.as_str()))),
        Err(e) => error_page(&v, &e, "/"),
    }
}

/// `POST /admin/topics/{topic}/pause` (`for`: a duration such as 10m, or
/// none: until resumed; or `resume`): pauses the topic's hand-outs, through
/// every front-end and on every instance, or ends the pause (both kinds).
pub(crate) async fn pause(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path(name): Path<String>,
    body: Bytes,
) -> Response {
    let v = Viewer::of(&st, &headers);
    let base = topic_href(&name);
    let r = async {
        let f = checked(&st, &v, &body)?;
        let t = Topic::new(name.clone())?;
        st.service.known_topic(&t).await?;
        let paused = |on| TopicConfigPatch {
            paused: Some(on),
            ..Default::default()
        };
        if f.get("resume").is_some() {
            st.service.pause_topic(&t, 0).await?;
            st.service.configure_topic(&t, paused(false)).await?;
            return Ok::<_, ApiError>("resumed");
        }
        if f.get("for").is_none() {
            st.service.configure_topic(&t, paused(true)).await?;
            return Ok("paused");
        }
        let ms = f.duration_ms("for", "pause")?;
        if ms == 0 {
            return Err(ApiError::bad_request(
                "invalid_delay",
                "pause for longer than 0",
            ));
        }
        st.service.pause_topic(&t, ms).await?;
        Ok("paused")
    }
    .await;
    match r {
        Ok(done) => see_other(&format!("{base}?done={done}")),
        Err(e) => error_page(&v, &e, &base),
    }
}

/// `POST /admin/schedules/{name}/{pause|resume|delete}`; delete asks first.
pub(crate) async fn schedule_action(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path((name, action)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let v = Viewer::of(&st, &headers);
    let back = "/admin/schedules";
    let f = match checked(&st, &v, &body) {
        Ok(f) => f,
        Err(e) => return error_page(&v, &e, back),
    };
    let svc = &st.service;
    let r: Result<Result<(&str, u64), String>, ApiError> = async {
        if matches!(v.access, crate::auth::Access::Key(_)) {
            let s = svc.schedule(&name).await?;
            v.access
                .require(crate::keys::Action::Manage, &s.spec.topic)?;
        }
        match action.as_str() {
            "pause" => {
                svc.pause_schedule(&name, true).await?;
                Ok(Ok(("schedule-paused", 0)))
            }
            "resume" => {
                svc.pause_schedule(&name, false).await?;
                Ok(Ok(("schedule-resumed", 0)))
            }
            "delete" if f.get("confirm") == Some("yes") => {
                svc.delete_schedule(&name).await?;
                Ok(Ok(("schedule-deleted", 0)))
            }
            "delete" => {
                let s = svc.schedule(&name).await?;
                Ok(Err(format!(
                    "Delete schedule {} ({} on topic {})? Its jobs already enqueued (due within 2 s) still run.",
                    s.name, s.rule, s.spec.topic
                )))
            }
            other => Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "route_not_found",
                format!("no schedule action {other:?}: pause, resume or delete"),
            )),
        }
    }
    .await;
    match r {
        Ok(Ok((done, n))) => see_other(&format!("{back}?done={done}&n={n}")),
        Ok(Err(question)) => render(&ConfirmPage::new(
            &v,
            question,
            back,
            format!("{back}/{}/delete", enc(&name)),
            f.resubmitted(),
            "delete it",
        )),
        Err(e) => error_page(&v, &e, back),
    }
}

/// `POST /admin/topics/{topic}/delete`: asks first, then deletes the topic
/// and every job in it.
pub(crate) async fn delete_topic(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path(name): Path<String>,
    body: Bytes,
) -> Response {
    let v = Viewer::of(&st, &headers);
    let base = topic_href(&name);
    let f = match checked(&st, &v, &body) {
        Ok(f) => f,
        Err(e) => return error_page(&v, &e, &base),
    };
    let r = async {
        let t = Topic::new(name.clone())?;
        st.service.known_topic(&t).await?;
        if f.get("confirm") != Some("yes") {
            let s = st.service.stats(&t).await?;
            let jobs = s.scheduled + s.ready + s.reserved + s.dead;
            return Ok(Err(format!(
                "Delete topic {} and its {jobs} job(s) for good? Reserved jobs' holders will find them gone.",
                t.as_str()
            )));
        }
        Ok(Ok(st.service.delete_topic(&t).await?))
    }
    .await;
    match r {
        Ok(Ok(n)) => see_other(&format!("/?done=deleted&n={n}")),
        Ok(Err(question)) => render(&ConfirmPage::new(
            &v,
            question,
            &base,
            format!("{base}/delete"),
            f.resubmitted(),
            "delete it",
        )),
        Err(e) => error_page(&v, &e, &base),
    }
}

/// `POST /admin/topics/{topic}/settings`: durations (`lease`,
/// `default_delay`, `expires`, `rate_per`, `timeout`) and the retry policy in the
/// CLI's units (`30s`, `1m,3m,5m`, `exp:1s,2,1h`), the rest numbers.
pub(crate) async fn save_settings(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path(name): Path<String>,
    body: Bytes,
) -> Response {
    let v = Viewer::of(&st, &headers);
    let base = topic_href(&name);
    let r = async {
        let f = checked(&st, &v, &body)?;
        let t = Topic::new(name.clone())?;
        let old = st.service.known_topic(&t).await?;
        let retry = f
            .get("retry")
            .map(|r| {
                dq_api::units::parse_retry(r)
                    .map_err(|e| ApiError::bad_request("invalid_config", e))
            })
            .transpose()?;
        let old_push = match &old.delivery {
            Delivery::Push(p) => Some(p),
            _ => None,
        };
        let patch = TopicConfigPatch {
            max_attempts: f.number("max_attempts")?,
            lease_ms: f.setting_ms("lease")?,
            dead_cap: f.number("dead_cap")?,
            default_delay_ms: f.setting_ms("default_delay")?,
            partitions: f.number("partitions")?,
            dedup_ms: f.number("dedup_ms")?,
            // Kept as it is: the pause has its own buttons.
            paused: None,
            rate_limit: Some(rate_limit(&f, "rate")?),
            key_concurrency: Some(f.number("key_concurrency")?),
            key_rate_limit: Some(rate_limit(&f, "key_rate")?),
            // The form shows no expiry as an empty field: sent empty
            // beside its on_expiry, it means none.
            expires_ms: match f.setting_ms("expires")? {
                None if f.get("on_expiry").is_some() => Some(0),
                ms => ms,
            },
            on_expiry: match f.get("on_expiry") {
                None | Some("") => None,
                Some("dead") => Some(OnExpiry::Dead),
                Some("drop") => Some(OnExpiry::Drop),
                Some(other) => {
                    return Err(ApiError::bad_request(
                        "invalid_config",
                        format!("on_expiry must be dead or drop, got {other:?}"),
                    ));
                }
            },
            retry,
            delivery: Some(match f.get("mode") {
                Some("push") => Delivery::Push(push_config(&f, old_push)?),
                // A forwarding target is set through the API only; the
                // form keeps it (its URL's password is never on the page).
                Some("keep") if old.delivery.target().is_some() => old.delivery.clone(),
                _ => Delivery::Pull {},
            }),
        };
        st.service.configure_topic(&t, patch).await?;
        Ok::<_, ApiError>(())
    }
    .await;
    match r {
        Ok(()) => see_other(&format!("{base}?done=saved")),
        Err(e) => error_page(&v, &e, &base),
    }
}

/// The rate limit the settings form gives: none when its limit is empty;
/// the window and burst default to 1000 ms and the limit.
fn rate_limit(f: &Form, name: &str) -> Result<Option<RateLimit>, ApiError> {
    let Some(limit) = f.number(&format!("{name}_limit"))? else {
        return Ok(None);
    };
    Ok(Some(RateLimit {
        limit,
        per_ms: f.setting_ms(&format!("{name}_per"))?.unwrap_or(1000),
        burst: f.number(&format!("{name}_burst"))?.unwrap_or(limit),
    }))
}

/// `POST /admin/topics/{topic}/jobs/{id}/{cancel|reschedule|run}`.
pub(crate) async fn job_action(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path((name, id, action)): Path<(String, String, String)>,
    body: Bytes,
) -> Response {
    let v = Viewer::of(&st, &headers);
    let back = format!("{}?job={}", topic_href(&name), enc(&id));
    let r = async {
        let f = checked(&st, &v, &body)?;
        let t = Topic::new(name.clone())?;
        let id = JobId::new(id.clone())?;
        let now = st.service.clock().now_ms();
        match action.as_str() {
            "cancel" => {
                st.service.cancel(&t, &id).await?;
                Ok("cancelled")
            }
            "run" | "reschedule" => {
                let due = if action == "run" {
                    now
                } else {
                    let ms = f.duration_ms("delay", "delay")?;
                    st.service.limits().check_delay(ms)?;
                    now + ms
                };
                st.service.reschedule(&t, &id, due).await?;
                Ok(if action == "run" {
                    "run"
                } else {
                    "rescheduled"
                })
            }
            _ => Err(no_such_action()),
        }
    }
    .await;
    match r {
        Ok(done) => see_other(&format!("{back}&done={done}")),
        Err(e) => error_page(&v, &e, &back),
    }
}

/// `POST /admin/topics/{topic}/dead/{replay|purge}`: asks first (a page
/// with a confirm button re-posting the form), then acts.
pub(crate) async fn dead_action(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path((name, action)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let v = Viewer::of(&st, &headers);
    let base = topic_href(&name);
    let f = match checked(&st, &v, &body) {
        Ok(f) => f,
        Err(e) => return error_page(&v, &e, &base),
    };
    let r = async {
        let t = Topic::new(name.clone())?;
        let ids = f.all("ids");
        let all = f.get("scope") == Some("all");
        let question = match action.as_str() {
            "replay" if all => {
                let dead = st.service.stats(&t).await?.dead;
                format!("Replay all {dead} dead letters of {}?", t.as_str())
            }
            "replay" if ids.is_empty() => {
                return Err(ApiError::bad_request(
                    "invalid_batch",
                    "select dead letters to replay, or replay all",
                ));
            }
            "replay" if ids.len() > dq_core::limits::MAX_BATCH => {
                return Err(ApiError::bad_request(
                    "invalid_batch",
                    format!("at most {} at once", dq_core::limits::MAX_BATCH),
                ));
            }
            "replay" => format!("Replay {} dead letter(s): {}?", ids.len(), ids.join(", ")),
            "purge" => {
                let dead = st.service.stats(&t).await?.dead;
                format!("Delete all {dead} dead letters of {} for good?", t.as_str())
            }
            _ => return Err(no_such_action()),
        };
        if f.get("confirm") != Some("yes") {
            return Ok(Err(question));
        }
        let n = if action == "purge" {
            st.service.purge_dead(&t).await?
        } else if all {
            st.service.replay_dead(&t, None).await?
        } else {
            let ids = ids
                .iter()
                .map(|i| JobId::new(i.to_string()))
                .collect::<Result<Vec<_>, _>>()?;
            st.service.replay_dead(&t, Some(&ids)).await?
        };
        Ok(Ok(n))
    }
    .await;
    match r {
        Ok(Ok(n)) => {
            let done = if action == "purge" {
                "purged"
            } else {
                "replayed"
            };
            see_other(&format!("{base}?done={done}&n={n}"))
        }
        Ok(Err(question)) => render(&ConfirmPage::new(
            &v,
            question,
            &base,
            format!("{base}/dead/{action}"),
            f.resubmitted(),
            if action == "purge" {
                "delete them"
            } else {
                "replay"
            },
        )),
        Err(e) => error_page(&v, &e, &base),
    }
}

fn no_such_action() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "route_not_found", "no such action")
}

/// Only a path of this site may follow a login.
fn local_path(next: Option<&str>) -> &str {
    match next {
        Some(n) if n.starts_with('/') && !n.starts_with("//") && !n.contains('\\') => n,
        _ => "/",
    }
}

/// `POST /admin/login` (token, next): sets the session cookie.
pub(crate) async fn login(
    State(st): State<AppState>,
    peer: Result<
        axum::extract::ConnectInfo<std::net::SocketAddr>,
        <axum::extract::ConnectInfo<std::net::SocketAddr> as axum::extract::FromRequestParts<
            AppState,
        >>::Rejection,
    >,
    body: Bytes,
) -> Response {
    let f = Form::parse(&body);
    if !crate::auth::page_needs_sign_in_now(&st) {
        return see_other("/");
    }
    if !st.admin.csrf_ok("", f.get("csrf").unwrap_or("")) {
        return see_other("/admin/login?failed=1");
    }
    let next = local_path(f.get("next")).to_string();
    let now = st.service.clock().now_ms();
    let ip = peer.ok().map(|c| c.0.ip());
    if let Some(wait_s) = st.admin.failures.throttled(ip, now) {
        tracing::warn!(
            retry_in_s = wait_s,
            "admin sign-in refused: too many failures from this address"
        );
        return see_other(&format!("/admin/login?failed=1&next={}", enc(&next)));
    }
    let given = f.get("token").unwrap_or("");
    // Both checked every time, as the API does.
    let token = st.admin.token_ok(given);
    let key = if token {
        st.service.key_ring().find(given)
    } else {
        st.service.find_key(given).await
    };
    let session = match (token, key) {
        (true, _) => st.admin.new_session(now),
        (false, Some(k)) => crate::auth::key_session(&st, &k, now),
        (false, None) => {
            st.admin.failures.failed(ip, now);
            tracing::warn!("admin sign-in refused: neither the admin token nor a key");
            return see_other(&format!("/admin/login?failed=1&next={}", enc(&next)));
        }
    };
    let mut res = see_other(&next);
    let cookie = format!(
        "{SESSION_COOKIE}={session}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}",
        SESSION_MAX_AGE_MS / 1000
    );
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        res.headers_mut().insert(header::SET_COOKIE, v);
    }
    res
}

/// `POST /admin/logout`: forgets the cookie (the session itself lasts until
/// it expires or the token changes).
pub(crate) async fn logout(
    State(st): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let v = Viewer::of(&st, &headers);
    if let Err(e) = checked(&st, &v, &body) {
        return error_page(&v, &e, "/");
    }
    let mut res = see_other("/admin/login");
    res.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static("dq_session=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"),
    );
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn login_goes_back_only_to_this_site() {
        assert_eq!(local_path(Some("/admin/topics/x")), "/admin/topics/x");
        assert_eq!(local_path(Some("//evil.example/")), "/");
        assert_eq!(local_path(Some("https://evil.example/")), "/");
        assert_eq!(local_path(Some("/\\evil.example")), "/");
        assert_eq!(local_path(None), "/");
    }
}
