//! [`Conn`]: the flags every subcommand that talks to a running `dq serve`
//! takes (`--server`, `--token`, `--json`, `--cacert`), and the API client
//! they build.

use anyhow::{Context, Result, bail};
use clap::Args;
use dq_client::Client;

/// Where the server is and how to print: listed in each command's
/// `--help` under their own heading, apart from the command's flags.
#[derive(Debug, Args)]
#[command(next_help_heading = "Connection options")]
pub(crate) struct Conn {
    /// Base URL of a running dq server
    #[arg(
        long,
        env = "DQ_SERVER",
        default_value = "http://127.0.0.1:7070",
        global = true
    )]
    server: String,
    /// An API key (dqk_…) or the server's admin_token, sent as Authorization: Bearer
    #[arg(long, env = "DQ_TOKEN", hide_env_values = true, global = true)]
    token: Option<String>,
    /// Print the server's JSON instead of a table
    #[arg(long, global = true)]
    json: bool,
    /// Trust this CA (or self-signed) certificate, PEM, for an https:// server
    #[arg(long, env = "DQ_CACERT", global = true)]
    cacert: Option<std::path::PathBuf>,
}

impl Conn {
    /// Whether to print the server's JSON.
    pub(crate) fn json(&self) -> bool {
        self.json
    }

    /// The API client for this server and token. A server given without a
    /// scheme (`127.0.0.1:7070`) means `http://`.
    pub(crate) fn client(&self) -> Result<Client> {
        let server = self.server.trim_end_matches('/');
        let base = if server.contains("://") {
            if !(server.starts_with("http://") || server.starts_with("https://")) {
                bail!("--server {server:?}: the URL must start with http:// or https://");
            }
            server.to_string()
        } else {
            format!("http://{server}")
        };
        let mut c = match &self.cacert {
            Some(path) => {
                let pem =
                    std::fs::read(path).with_context(|| format!("--cacert {}", path.display()))?;
                Client::with_root_certificate(base, &pem)
                    .with_context(|| format!("--cacert {}", path.display()))?
            }
            None => Client::new(base).context("cannot build HTTP client")?,
        };
        if let Some(t) = &self.token {
            c = c.token(t.clone());
        }
        Ok(c)
    }
}
