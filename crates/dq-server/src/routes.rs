//! Every HTTP route, declared once: [`ROUTES`] gives each its method, path
//! template, handler and what [`crate::auth`] asks of a caller, and both
//! [`crate::app`]'s router and the API scopes ([`need`]) are
//! made from it. The OpenAPI document (`openapi.json`) names exactly the
//! routes marked `documented` here: `openapi_document_names_every_route`
//! (tests/http.rs) compares the served document with this table.
//!
//! The order matters only among the methods of one path: axum lists them
//! in that order in a 405's `Allow` header.

use axum::Router;
use axum::http::Method;
use axum::routing::{MethodRouter, delete, get, patch, post, put};

use crate::AppState;
use crate::admin::{actions, pages};
use crate::api;
use crate::auth::Need;
use crate::keys::Action::{Consume, Enqueue, Manage, Read};

/// What the guard of [`crate::auth`] asks of a caller of a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Auth {
    /// Nobody is asked (health, the document; `/metrics` has a token of
    /// its own).
    Open,
    /// A page of the admin page: a session, and of a key what the guard's
    /// rule for page templates says.
    Page,
    /// A `/v1` call: once auth is enforced, a key with this scope (or the
    /// admin token).
    Api(Need),
}

/// One route: `method` on `path` is answered by `handler`.
#[derive(Clone, Copy)]
pub struct Route {
    /// The method, upper case (`HEAD` is answered by `GET`'s handler).
    pub method: &'static str,
    /// The path template, as axum matches it.
    pub path: &'static str,
    /// What a caller needs.
    pub auth: Auth,
    /// Whether the OpenAPI document describes it.
    pub documented: bool,
    handler: fn() -> MethodRouter<AppState>,
}

impl std::fmt::Debug for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Route")
            .field("method", &self.method)
            .field("path", &self.path)
            .field("auth", &self.auth)
            .field("documented", &self.documented)
            .finish_non_exhaustive()
    }
}

macro_rules! method_name {
    (get) => {
        "GET"
    };
    (post) => {
        "POST"
    };
    (put) => {
        "PUT"
    };
    (patch) => {
        "PATCH"
    };
    (delete) => {
        "DELETE"
    };
}

/// `method path => handler, auth, documented;` lines as [`Route`]s.
macro_rules! table {
    ($($method:ident $path:literal => $handler:path, $auth:expr, $doc:literal;)*) => {
        &[$(Route {
            method: method_name!($method),
            path: $path,
            auth: $auth,
            documented: $doc,
            handler: || $method($handler),
        },)*]
    };
}

use Auth::{Api, Open, Page};
use Need::{Admin, Handler, Topic};

