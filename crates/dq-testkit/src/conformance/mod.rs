//! The Store contract as scenarios. Each `pub async fn` takes a fresh, empty
//! store and checks one part of the guarantees (README, docs/design.md), with time given
//! explicitly so every expectation is exact. [`conformance_tests!`](crate::conformance_tests) turns all
//! of them into `#[tokio::test]`s for one store, but
//! `ack_and_write_elsewhere_does_nothing`, which takes the store's forward
//! sink too: each store's tests run it beside the macro.
//!
//! Every assertion here would fail if the store broke the rule it checks.
//!
//! A store runs the suite from one line in its crate's tests
//! (`tests/conformance.rs`): `dq_testkit::conformance_tests!(fresh());`,
//! where `fresh()` is an async fn giving a new empty store and whatever
//! must live as long as it; a store too costly to start per scenario runs
//! them all in one test (`in_one`, see the macro).
//!
//! The scenarios live one file per area (as River's
//! `riverdriver/riverdrivertest/`), each re-exported here, so every one is
//! `dq_testkit::conformance::<scenario>`:
//!
//! - `enqueue.rs`: batch results, idempotent enqueue and replace, generated
//!   ids, far-future jobs, dedup windows.
//! - `reserve.rs`: never early, hand-out order, one holder among
//!   concurrent callers, `reserve_job`.
//! - `leases.rs`: expiry, stale tokens refused (fencing), touch, release,
//!   and, outside the macro (it takes the store's forward sink too, which
//!   each store's tests build), `ack_and_write` elsewhere.
//! - `batches.rs`: `ack_batch`, `nack_batch`, `touch_batch`, batches over
//!   `MAX_BATCH`.
//! - `retry.rs`: backoff, retry overrides, an expired last attempt, a
//!   nack's priority.
//! - `dead.rs`: bury, replay and purge, `dead_cap`.
//! - `cancel.rs`: cancel in every state, reschedule.
//! - `expiry.rs`: jobs that expire before a hand-out (dead or dropped,
//!   counted; retries, reserve by id, reschedule, replay, rate limits and
//!   keys). Run by [`expiry_conformance_tests!`](crate::expiry_conformance_tests)
//!   on the stores that keep expiry so far (the embedded store).
//! - `get.rs`: what `get` reports, a job's counts, jobs ranked in put
//!   order (beanstalkd's), a job's trace context.
//! - `topics.rs`: settings, deletion, listing topics, stats, pause, the
//!   settings version.
//! - `rate_limit.rs`: a topic's rate limit.
//! - `keys.rs`: flow-control keys (concurrency, rate, turns).
//! - `listing.rs`: `list_scheduled`, `list_ready`, `list_jobs`.
//! - `import.rs`: `import_jobs`.
//! - `records.rs`: named records and `next_seq` (what schedules stand on).
//! - `wakes.rs`: `watch_wakes`.
//!
//! `support.rs` holds what they share (short names for topics, ids and
//! jobs; enqueue-and-reserve steps; common topic settings).

mod batches;
mod cancel;
mod dead;
mod enqueue;
mod expiry;
mod get;
mod import;
mod keys;
mod leases;
mod listing;
mod rate_limit;
mod records;
mod reserve;
mod retry;
mod support;
mod topics;
mod wakes;

pub use batches::*;
pub use cancel::*;
pub use dead::*;
pub use enqueue::*;
pub use expiry::*;
pub use get::*;
pub use import::*;
pub use keys::*;
pub use leases::*;
pub use listing::*;
pub use rate_limit::*;
pub use records::*;
pub use reserve::*;
pub use retry::*;
pub use topics::*;
pub use wakes::*;

/// A fixed starting time for scenarios (2023-11-14).
pub const T0: u64 = 1_700_000_000_000;

/// The expiry scenarios (`expiry.rs`) as `#[tokio::test]`s, for a store
/// that keeps job expiry, the same way as [`conformance_tests!`](crate::conformance_tests):
/// apart from it while not every store does (issue #51).
#[macro_export]
macro_rules! expiry_conformance_tests {
    ($make:expr) => {
        $crate::conformance_tests!(@each $make;
            expired_job_goes_dead_instead_of_out,
            expired_job_is_dropped_when_the_topic_says_so,
            topic_expiry_counts_from_the_due_time,
            expiry_holds_for_retries_reserve_by_id_and_reschedule,
            replay_clears_the_expiry,
            expiry_holds_behind_a_rate_limit_and_in_keyed_lanes,
            a_reserve_names_the_traced_jobs_it_ended
        );
    };
}

