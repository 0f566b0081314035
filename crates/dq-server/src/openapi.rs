//! `GET /openapi.json`: the API described as OpenAPI 3.1.
//!
//! The document is kept by hand in `openapi.json` beside this file; a test
//! checks that it names every route of [`crate::app`] and no other. It is
//! served with this instance's own bounds laid over it, so a client
//! generated from it (or a fuzzer) is told exactly what this instance
//! takes: the longest delay (`--max-delay`), the latest due time (now plus
//! that, as of the request: later is still accepted as time passes), the
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
    let latest = st.service.clock().now_ms().saturating_add(max_delay);
    bound(&mut doc, max_delay, latest);
    if let Some(p) = doc.pointer_mut("/components/schemas/TopicConfigPatch/properties/partitions") {
        p["maximum"] = st.service.store().max_partitions().into();
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

/// Every `maximum` of a delay becomes `max_delay`, every `due_at_ms`'s
/// and `lease_deadline_ms`'s becomes `latest`.
fn bound(v: &mut Value, max_delay: u64, latest: u64) {
    match v {
        Value::Object(m) => {
            for (k, child) in m.iter_mut() {
                // (A reserved record is imported due at its lease deadline.)
                if (k == "due_at_ms" || k == "lease_deadline_ms")
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
}