/// Every route of [`crate::app`].
pub const ROUTES: &[Route] = table! {
    get "/v1/topics" => api::topics::list_topics, Api(Handler(Read)), true;
    get "/v1/topics/{topic}" => api::topics::get_topic, Api(Topic(Read)), true;
    put "/v1/topics/{topic}" => api::topics::put_topic, Api(Topic(Manage)), true;
    delete "/v1/topics/{topic}" => api::topics::delete_topic, Api(Topic(Manage)), true;
    post "/v1/topics/{topic}/jobs" => api::jobs::enqueue, Api(Topic(Enqueue)), true;
    get "/v1/topics/{topic}/jobs" => api::export::list_jobs, Api(Topic(Read)), true;
    post "/v1/topics/{topic}/jobs:batch" => api::jobs::enqueue_batch, Api(Topic(Enqueue)), true;
    post "/v1/topics/{topic}/jobs:import" => api::export::import_jobs, Api(Topic(Manage)), true;
    get "/v1/topics/{topic}/jobs/{id}" => api::jobs::get_job, Api(Topic(Read)), true;
    delete "/v1/topics/{topic}/jobs/{id}" => api::jobs::cancel_job, Api(Topic(Manage)), true;
    patch "/v1/topics/{topic}/jobs/{id}" => api::jobs::reschedule_job, Api(Topic(Manage)), true;
    post "/v1/topics/{topic}/jobs/{id}/ack" => api::leases::ack, Api(Topic(Consume)), true;
    post "/v1/topics/{topic}/jobs/{id}/nack" => api::leases::nack, Api(Topic(Consume)), true;
    post "/v1/topics/{topic}/jobs/{id}/touch" => api::leases::touch, Api(Topic(Consume)), true;
    post "/v1/topics/{topic}/jobs/{id}/release" => api::leases::release, Api(Topic(Consume)), true;
    get "/v1/topics/{topic}/dead" => api::dead::list_dead, Api(Topic(Read)), true;
    delete "/v1/topics/{topic}/dead" => api::dead::purge_dead, Api(Topic(Manage)), true;
    post "/v1/topics/{topic}/dead/replay" => api::dead::replay_dead, Api(Topic(Manage)), true;
    get "/v1/schedules" => api::schedules::list_schedules, Api(Handler(Read)), true;
    get "/v1/schedules/{name}" => api::schedules::get_schedule, Api(Handler(Read)), true;
    put "/v1/schedules/{name}" => api::schedules::put_schedule, Api(Handler(Manage)), true;
    delete "/v1/schedules/{name}" => api::schedules::delete_schedule, Api(Handler(Manage)), true;
    post "/v1/schedules/{name}/pause" => api::schedules::pause_schedule, Api(Handler(Manage)), true;
    post "/v1/schedules/{name}/resume" => api::schedules::resume_schedule, Api(Handler(Manage)), true;
    post "/v1/reserve" => api::leases::reserve, Api(Handler(Consume)), true;
    post "/v1/ack:batch" => api::leases::ack_batch, Api(Handler(Consume)), true;
    post "/v1/nack:batch" => api::leases::nack_batch, Api(Handler(Consume)), true;
    post "/v1/touch:batch" => api::leases::touch_batch, Api(Handler(Consume)), true;
    post "/v1/admin/backup" => crate::ops::backup, Api(Admin), true;
    post "/v1/admin/drain" => crate::ops::drain, Api(Admin), true;
    get "/v1/keys" => api::keys::list_keys, Api(Admin), true;
    post "/v1/keys" => api::keys::create_key, Api(Admin), true;
    get "/v1/keys/{name}" => api::keys::get_key, Api(Admin), true;
    delete "/v1/keys/{name}" => api::keys::revoke_key, Api(Admin), true;
    post "/v1/keys/{name}/rotate" => api::keys::rotate_key, Api(Admin), true;
    get "/healthz" => api::health::healthz, Open, true;
    get "/readyz" => api::health::readyz, Open, true;
    get "/openapi.json" => crate::openapi::document, Open, true;
    get "/metrics" => crate::metrics_text, Open, true;
    get "/" => pages::overview, Page, true;
    get "/admin/login" => pages::login_page, Page, false;
    post "/admin/login" => actions::login, Page, false;
    post "/admin/logout" => actions::logout, Page, false;
    post "/admin/topics" => actions::create_topic, Page, false;
    get "/admin/schedules" => pages::schedules_page, Page, false;
    post "/admin/schedules/{name}/{action}" => actions::schedule_action, Page, false;
    get "/admin/topics/{topic}" => pages::topic_page, Page, true;
    post "/admin/topics/{topic}/settings" => actions::save_settings, Page, false;
    post "/admin/topics/{topic}/pause" => actions::pause, Page, false;
    post "/admin/topics/{topic}/delete" => actions::delete_topic, Page, false;
    post "/admin/topics/{topic}/jobs/{id}/{action}" => actions::job_action, Page, false;
    post "/admin/topics/{topic}/dead/{action}" => actions::dead_action, Page, false;
};

/// The routes of [`ROUTES`], unlayered (see [`crate::app`]).
pub(crate) fn router() -> Router<AppState> {
    ROUTES.iter().fold(Router::new(), |r, route| {
        r.route(route.path, (route.handler)())
    })
}

/// What `method` on the `/v1` route `template` needs; `None` when
/// [`ROUTES`] has no such API route.
pub fn need(method: &Method, template: &str) -> Option<Need> {
    // axum answers HEAD with the GET handler (the body dropped, its length
    // kept): it needs what GET needs.
    let method = if *method == Method::HEAD {
        "GET"
    } else {
        method.as_str()
    };
    ROUTES.iter().find_map(|r| match r.auth {
        Api(n) if r.method == method && r.path == template => Some(n),
        _ => None,
    })
}

/// The table's answers the guard of [`crate::auth`] asks for.
pub(crate) const SCOPES: crate::auth::Scopes = crate::auth::Scopes { need, is_api_route };

/// Whether `template` is the path of an API route (by any method).
pub(crate) fn is_api_route(template: &str) -> bool {
    ROUTES
        .iter()
        .any(|r| matches!(r.auth, Api(_)) && r.path == template)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each (method, path) once; every `/v1` route, and only those, has an
    /// API scope.
    #[test]
    fn each_route_once_and_every_api_route_scoped() {
        let mut seen = std::collections::BTreeSet::new();
        for r in ROUTES {
            assert!(seen.insert((r.method, r.path)), "{r:?} is listed twice");
            assert_eq!(
                matches!(r.auth, Api(_)),
                r.path.starts_with("/v1/"),
                "{r:?}"
            );
            assert_eq!(
                matches!(r.auth, Page),
                r.path == "/" || r.path.starts_with("/admin/"),
                "{r:?}"
            );
        }
    }
}
