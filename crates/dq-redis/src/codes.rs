//! The numbers a script answers that are not data, named once: Rust decodes
//! replies by these names (`decode.rs`), and every script's prelude defines
//! them as Lua locals of the same names and values (`scripts.rs`), so a
//! script writes `{NOT_FOUND}`, never `{-1}`.
//!
//! A refusal is the first value of a status reply (`{code, …}`, or the bare
//! code in ack_batch's), where a positive first value is success; a
//! refused call changed nothing. [`NONE`] is not a refusal: it stands in a
//! reply for a number it does not have (a time, an override).

/// Declares each code once: a Rust constant, and a line of the Lua
/// prelude ([`lua`]).
macro_rules! codes {
    ($($(#[$doc:meta])* $name:ident = $value:literal;)*) => {
        $($(#[$doc])* pub(crate) const $name: i64 = $value;)*

        /// Every code as a Lua local (`local NOT_FOUND = -1`, one a line),
        /// for the prelude of every script.
        pub(crate) fn lua() -> String {
            let mut out = String::new();
            $(out.push_str(&format!("local {} = {}\n", stringify!($name), $name));)*
            out
        }
    };
}

codes! {
    /// Refused: no such job (raise_mark: no such record). `{NOT_FOUND}`.
    NOT_FOUND = -1;
    /// Refused: the job is not reserved under this lease token (another
    /// lease holds it, or it waits). `{TOKEN_MISMATCH}`.
    TOKEN_MISMATCH = -2;
    /// Refused: the job is in a state the call does not take, named after
    /// the code (`{NOT_IN_STATE, DEAD}`; ack_batch's bare code means dead).
    NOT_IN_STATE = -3;
    /// Refused (forward only): the target Redis refused the write, its
    /// error after the code (`{TARGET_REFUSED, error}`); the job stays
    /// reserved.
    TARGET_REFUSED = -4;
    /// No value where a reply has a number: no next due time (reserve and
    /// promote_due: nothing scheduled, or a topic paused until resumed), no
    /// lease deadline
    /// (requeue_expired, get), no death time (get), no retry (a job
    /// requeue_expired made dead), no override (list_jobs). Any negative
    /// number reads as none (`decode::opt_time`).
    NONE = -1;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The numbers on the wire stay what they were when they were bare
    /// literals, and the prelude defines each one by its name.
    #[test]
    fn codes_keep_their_numbers() {
        assert_eq!(
            [
                NOT_FOUND,
                TOKEN_MISMATCH,
                NOT_IN_STATE,
                TARGET_REFUSED,
                NONE
            ],
            [-1, -2, -3, -4, -1]
        );
        assert_eq!(
            lua(),
            "local NOT_FOUND = -1\nlocal TOKEN_MISMATCH = -2\nlocal NOT_IN_STATE = -3\nlocal TARGET_REFUSED = -4\nlocal NONE = -1\n"
        );
    }
}
