//! `GET /openapi.json`: the API described as OpenAPI 3.1.
//!
//! The document is kept by hand in `openapi.json` beside this file; a test
//! checks that its operations are exactly the routes [`crate::routes::ROUTES`]
//! marks documented (every route of [`crate::app`] but the admin page's). It is
//! served with this instance's own bounds laid over it, so a client
//! generated from it (or a fuzzer) is told exactly what this instance
//! takes: the longest delay (`--max-delay`), the latest due time
//! ([`dq_core::Limits::latest_due`]: that after the end of the current UTC
//! day, so the document's bound holds until midnight UTC), the longest
//! reserve wait (`--max-wait`), the
//! partitions its store allows (1 on the embedded store), and the time
//! zones it knows.

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use serde_json::Value;

use crate::AppState;

/// The document's text, as kept in the repository.
pub(crate) const OPENAPI_JSON: &str = include_str!("openapi.json");

/// The kept document's longest delay (the default `max_delay`, ten years):
/// every field bounded by it is bounded by this instance's instead.
const DOC_MAX_DELAY_MS: u64 = 315_360_000_000;

pub(crate) async fn document(State(st): State<AppState>) -> impl IntoResponse {
    let mut doc: Value = serde_json::from_str(OPENAPI_JSON).expect("openapi.json parses");
    let max_delay = st.service.limits().max_delay_ms;
    let latest = st.service.limits().latest_due(st.service.clock().now_ms());
    bound(&mut doc, max_delay, latest);
    if let Some(w) = doc.pointer_mut("/components/schemas/ReserveRequest/properties/wait_ms") {
        w["maximum"] = st.service.limits().max_wait_ms.into();
    }
    if let Some(p) = doc.pointer_mut("/components/schemas/TopicConfigPatch/properties/partitions") {
        p["maximum"] = st.service.max_partitions().into();
    }
    // The time zones this build knows (chrono-tz's IANA names).
    if let Some(tz) = doc.pointer_mut("/components/schemas/ScheduleSpec/properties/timezone") {
        tz["enum"] = chrono_tz::TZ_VARIANTS
            .iter()
            .map(|z| Value::from(z.name()))
            .collect();
    }
    (
        [(header::CONTENT_TYPE, "application/json")],
        serde_json::to_string(&doc).expect("a document serializes"),
    )
}

