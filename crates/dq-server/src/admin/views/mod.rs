//! What the admin pages show: one askama template struct per page (the
//! templates are in `crates/dq-server/templates/`, each extending
//! `base.html`), built from what the handlers looked up, and the text they
//! print: durations, relative times, body previews, the `done=` sentences.
//!
//! Values reach the HTML only through these templates, which escape them;
//! none is marked safe. URLs are percent-encoded here ([`enc`]) and escaped
//! again by the template, which leaves them as they are.
//!
//! The modules: `overview` (`/`), `topic` (`/admin/topics/{t}`) with the
//! parts it is made of — `job` (the job lookup), `chart`, `settings` (the
//! form) —, `schedules` (`/admin/schedules`), and `format`, the text they
//! all print. This file: the layout every page fills, and the small pages
//! (error, sign-in, confirmation).

mod chart;
mod format;
mod job;
mod overview;
mod schedules;
mod settings;
mod topic;

pub(super) use format::{enc, topic_href};
pub(super) use overview::{OverviewPage, StoreRow, TopicListing, TopicRow};
pub(super) use schedules::SchedulesPage;
pub(super) use topic::{TopicPage, TopicParts};

use askama::Template;

use super::Viewer;
use crate::error::ApiError;

/// What the layout (`base.html`) needs: the title, the viewer, whether the
/// page reloads itself.
pub(super) struct Layout<'a> {
    /// The `<title>` (before " · dq") and the heading.
    title: String,
    /// Reload every 5 s (the overview).
    refresh: bool,
    /// An admin token is configured: the viewer is signed in and may sign
    /// out; without one the page says it answers on loopback only.
    token: bool,
    /// The CSRF token every form carries (`csrf.html`).
    csrf: &'a str,
    /// The key signed in (None: the admin token, or no sign-in).
    who: Option<&'a str>,
}

impl<'a> Layout<'a> {
    fn new(v: &'a Viewer, title: impl Into<String>, refresh: bool) -> Self {
        Self {
            title: title.into(),
            refresh,
            token: v.token,
            csrf: &v.csrf,
            who: match &v.access {
                crate::auth::Access::Key(k) => Some(k.name.as_str()),
                _ => None,
            },
        }
    }
}

/// A refused action: status, code and message of the API's error.
#[derive(Template)]
#[template(path = "error.html")]
pub(super) struct ErrorPage<'a> {
    page: Layout<'a>,
    status: u16,
    code: &'static str,
    message: &'a str,
    back: &'a str,
}

impl<'a> ErrorPage<'a> {
    pub(super) fn new(v: &'a Viewer, e: &'a ApiError, back: &'a str) -> Self {
        Self {
            page: Layout::new(v, "Not done", false),
            status: e.status.as_u16(),
            code: e.code,
            message: &e.message,
            back,
        }
    }
}

/// The sign-in form.
#[derive(Template)]
#[template(path = "login.html")]
pub(super) struct LoginPage<'a> {
    page: Layout<'a>,
    /// The last try was the wrong token.
    failed: bool,
    /// Where to go once signed in.
    next: &'a str,
}

impl<'a> LoginPage<'a> {
    pub(super) fn new(v: &'a Viewer, failed: bool, next: &'a str) -> Self {
        Self {
            page: Layout::new(v, "Sign in", false),
            failed,
            next,
        }
    }
}

/// The question asked before replaying or purging dead letters; its form
/// posts the same fields again with `confirm=yes`.
#[derive(Template)]
#[template(path = "confirm.html")]
pub(super) struct ConfirmPage<'a> {
    page: Layout<'a>,
    question: String,
    /// The topic page (the "no" link).
    back: &'a str,
    /// Where the form posts.
    action: String,
    /// The fields posted again.
    fields: Vec<(&'a str, &'a str)>,
    /// What "yes" does ("replay", "delete them").
    yes: &'static str,
}

impl<'a> ConfirmPage<'a> {
    /// Asks `question`; "yes" posts `fields` again to `action` with
    /// `confirm=yes`, "no" goes back to `back`.
    pub(super) fn new(
        v: &'a Viewer,
        question: String,
        back: &'a str,
        action: String,
        fields: Vec<(&'a str, &'a str)>,
        yes: &'static str,
    ) -> Self {
        Self {
            page: Layout::new(v, "Confirm", false),
            question,
            back,
            action,
            fields,
            yes,
        }
    }
}

#[cfg(test)]
mod tests {
    use dq_core::{Delivery, JobState, PushMethod, Topic, TopicConfig, TopicStats};

    use super::*;

    #[test]
    fn values_are_escaped_and_secrets_left_out() {
        let v = Viewer {
            session: String::new(),
            csrf: "tok\"en".into(),
            token: true,
            access: crate::auth::Access::Admin,
        };
        let e = ApiError::bad_request("invalid_topic", "<script>alert(1)</script>");
        let html = ErrorPage::new(&v, &e, "/?a=1&b=\"2\"").render().unwrap();
        assert!(
            html.contains("&#60;script&#62;alert(1)&#60;/script&#62;"),
            "{html}"
        );
        assert!(!html.contains("<script>"), "{html}");
        assert!(html.contains(r#"value="tok&#34;en""#), "{html}");
        assert!(html.contains(r#"href="/?a=1&#38;b=&#34;2&#34;""#), "{html}");
        assert!(
            !html.contains("auth-notice"),
            "signed in: no loopback notice"
        );

        let cfg = TopicConfig {
            delivery: Delivery::Push(dq_core::PushConfig {
                url: "http://127.0.0.1:9/hook".into(),
                method: PushMethod::Get,
                timeout_ms: 1000,
                headers: [("X-Api-Key".to_string(), "header-value-123".to_string())]
                    .into_iter()
                    .collect(),
                concurrency: 4,
                secrets: vec!["whsec_secret-value-456".into()],
            }),
            ..Default::default()
        };
        let t = Topic::new("shop:eu".to_string()).unwrap();
        let html = TopicPage::new(
            &v,
            &t,
            TopicParts {
                stats: TopicStats::default(),
                config: cfg,
                done: Some(("saved".into(), 0)),
                job: None,
                dead: Vec::new(),
                died: None,
                state: JobState::Scheduled,
                jobs: Vec::new(),
                next: None,
                later: false,
                chart: Vec::new(),
                now: 0,
            },
        )
        .render()
        .unwrap();
        assert!(!html.contains("secret-value-456"), "{html}");
        assert!(!html.contains("header-value-123"), "{html}");
        assert!(html.contains("1 set (hidden)"), "{html}");
        assert!(html.contains("<title>Topic shop:eu · dq</title>"), "{html}");
        assert!(
            html.contains(r#"action="/admin/topics/shop%3Aeu/settings""#),
            "{html}"
        );
        assert!(html.contains(r#"<p class="flash" id="flash">Settings saved.</p>"#));
        assert!(html.contains(r#"<option selected>GET</option>"#), "{html}");
    }
}
