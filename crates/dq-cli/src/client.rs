//! The old home of the client subcommands, kept as a path: `main.rs`,
//! `ops.rs` and `transfer.rs` still name `client::ClientCmd` and
//! `client::Conn`. The subcommands now live in [`crate::commands`], the
//! connection flags in [`crate::conn`]; once those callers name them there,
//! this file goes.

pub(crate) use crate::commands::ClientCmd;
pub(crate) use crate::conn::Conn;