/// Instantiates every scenario as a `#[tokio::test]`. `$make` is an async
/// block returning `(store, guard)`: a fresh empty store and whatever must
/// live as long as it (a Redis server, a temp dir).
///
/// `conformance_tests!(in_one NAME, SETUP, MAKE)` instead makes one test
/// `NAME` that evaluates `SETUP` once (e.g. starts a Redis Cluster) and runs
/// every scenario in turn, each on `MAKE(&setup, scenario_name).await` — for
/// stores too costly to start per scenario (each scenario under its own key
/// prefix).
#[macro_export]
macro_rules! conformance_tests {
    (in_one $test:ident, $setup:expr, $make:expr) => {
        $crate::conformance_tests!(@list (@one $test, $setup, $make));
    };
    ($make:expr) => {
        $crate::conformance_tests!(@list (@each $make));
    };
    (@list ($($mode:tt)*)) => {
        $crate::conformance_tests!($($mode)*;
            reserve_never_early,
            enqueue_assigns_ids_when_none_given,
            reserve_by_priority_due_then_fifo,
            enqueue_batch_results_per_job,
            enqueue_is_idempotent_or_replaces,
            enqueue_batch_replacing_its_own_jobs,
            reserve_one_holder_among_concurrent_callers,
            requeue_expired_redelivers,
            errors_keep_the_last_failed_attempts,
            ack_nack_touch_refuse_a_stale_token,
            ack_refusals_and_acks_of_every_kind_of_job,
            ack_batch_results_per_job,
            nack_batch_results_per_job,
            touch_batch_results_per_job,
            batch_verbs_over_max_batch,
            touch_extends_lease,
            nack_backs_off_then_goes_dead,
            nack_retry_overrides,
            requeue_expired_last_attempt_goes_dead,
            replay_and_purge_dead,
            nack_past_dead_cap_drops_oldest,
            cancel_in_every_state,
            reschedule_only_while_waiting,
            get_reports_job_and_bodies_round_trip,
            configure_topic_and_list_topics,
            list_topics_pages_in_name_order,
            list_topics_prefix_is_exact,
            stats_count_states,
            nack_dead_goes_dead_at_once,
            release_does_not_count_the_attempt,
            enqueue_far_future,
            reserve_many_far_jobs_in_order,
            list_scheduled_earliest_first,
            next_seq_is_unique_and_increasing,
            list_ready_in_hand_out_order,
            pause_topic_hands_nothing_out,
            paused_topic_holds_hand_outs_until_resumed,
            rate_limit_hands_out_exactly_per_window,
            rate_limit_burst_and_resume,
            rate_limit_is_shared_by_concurrent_callers,
            key_concurrency_holds_per_key_without_blocking_others,
            keys_take_turns,
            key_rate_limit_per_key,
            key_concurrency_is_shared_and_changes_take_effect,
            keys_churn_limit_changes_and_partial_deletes,
            reserve_job_in_any_waiting_or_dead_state,
            watch_wakes_announces_what_became_due,
            nack_with_a_priority_keeps_it,
            get_counts_what_happened_to_a_job,
            put_order_jobs_keep_their_place,
            trace_context_goes_with_the_job,
            dedup_window_refuses_ended_ids,
            records_keep_values_and_raise_marks,
            list_jobs_pages_every_state_once,
            list_jobs_cursor_is_stable_under_writes,
            import_jobs_keeps_due_attempts_and_dead_letters,
            import_jobs_dead_past_cap_drops_oldest,
            settings_version_moves_with_settings_only
        );
    };
    (@each $make:expr; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $name() {
                let (store, _guard) = $make.await;
                $crate::conformance::$name(&store).await;
            }
        )*
    };
    (@one $test:ident, $setup:expr, $make:expr; $($name:ident),* $(,)?) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $test() {
            let setup = $setup;
            $(
                {
                    eprintln!("scenario {}", stringify!($name));
                    let store = ($make)(&setup, stringify!($name)).await;
                    $crate::conformance::$name(&store).await;
                }
            )*
        }
    };
}
