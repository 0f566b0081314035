//! The admin page: server-rendered HTML with plain forms (no JavaScript, no
//! build step). Every value shown is escaped; every form carries a CSRF
//! token; who may see it is decided by [`crate::auth`]. Its routes are
//! in [`crate::routes`].
//!
//! - `/` — a page of the topics (100, name order, search by prefix) with
//!   counts, oldest overdue age, enqueue/ack rates, lateness and totals in
//!   ten columns (rates, lateness and totals grouped); the store's health;
//!   a form registering a topic.
//! - `/admin/topics/{t}` — counts (and which store parts did not answer),
//!   pause for a duration / resume, delete the topic (confirmed);
//!   - a chart of the last hour (below);
//!   - the jobs of one state (`?state=scheduled|ready|reserved|dead`, tabs
//!     with their counts), about 50 a page (`&cursor=`, the cursor of the
//!     API's `GET /v1/topics/{t}/jobs`, through the same
//!     [`Service::list_jobs`](crate::Service::list_jobs); the store's order),
//!     each with its due time, lease deadline (reserved) or death (dead),
//!     attempt of max attempts, priority, body or last error;
//!   - a job's details (`?job=ID`, linked from every list): state, due,
//!     attempts, lease deadline, died at, last error, its history counts,
//!     the limits in effect in the CLI's units (max attempts and lease: the
//!     job's own, else the topic's; retry: the topic's, as `get` does not
//!     return a job's own retry policy), and its body in full: JSON
//!     indented as sent, bytes as base64 (cut past 64 KiB); with cancel /
//!     reschedule / run now, or replay;
//!   - dead letters (newest first, `?died=1h|24h|7d`) with replay one /
//!     selected / all and purge, each confirmed on a second page before
//!     anything changes;
//!   - settings, editable, durations and retry waits in the CLI's units
//!     (`30s`, `1m,3m,5m`, `fixed:30s`, `exp:1s,2,1h`: `dq_api::units`
//!     reads and writes them for both), push callback included; a
//!     forwarding target is shown and kept.
//! - `/admin/login` — the sign-in form, when an admin token is configured.
//!
//! Actions answer with a redirect (303) back to the page and a `done=` code
//! shown as a fixed sentence; refused input (a bad form field, an unknown
//! `state=`, a cursor the store did not hand out) shows the API's error
//! message with its status and changes nothing.
//!
//! The chart of the topic page is SVG written by the template from numbers
//! only (no script, no build step): enqueues and acks per second (left
//! scale) and the oldest overdue job's age (right scale; the store's
//! figure, the same on every instance — the lateness histogram of
//! `/metrics` counts since start and cannot give a minute's figure), a
//! point a minute over the last hour. The samples come from `crate::rates`: kept
//! in this process's memory, one a minute per topic, 61 per topic for at
//! most 1000 topics, taken when the overview or the topic page renders (the
//! overview reloads itself every 5 s). So each instance draws its own
//! history, with gaps while no page of it is open, and starts empty after
//! a restart.
//!
//! The layout (CSS in `base.html`) fits 1280 px without sideways scrolling
//! and works on a phone: tables too wide for the screen scroll inside
//! their own box (`div.scroll`).
//!
//! The HTML lives in askama templates in `crates/dq-server/templates/`
//! (`base.html` is the layout every page extends; askama escapes every value
//! they print). The modules:
//!
//! - `pages` — the pages (`GET`): overview, topic page, login form.
//! - `actions` — what the forms post to; each answers with a redirect, a
//!   confirmation page or an error page.
//! - `forms` — a posted form's fields, its CSRF check, the push settings in it.
//! - `views` — one template struct per page, and the text they show
//!   (durations, relative times, body previews and indented bodies, the
//!   chart's lines, `done=` sentences).
//! - `crate::rates` (beside this module, since [`AppState`] holds it) — the
//!   enqueue/ack rates of the overview, and the per-minute history the
//!   chart draws.

pub(crate) mod actions;
mod forms;
pub(crate) mod pages;
mod views;

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};

use crate::AppState;
use crate::auth::{Access, csrf_for, page_needs_sign_in_now, signed_in};
use crate::error::ApiError;
use crate::keys::Action;

/// What every page needs to know about the viewer.
struct Viewer {
    /// The session ("" without a token, or when not signed in).
    session: String,
    /// The CSRF token forms carry.
    csrf: String,
    /// Whether the page needs a sign-in (then the viewer is signed in).
    token: bool,
    /// Who the viewer is: what the page shows and lets them change.
    access: Access,
}

impl Viewer {
    fn of(st: &AppState, headers: &HeaderMap) -> Self {
        let (session, access) = signed_in(st, headers).unwrap_or((String::new(), Access::Open));
        Self {
            csrf: csrf_for(st, &session, &access),
            session,
            token: page_needs_sign_in_now(st),
            access,
        }
    }

    /// Whether the viewer may read `topic`.
    fn reads(&self, topic: &str) -> bool {
        self.access.allows(Action::Read, topic)
    }

    /// Whether the viewer may change `topic` (settings, jobs, dead letters).
    fn manages(&self, topic: &str) -> bool {
        self.access.allows(Action::Manage, topic)
    }
}

/// A rendered page as a response (`text/html; charset=utf-8`). Rendering
/// only fails if writing to a `String` does; that is logged and answered
/// with a bare 500.
fn render(page: &impl askama::Template) -> Response {
    match page.render() {
        Ok(html) => Html(html).into_response(),
        Err(e) => {
            tracing::error!(error = %e, "admin page failed to render");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}

/// A 303 to `location`.
fn see_other(location: &str) -> Response {
    let mut res = StatusCode::SEE_OTHER.into_response();
    if let Ok(v) = HeaderValue::from_str(location) {
        res.headers_mut().insert(header::LOCATION, v);
    }
    res
}

/// A refused action: the API's error, as a page with the error's status.
fn error_page(v: &Viewer, e: &ApiError, back: &str) -> Response {
    let mut res = render(&views::ErrorPage::new(v, e, back));
    if res.status().is_success() {
        *res.status_mut() = e.status;
    }
    res
}
