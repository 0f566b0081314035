//! The Lua scripts, one file per state change, each prepended with the shared
//! helpers of `lua/common.lua` and generated lines: the reply codes
//! (`codes.rs`) and the config defaults.
//! The set is declared once (`scripts!` below): the struct, its constructor
//! and the list [`RedisStore::load_scripts`](crate::RedisStore::load_scripts)
//! loads are generated from it.
//!
//! Scripts run by SHA (EVALSHA); `redis::Script` reloads a script on NOSCRIPT
//! (after a Redis restart or `SCRIPT FLUSH`). dq sends each script as its own
//! command, never inside a pipeline, because redis-rs does not reload
//! scripts inside pipelines (redis-rs #1394). Every script is safe to
//! retry after a connection error: the worst case is a reported "exists"
//! or "not found" for work that was done.

use dq_core::TopicConfig;
use redis::Script;

use crate::codes;

const COMMON: &str = include_str!("lua/common.lua");

/// Width of a timing-wheel bucket (see `lua/common.lua`): jobs due later than
/// the next bucket wait in per-bucket lists, not in the schedule ZSET.
pub(crate) const WHEEL_MS: u64 = 60_000;

/// Declares the script set once. Each name is a field of [`Scripts`],
/// loaded from `lua/<name>.lua` by [`Scripts::new`] and listed by
/// [`Scripts::all`], so a script cannot be left out of one of them: a name
/// without its file does not compile, and a file without its name fails
/// the test `every_lua_file_is_in_the_set`. `topic` scripts run on a
/// topic's keys after the prelude (generated lines, then `lua/common.lua`);
/// `bare` ones after the reply codes only.
macro_rules! scripts {
    (
        topic: [$($(#[$topic_doc:meta])* $topic:ident),* $(,)?],
        bare: [$($(#[$bare_doc:meta])* $bare:ident),* $(,)?] $(,)?
    ) => {
        /// The loaded scripts.
        #[derive(Debug)]
        pub(crate) struct Scripts {
            $($(#[$topic_doc])* pub(crate) $topic: Script,)*
            $($(#[$bare_doc])* pub(crate) $bare: Script,)*
        }

        impl Scripts {
            /// How many scripts the set holds.
            pub(crate) const COUNT: usize =
                [$(stringify!($topic),)* $(stringify!($bare),)*].len();

            pub(crate) fn new(wake_channel: &str) -> Self {
                let prelude = prelude(wake_channel);
                let topic = |body: &str| Script::new(&format!("{prelude}\n{body}"));
                let codes = codes::lua();
                let bare = |body: &str| Script::new(&format!("{codes}{body}"));
                Self {
                    $($topic: topic(include_str!(concat!("lua/", stringify!($topic), ".lua"))),)*
                    $($bare: bare(include_str!(concat!("lua/", stringify!($bare), ".lua"))),)*
                }
            }

            /// Every script of the set, with its name (its file is
            /// `lua/<name>.lua`).
            pub(crate) fn all(&self) -> [(&'static str, &Script); Self::COUNT] {
                [
                    $((stringify!($topic), &self.$topic),)*
                    $((stringify!($bare), &self.$bare),)*
                ]
            }
        }
    };
}

scripts! {
    topic: [
        enqueue,
        reserve,
        reserve_job,
        promote_due,
        touch,
        ack,
        ack_batch,
        nack,
        nack_batch,
        touch_batch,
        release,
        requeue_expired,
        cancel,
        reschedule,
        replay_dead,
        purge_dead,
        delete_topic,
        get,
        forward,
        list_jobs,
        import_jobs,
    ],
    bare: [
        /// Not a topic script: no common.lua, one key (the records hash).
        raise_mark,
    ],
}

/// What every topic script starts with: generated lines of values Rust
/// owns (the reply codes, the topic config defaults from dq-core,
/// `WAKE_CHANNEL`, `WHEEL_MS`, `MAX_BATCH`, `ERRORS_KEPT`), then
/// `lua/common.lua`.
fn prelude(wake_channel: &str) -> String {
    let d = TopicConfig::default();
    format!(
        "{}local DEFAULTS = {{max_attempts = {}, lease_ms = {}, dead_cap = {}, default_delay_ms = {}, retry = '{}'}}\nlocal WAKE_CHANNEL = '{}'\nlocal WHEEL_MS = {}\nlocal MAX_BATCH = {}\nlocal ERRORS_KEPT = {}\n{}",
        codes::lua(),
        d.max_attempts,
        d.lease_ms,
        d.dead_cap,
        d.default_delay_ms,
        d.retry.encode(),
        wake_channel.replace('\'', ""),
        WHEEL_MS,
        dq_core::limits::MAX_BATCH,
        dq_core::ERRORS_KEPT,
        COMMON
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{RedisConfig, RedisStore};

    /// Every `lua/*.lua` but `common.lua` (the shared helpers) is a script
    /// of the set.
    #[test]
    fn every_lua_file_is_in_the_set() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/lua");
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter_map(|f| f.strip_suffix(".lua").map(str::to_string))
            .filter(|f| f != "common")
            .collect();
        files.sort();
        let scripts = Scripts::new("wake");
        let mut names: Vec<&str> = scripts.all().iter().map(|(name, _)| *name).collect();
        names.sort();
        assert_eq!(names, files);
    }

    /// `load_scripts` loads every script of the set: Redis has each one's
    /// SHA afterwards.
    #[tokio::test]
    async fn load_scripts_loads_every_script() {
        let server = dq_testkit::RedisServer::start();
        let store = RedisStore::new(&RedisConfig {
            url: server.url(),
            ..Default::default()
        })
        .unwrap();
        store.load_scripts().await.unwrap();
        let mut conn = server.connection();
        for (name, script) in store.scripts.all() {
            let exists: Vec<bool> = redis::cmd("SCRIPT")
                .arg("EXISTS")
                .arg(script.get_hash())
                .query(&mut conn)
                .unwrap();
            assert_eq!(exists, [true], "{name} is not loaded");
        }
    }
}
