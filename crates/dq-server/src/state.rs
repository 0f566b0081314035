//! What the HTTP front-ends (API, admin page, /metrics) share: the
//! [`Service`] and what only they need. Background loops get explicit
//! handles from [`crate::Server`], not this.

use std::sync::Arc;

use dq_core::{Clock, Limits, Store};

use crate::credentials::AdminAuth;
use crate::metrics::Metrics;
use crate::push_guard::PushGuard;
use crate::service::Service;

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    /// Every verb.
    pub service: Arc<Service>,
    /// What this process measures (lateness, HTTP durations).
    pub metrics: Arc<Metrics>,
    /// Who may use the admin page and the mutating API.
    pub admin: Arc<AdminAuth>,
    /// Enqueue/ack rates shown on the admin page.
    pub(crate) rates: Arc<crate::rates::Rates>,
    /// What the admin page calls the store (e.g. `redis redis://host:6379/0`).
    pub store_name: String,
    /// Held while a backup is written: one at a time.
    pub(crate) backup_lock: Arc<tokio::sync::Mutex<()>>,
    /// Stops the loops [`AppState::new`] started when the last copy goes.
    _loops: Option<Arc<tokio_util::sync::DropGuard>>,
}

impl AppState {
    /// State over `store` with the default push guard and no admin token,
    /// for a router served without a [`crate::Server`] (tests): called
    /// within a Tokio runtime, it starts the service's wake listener and
    /// key refresh ([`Service::spawn_loops`]) there, until the last copy of
    /// the state is dropped; outside one, nobody is ever woken.
    pub fn new(store: Arc<dyn Store>, clock: Arc<dyn Clock>, limits: Limits) -> Self {
        let mut state = Self::with_guard(store, clock, limits, PushGuard::default());
        if tokio::runtime::Handle::try_current().is_ok() {
            let stop = tokio_util::sync::CancellationToken::new();
            let tracker = tokio_util::task::TaskTracker::new();
            state
                .service
                .spawn_loops(&tracker, &stop, &crate::service::Loops::default());
            state._loops = Some(Arc::new(stop.drop_guard()));
        }
        state
    }

    /// State over `store` whose push callbacks obey `guard`; the service's
    /// loops are [`crate::Server::run`]'s to start.
    pub fn with_guard(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        limits: Limits,
        guard: PushGuard,
    ) -> Self {
        let metrics: Arc<Metrics> = Arc::default();
        Self {
            service: Arc::new(Service::new(store, clock, limits, metrics.clone(), guard)),
            metrics,
            admin: Arc::new(AdminAuth::new(None)),
            rates: Arc::default(),
            store_name: "store".into(),
            backup_lock: Arc::default(),
            _loops: None,
        }
    }
}