/// Every `maximum` of a delay becomes `max_delay`, every `due_at_ms`'s,
/// `lease_deadline_ms`'s and `expires_at_ms`'s becomes `latest`.
fn bound(v: &mut Value, max_delay: u64, latest: u64) {
    match v {
        Value::Object(m) => {
            for (k, child) in m.iter_mut() {
                // (A reserved record is imported due at its lease deadline.)
                if (k == "due_at_ms" || k == "lease_deadline_ms" || k == "expires_at_ms")
                    && let Some(max) = child.get_mut("maximum")
                {
                    *max = latest.into();
                }
                if let Some(max) = child.get_mut("maximum")
                    && max.as_u64() == Some(DOC_MAX_DELAY_MS)
                {
                    *max = max_delay.into();
                }
                bound(child, max_delay, latest);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|c| bound(c, max_delay, latest)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_and_due_times_take_the_instance_bounds() {
        let mut doc: Value = serde_json::from_str(OPENAPI_JSON).unwrap();
        bound(&mut doc, 86_400_000, 1_700_000_000_000);
        let s = "/components/schemas/EnqueueRequest/properties";
        assert_eq!(
            doc.pointer(&format!("{s}/delay_ms/maximum")),
            Some(&86_400_000.into())
        );
        assert_eq!(
            doc.pointer(&format!("{s}/due_at_ms/maximum")),
            Some(&1_700_000_000_000u64.into())
        );
        assert_eq!(
            doc.pointer("/components/schemas/RescheduleRequest/properties/due_at_ms/maximum"),
            Some(&1_700_000_000_000u64.into())
        );
        assert!(
            !serde_json::to_string(&doc)
                .unwrap()
                .contains("315360000000")
        );
    }

    /// A pattern of the kept document.
    fn pattern(pointer: &str) -> String {
        let doc: Value = serde_json::from_str(OPENAPI_JSON).unwrap();
        doc.pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or_else(|| panic!("no pattern at {pointer}"))
            .to_string()
    }

    /// Runs `check` on strings drawn from `pattern` (a fixed seed: the same
    /// strings every run), those of at most 2048 bytes (every patterned
    /// string's maxLength here).
    fn each_match(pattern: &str, check: impl Fn(&str)) {
        use proptest::strategy::{Strategy, ValueTree};
        use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
        // Anchored at both ends (generation takes the pattern without them).
        let inner = pattern
            .strip_prefix('^')
            .and_then(|p| p.strip_suffix('$'))
            .expect("an anchored pattern");
        let strategy = proptest::string::string_regex(inner).expect("pattern compiles");
        let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &[7; 32]);
        let mut runner = TestRunner::new_with_rng(Config::default(), rng);
        for _ in 0..2000 {
            let s = strategy.new_tree(&mut runner).unwrap().current();
            if s.len() <= 2048 {
                check(&s);
            }
        }
    }

    /// The SSRF guard takes `host` of `url` (without DNS): an address it
    /// does not refuse, or a name, which no resolver reads as a number
    /// (`0000` is 0.0.0.0 to getaddrinfo).
    fn guard_takes(url: &str, host: &str) {
        match host.parse::<std::net::IpAddr>() {
            Ok(ip) => assert_eq!(
                crate::push_guard::PushGuard::default().refuse(ip),
                None,
                "{url:?}"
            ),
            Err(_) => assert!(
                host.starts_with(|c: char| c.is_ascii_alphabetic()),
                "{url:?}"
            ),
        }
    }

    /// What the pattern matches and leaves out.
    fn matches(pattern: &str, taken: &[&str], left_out: &[&str]) {
        let re = regex_automata::meta::Regex::new(pattern).unwrap();
        for url in taken {
            assert!(re.is_match(url), "{url:?} does not match");
        }
        for url in left_out {
            assert!(!re.is_match(url), "{url:?} matches");
        }
    }

    /// What the document's cron pattern matches, the server takes (a
    /// fuzzer sends such strings and expects them taken).
    #[test]
    fn every_cron_the_pattern_matches_is_taken() {
        let p = pattern("/components/schemas/ScheduleSpec/properties/cron/pattern");
        let limits = dq_core::Limits::default();
        each_match(&p, |cron| {
            let spec = dq_api::ScheduleSpec {
                topic: "t".into(),
                cron: Some(cron.to_string()),
                ..Default::default()
            };
            let s = crate::schedule::Schedule::new("s", spec, &limits)
                .unwrap_or_else(|e| panic!("{cron:?} refused: {e}"));
            s.check_fires(1_700_000_000_000)
                .unwrap_or_else(|e| panic!("{cron:?} refused: {e}"));
        });
    }

    /// The same for forwarding URLs; and what the pattern leaves out is
    /// refused.
    #[test]
    fn forwarding_urls_match_the_pattern() {
        for schema in ["RedisListDelivery", "RedisStreamDelivery"] {
            let p = pattern(&format!(
                "/components/schemas/{schema}/properties/url/pattern"
            ));
            each_match(&p, |url| {
                let t = dq_core::forward::ListTarget {
                    url: url.to_string(),
                    list: "l".into(),
                    side: Default::default(),
                    payload: Default::default(),
                };
                t.validate()
                    .unwrap_or_else(|e| panic!("{url:?} refused: {e}"));
                let (host, _) = dq_core::forward::host_port(url).expect("a host");
                guard_takes(url, host);
            });
            matches(
                &p,
                &[
                    "rediss://app:p@ss@10.1.2.3:6380/2",
                    "redis://10.0.0.5",
                    "redis://169.253.1.1:65535",
                ],
                &[
                    // A name is taken only if it resolves when the topic
                    // is set: not in the pattern.
                    "redis://localhost:6379/0",
                    "redis://0000",
                    "redis://0x0:6379",
                    "redis://0.0.0.0",
                    "redis://169.254.169.254/0",
                    "redis://224.0.0.1",
                    "redis://255.255.255.255",
                    "redis://[::]:6379",
                    "redis://host:65536",
                ],
            );
        }
    }

    /// The same for push callback URLs: the server's checks, the URL
    /// parser's, and the SSRF guard's (a name is never read as a number).
    #[test]
    fn push_urls_match_the_pattern() {
        let p = pattern("/components/schemas/PushDelivery/properties/url/pattern");
        each_match(&p, |url| {
            let cfg: dq_core::PushConfig =
                serde_json::from_value(serde_json::json!({ "url": url })).unwrap();
            cfg.validate()
                .unwrap_or_else(|e| panic!("{url:?} refused: {e}"));
            let u = reqwest::Url::parse(url).unwrap_or_else(|e| panic!("{url:?}: {e}"));
            // The parser writes an IPv4 host in dotted form.
            let host = u.host_str().unwrap_or_else(|| panic!("{url:?}: no host"));
            guard_takes(url, host);
        });
        matches(
            &p,
            &["https://hooks.example.com:8443/dq?x=1", "http://10.1.2.3/"],
            &[
                "http://0/",
                "http://0x7f.1/",
                "http://a.123/",
                "http://169.254.169.254/latest/meta-data/",
                "http://user@host/",
                "http://xn--zz/",
                "ftp://host/",
            ],
        );
    }
}
