//! The admin pages (`GET`): they look up what they show through the
//! [`Service`](crate::Service) and render it with a template of `views`.

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use dq_core::{JobId, JobInfo, JobState, StoreError, Topic};
use serde::Deserialize;

use super::views::{
    LoginPage, OverviewPage, StoreRow, TopicListing, TopicPage, TopicParts, TopicRow,
};
use super::{Viewer, error_page, render, see_other};
use crate::AppState;
use crate::error::ApiError;
use crate::service::Error;

/// At most this many dead letters are shown, newest first ...
const DEAD_SHOWN: usize = 100;
/// ... out of at most this many looked at.
const DEAD_LOOKED_AT: usize = 10_000;
/// Dead letters are read in pages of this many (the most `list_dead` gives).
const DEAD_PAGE: usize = 1000;
/// A page of a state's job list holds about this many jobs: store pages
/// are read until it does ...
const JOBS_PAGE: usize = 50;
/// ... or this many of them were read (a store page keeps only the jobs in
/// the state asked, so it may be short or empty while more follow) ...
const JOBS_STORE_PAGES: usize = 10;
/// ... of this many jobs each.
const JOBS_STORE_PAGE: usize = 100;

/// Topics on one page of the overview.
const OVERVIEW_PAGE: usize = 100;

/// `GET /?prefix=&cursor=|before=`: one page of the topics (100, in name
/// order, those starting with `prefix`) with their counts, rates and
/// lateness, links to the next and previous pages; store health; a form
/// registering a topic.
pub(crate) async fn overview(
    State(st): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<OverviewQuery>,
) -> Response {
    use futures::StreamExt;
    let v = Viewer::of(&st, &headers);
    let svc = &st.service;
    let now = svc.clock().now_ms();
    let health = svc.health().await;
    let up = health.iter().any(|(_, r)| r.is_ok());
    let stores = health
        .iter()
        .map(|(name, r)| {
            // A store of one part is named as configured.
            let name = if health.len() == 1 {
                &st.store_name
            } else {
                name
            };
            StoreRow::new(name, r.as_ref().err().map(ToString::to_string))
        })
        .collect();
    let prefix = q.prefix.unwrap_or_default();
    let backward = q.before.is_some();
    let cursor = q.before.as_deref().or(q.cursor.as_deref());
    let mut listing = TopicListing {
        prefix: prefix.clone(),
        error: None,
        prev: None,
        next: None,
    };
    let page = match up {
        true => match svc
            .list_topics(cursor, backward, &prefix, OVERVIEW_PAGE)
            .await
        {
            Ok(page) => page,
            Err(e) => {
                listing.error = Some(ApiError::from(e).message);
                dq_core::TopicPage::default()
            }
        },
        false => dq_core::TopicPage::default(),
    };
    let (more_before, more_after) = match backward {
        true => (page.more, true),
        false => (cursor.is_some(), page.more),
    };
    if more_before && let Some(first) = page.topics.first() {
        listing.prev = Some(overview_href(&prefix, "before", first.as_str()));
    }
    if more_after && let Some(last) = page.topics.last() {
        listing.next = Some(overview_href(&prefix, "cursor", last.as_str()));
    }
    // Counts and settings of the page's topics, a few at a time.
    let visible: Vec<Topic> = page
        .topics
        .into_iter()
        .filter(|t| v.reads(t.as_str()))
        .collect();
    let reads = visible.into_iter().map(|t| async move {
        let (stats, config) = (svc.stats(&t).await, svc.topic_config(&t).await);
        (t, stats, config)
    });
    let read: Vec<_> = futures::stream::iter(reads)
        .buffered(crate::service::READS_IN_FLIGHT)
        .collect()
        .await;
    let mut rows = Vec::with_capacity(read.len());
    for (t, stats, config) in read {
        let Ok(s) = stats else {
            continue;
        };
        let mode = match config {
            Ok(Some(c)) => c.delivery.mode(),
            _ => "?",
        };
        let rates = st
            .rates
            .observe(t.as_str(), now, s.counters.enqueued, s.counters.acked);
        let lateness = st.metrics.lateness_quantiles(t.as_str());
        st.rates.sample(t.as_str(), now, &s);
        rows.push(TopicRow::new(&t, mode, s, rates, lateness));
    }
    let done = q.done.map(|d| (d, q.n.unwrap_or(0)));
    let refused = listing.error.is_some();
    let mut res = render(&OverviewPage::new(&v, done, stores, rows, listing));
    if refused && res.status().is_success() {
        // A bad search or page link: the page says why, with the status.
        *res.status_mut() = axum::http::StatusCode::BAD_REQUEST;
    }
    res
}

