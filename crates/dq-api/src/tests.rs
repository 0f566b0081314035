//! Checks across resources: every request refuses unknown fields, and the
//! untagged per-item results of all four batch routes (enqueue, ack, nack,
//! touch) read back as they were written.

use dq_core::JobState;
use serde::{Deserialize, Serialize};

use crate::*;

#[test]
fn requests_refuse_unknown_fields_and_results_tell_errors_apart() {
    assert!(serde_json::from_str::<EnqueueRequest>(r#"{"dealy_ms": 5}"#).is_err());
    assert!(serde_json::from_str::<NackRequest>(r#"{"token": "t", "x": 1}"#).is_err());
    let r: BatchResponse = serde_json::from_str(
        r#"{"results": [{"error": {"code": "invalid_id", "message": "m"}},
                {"id": "a", "created": true, "replaced": false, "due_at_ms": 5, "state": "scheduled"}]}"#,
    )
    .unwrap();
    assert!(matches!(&r.results[0], BatchResult::Error(e) if e.error.code == "invalid_id"));
    assert!(matches!(&r.results[1], BatchResult::Enqueued(e) if e.id == "a"));
}

/// Every batch route's results read back as they were written, and an
/// item that is neither (or both) an error and an answer is refused.
#[test]
fn batch_results_round_trip_and_refuse_what_is_neither() {
    fn round_trip<T>(results: Vec<T>)
    where
        T: Serialize + for<'de> Deserialize<'de> + PartialEq + std::fmt::Debug,
    {
        let text = serde_json::to_string(&results).unwrap();
        let back: Vec<T> = serde_json::from_str(&text).unwrap();
        assert_eq!(back, results, "{text}");
    }
    let error = || ErrorBody {
        error: ErrorDetail {
            code: "lease_mismatch".into(),
            message: "m".into(),
        },
    };
    round_trip(vec![
        BatchResult::Error(error()),
        BatchResult::Enqueued(Enqueued {
            id: "a".into(),
            created: true,
            replaced: false,
            deduplicated: false,
            due_at_ms: Some(5),
            state: Some(JobState::Ready),
        }),
        BatchResult::Enqueued(Enqueued {
            id: "b".into(),
            created: false,
            replaced: false,
            deduplicated: true,
            due_at_ms: None,
            state: None,
        }),
    ]);
    round_trip(vec![
        AckResult::Error(error()),
        AckResult::Acked { acked: true },
    ]);
    round_trip(vec![
        NackResult::Error(error()),
        NackResult::Nacked {
            state: JobState::Dead,
            due_at_ms: None,
        },
        NackResult::Nacked {
            state: JobState::Scheduled,
            due_at_ms: Some(9),
        },
    ]);
    round_trip(vec![
        TouchResult::Error(error()),
        TouchResult::Touched {
            lease_deadline_ms: 7,
        },
    ]);
    let err = r#"{"code": "c", "message": "m"}"#;
    for text in [
        "{}".to_string(),
        format!(r#"{{"error": {err}, "acked": true}}"#),
    ] {
        assert!(serde_json::from_str::<AckResult>(&text).is_err(), "{text}");
    }
    for text in [
        r#"{"id": "a"}"#.to_string(),
        format!(r#"{{"error": {err}, "id": "a", "created": true}}"#),
    ] {
        assert!(
            serde_json::from_str::<BatchResult>(&text).is_err(),
            "{text}"
        );
    }
    for text in [
        r#"{"due_at_ms": 5}"#.to_string(),
        format!(r#"{{"error": {err}, "state": "dead"}}"#),
    ] {
        assert!(serde_json::from_str::<NackResult>(&text).is_err(), "{text}");
    }
    assert!(serde_json::from_str::<TouchResult>("{}").is_err());
    assert!(serde_json::from_str::<TouchResult>(r#"{"error": {"code": 1}}"#).is_err());
}

/// Every setting that has a source is put in words, once each (a new
/// setting added to `TopicConfig::sources` shows in the CLI's table too).
#[test]
fn every_setting_with_a_source_is_put_in_words() {
    let cfg = dq_core::TopicConfig::default();
    let words: Vec<&str> = settings_in_words(&cfg).iter().map(|l| l.name).collect();
    let mut sorted = words.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), words.len(), "once each: {words:?}");
    assert_eq!(sorted, cfg.sources().into_keys().collect::<Vec<_>>());
}
