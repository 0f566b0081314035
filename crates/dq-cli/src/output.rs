//! What the client commands ([`crate::commands`]) show on the terminal:
//! the server's JSON (`--json`), tables, times and bodies as the tables
//! show them, and the one question they ask ([`confirm`]).

use std::time::{Duration, UNIX_EPOCH};

use anyhow::{Result, bail};
use comfy_table::Table;

pub(crate) fn print_json<T: serde::Serialize>(v: &T) {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
}

pub(crate) fn kv_table(rows: &[(&str, String)]) -> Table {
    let mut t = Table::new();
    t.load_preset(comfy_table::presets::NOTHING);
    for (k, v) in rows {
        t.add_row(vec![k.to_string(), v.clone()]);
    }
    t
}

/// A table with borders and this header.
pub(crate) fn bordered(header: Vec<&str>) -> Table {
    let mut t = Table::new();
    t.load_preset(comfy_table::presets::UTF8_BORDERS_ONLY);
    t.set_header(header);
    t
}

pub(crate) fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "-".into(), |v| v.to_string())
}

pub(crate) fn rfc3339(ms: Option<u64>) -> String {
    match ms {
        Some(ms) if ms > 0 => {
            humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms)).to_string()
        }
        _ => "-".into(),
    }
}

/// A job's body as the tables show it: the JSON as sent, or base64 bytes.
pub(crate) fn shown_body(json: Option<&dq_client::RawJson>, base64: Option<&str>) -> String {
    match (base64, json) {
        (Some(b), _) => format!("(base64) {b}"),
        (None, Some(j)) => j.get().to_string(),
        (None, None) => "null".into(),
    }
}

/// Asks `question` on the terminal; without one (a script), refuses unless
/// the caller passed `--yes`.
pub(crate) fn confirm(question: &str, yes: bool) -> Result<()> {
    use std::io::{BufRead, IsTerminal, Write};
    if yes {
        return Ok(());
    }
    if !std::io::stdin().is_terminal() {
        bail!("{question} Not without --yes (stdin is not a terminal to ask on)");
    }
    eprint!("{question} [y/N] ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    if matches!(answer.trim(), "y" | "Y" | "yes") {
        Ok(())
    } else {
        bail!("not done")
    }
}