/// The overview's link to the page after (`cursor`) or before (`before`)
/// `name`, keeping the search.
fn overview_href(prefix: &str, which: &str, name: &str) -> String {
    let mut q = form_urlencoded::Serializer::new(String::new());
    if !prefix.is_empty() {
        q.append_pair("prefix", prefix);
    }
    q.append_pair(which, name);
    format!("/?{}", q.finish())
}

/// `GET /admin/schedules`: every schedule with its next and last runs.
pub(crate) async fn schedules_page(
    State(st): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<OverviewQuery>,
) -> Response {
    let v = Viewer::of(&st, &headers);
    match st.service.schedules().await {
        Ok(mut list) => render(&super::views::SchedulesPage::new(
            &v,
            q.done.map(|d| (d, q.n.unwrap_or(0))),
            {
                list.retain(|s| v.reads(&s.spec.topic));
                &list
            },
        )),
        Err(e) => error_page(&v, &ApiError::from(e), "/"),
    }
}

#[derive(Debug, Deserialize)]
pub(crate) struct OverviewQuery {
    done: Option<String>,
    n: Option<u64>,
    /// The overview's search: topics whose name starts with it.
    prefix: Option<String>,
    /// The overview's page after this topic ...
    cursor: Option<String>,
    /// ... or before this one.
    before: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct TopicQuery {
    done: Option<String>,
    n: Option<u64>,
    job: Option<String>,
    died: Option<String>,
    /// The job list's state (scheduled when not given) ...
    state: Option<String>,
    /// ... and where its page starts (a cursor the last page gave).
    cursor: Option<String>,
}

/// `GET /admin/topics/{topic}?state=&cursor=&job=&died=`: counts, the jobs
/// of one state a page at a time, a job's details, dead letters, settings.
pub(crate) async fn topic_page(
    State(st): State<AppState>,
    headers: HeaderMap,
    Path(name): Path<String>,
    Query(q): Query<TopicQuery>,
) -> Response {
    let v = Viewer::of(&st, &headers);
    let page = super::views::topic_href(&name);
    match topic_parts(&st, name, q).await {
        Ok((t, parts)) => render(&TopicPage::new(&v, &t, parts)),
        // A bad state or page link: back to the topic's first page.
        Err(e) if e.status == axum::http::StatusCode::BAD_REQUEST => error_page(&v, &e, &page),
        Err(e) => error_page(&v, &e, "/"),
    }
}

async fn topic_parts(
    st: &AppState,
    name: String,
    q: TopicQuery,
) -> Result<(Topic, TopicParts), ApiError> {
    let t = Topic::new(name)?;
    let config = st.service.known_topic(&t).await?;
    let now = st.service.clock().now_ms();
    let stats = st.service.stats(&t).await?;
    let job = match q.job {
        Some(id) => {
            let found = lookup(st, &t, &id).await?;
            Some((id, found))
        }
        None => None,
    };
    let died = match q.died.as_deref() {
        Some("1h") => Some(("1h", 3_600_000)),
        Some("24h") => Some(("24h", 86_400_000)),
        Some("7d") => Some(("7d", 7 * 86_400_000)),
        _ => None,
    };
    let dead = dead_letters(st, &t, stats.dead, died.map(|(_, w)| now.saturating_sub(w))).await?;
    let state = match q.state.as_deref() {
        None | Some("") | Some("scheduled") => JobState::Scheduled,
        Some("ready") => JobState::Ready,
        Some("reserved") => JobState::Reserved,
        Some("dead") => JobState::Dead,
        Some(other) => {
            return Err(ApiError::bad_request(
                "invalid_state",
                format!("no job state {other:?}: scheduled, ready, reserved or dead"),
            ));
        }
    };
    st.rates.sample(t.as_str(), now, &stats);
    let chart = st.rates.last_hour(t.as_str(), now);
    let cursor = q.cursor.filter(|c| !c.is_empty());
    let later = cursor.is_some();
    let (jobs, next) = jobs_in_state(st, &t, state, cursor).await?;
    let parts = TopicParts {
        stats,
        config,
        done: q.done.map(|d| (d, q.n.unwrap_or(0))),
        job,
        dead,
        died: died.map(|(d, _)| d),
        state,
        jobs,
        next,
        later,
        chart,
        now,
    };
    Ok((t, parts))
}

/// A page of `t`'s jobs in `state` from `cursor`; the cursor of the page
/// after, if any. Scheduled jobs are listed soonest first and ready ones in
/// hand-out order (what runs next comes first; the cursor is how many
/// jobs earlier pages showed, so a job that moves meanwhile may be missed
/// or shown twice); reserved and dead ones through the listing the API's
/// `GET /v1/topics/{t}/jobs` uses (the store's order, which keeps a job's
/// place while it changes).
async fn jobs_in_state(
    st: &AppState,
    t: &Topic,
    state: JobState,
    mut cursor: Option<String>,
) -> Result<(Vec<JobInfo>, Option<String>), ApiError> {
    if matches!(state, JobState::Scheduled | JobState::Ready) {
        let offset = match cursor.as_deref() {
            None => 0,
            Some(c) => c.parse::<usize>().map_err(|_| {
                ApiError::bad_request(
                    "invalid_cursor",
                    format!("{c:?} is not a page of this list: start again from its first"),
                )
            })?,
        };
        // One more than a page: whether another follows.
        let mut jobs = if state == JobState::Scheduled {
            st.service.list_scheduled(t, offset, JOBS_PAGE + 1).await?
        } else {
            st.service.list_ready(t, offset, JOBS_PAGE + 1).await?
        };
        let more = jobs.len() > JOBS_PAGE;
        jobs.truncate(JOBS_PAGE);
        let next = offset + jobs.len();
        return Ok((
            jobs,
            (more && next <= crate::service::MAX_WAITING_OFFSET).then(|| next.to_string()),
        ));
    }
    let mut jobs = Vec::new();
    for _ in 0..JOBS_STORE_PAGES {
        let page = st
            .service
            .list_jobs(t, Some(state), cursor.as_deref(), JOBS_STORE_PAGE)
            .await?;
        jobs.extend(page.jobs.into_iter().map(|j| j.info));
        cursor = page.cursor;
        if cursor.is_none() || jobs.len() >= JOBS_PAGE {
            break;
        }
    }
    Ok((jobs, cursor))
}

/// The job `id` of `t`; None for an id that is not one or not there.
async fn lookup(st: &AppState, t: &Topic, id: &str) -> Result<Option<JobInfo>, ApiError> {
    if id.is_empty() {
        return Ok(None);
    }
    let Ok(id) = JobId::new(id.to_string()) else {
        return Ok(None);
    };
    match st.service.get(t, &id).await {
        Ok(v) => Ok(Some(v.job)),
        Err(Error::Store(StoreError::NotFound)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Newest deaths first (of `dead` kept), those since `since` (Unix ms) if
/// given; [`DEAD_SHOWN`] at most, [`DEAD_LOOKED_AT`] looked at.
async fn dead_letters(
    st: &AppState,
    t: &Topic,
    dead: u64,
    since: Option<u64>,
) -> Result<Vec<JobInfo>, ApiError> {
    let mut shown = Vec::new();
    let mut end = dead as usize;
    let mut looked = 0;
    'pages: while end > 0 && shown.len() < DEAD_SHOWN && looked < DEAD_LOOKED_AT {
        let start = end.saturating_sub(DEAD_PAGE);
        let mut chunk: Vec<JobInfo> = st
            .service
            .list_dead(t, start, end - start)
            .await?
            .into_iter()
            .map(|v| v.job)
            .collect();
        looked += end - start;
        end = start;
        chunk.reverse();
        for j in chunk {
            if since.is_some_and(|s| j.died_at_ms.unwrap_or(0) < s) {
                break 'pages;
            }
            if shown.len() == DEAD_SHOWN {
                break 'pages;
            }
            shown.push(j);
        }
    }
    Ok(shown)
}

#[derive(Debug, Deserialize)]
pub(crate) struct LoginQuery {
    next: Option<String>,
    failed: Option<u8>,
}

/// `GET /admin/login`.
pub(crate) async fn login_page(
    State(st): State<AppState>,
    Query(q): Query<LoginQuery>,
) -> Response {
    if !crate::auth::page_needs_sign_in_now(&st) {
        return see_other("/");
    }
    // Not signed in yet: the form's token is that of no session.
    let v = Viewer {
        session: String::new(),
        csrf: st.admin.csrf(""),
        token: false,
        access: crate::auth::Access::Open,
    };
    render(&LoginPage::new(
        &v,
        q.failed.is_some(),
        q.next.as_deref().unwrap_or("/"),
    ))
}
