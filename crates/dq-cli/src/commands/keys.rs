//! API keys: `dq keys` (list, create, rotate, revoke), and how a new key's
//! secret is shown.

use anyhow::Result;
use clap::{Args, Subcommand};
use dq_client::wire;

use super::flags::parse_rate;
use crate::conn::Conn;
use crate::output::{bordered, confirm, print_json, rfc3339};

/// `dq keys`.
#[derive(Debug, Args)]
pub(crate) struct Keys {
    #[command(flatten)]
    conn: Conn,
    #[command(subcommand)]
    cmd: Option<KeysCmd>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum KeysCmd {
    /// List keys: name, scopes, created, last used (never a secret)
    List,
    /// Create a key and print its secret (shown this once)
    Create {
        /// The key's name: 1-64 of A-Z a-z 0-9 _ -
        #[arg(long)]
        name: String,
        /// What it may do, action:pattern, repeated: enqueue|consume|read|manage:<topic or prefix*>, or admin
        #[arg(long = "scope", required = true)]
        scopes: Vec<String>,
        /// Most requests it may make to each instance: N/WINDOW, e.g. 100/1s (429 rate_limited beyond)
        #[arg(long)]
        rate_limit: Option<String>,
        /// The rate limit's burst [default: N]
        #[arg(long, requires = "rate_limit")]
        rate_burst: Option<u64>,
    },
    /// Give a key a new secret (printed); the old one stops working
    Rotate {
        /// The key
        name: String,
    },
    /// Revoke a key: it stops working on every instance within a second (asks first, unless --yes)
    Revoke {
        /// The key
        name: String,
        /// Do not ask
        #[arg(long)]
        yes: bool,
    },
}

impl Keys {
    pub(super) async fn run(self) -> Result<()> {
        let Keys { conn, cmd } = self;
        let api = conn.client()?;
        match cmd.unwrap_or(KeysCmd::List) {
            KeysCmd::List => {
                let keys = api.keys().await?;
                if conn.json() {
                    print_json(&wire::KeyList { keys });
                } else {
                    let mut t = bordered(vec!["name", "scopes", "created", "last used"]);
                    for k in &keys {
                        t.add_row(vec![
                            k.name.clone(),
                            k.scopes.join(" "),
                            rfc3339(Some(k.created_ms)),
                            k.last_used_ms.map_or("never".into(), |t| rfc3339(Some(t))),
                        ]);
                    }
                    println!("{t}");
                }
            }
            KeysCmd::Create {
                name,
                scopes,
                rate_limit,
                rate_burst,
            } => {
                let rate = rate_limit
                    .map(|r| parse_rate(&r, rate_burst, "--rate-limit"))
                    .transpose()?;
                print_secret(&api.create_key(&name, &scopes, rate).await?, conn.json());
            }
            KeysCmd::Rotate { name } => {
                print_secret(&api.rotate_key(&name).await?, conn.json());
            }
            KeysCmd::Revoke { name, yes } => {
                confirm(
                    &format!("Revoke key {name:?}? Clients using it are refused within a second."),
                    yes,
                )?;
                api.revoke_key(&name).await?;
                if conn.json() {
                    print_json(&wire::KeyRevoked {
                        name,
                        revoked: true,
                    });
                } else {
                    println!("{name} revoked");
                }
            }
        }
        Ok(())
    }
}

/// A new key's secret: the only time it is shown.
fn print_secret(k: &wire::KeyCreated, json: bool) {
    if json {
        print_json(k);
        return;
    }
    println!("{}", k.secret);
    eprintln!(
        "key {} ({}): the line above is its secret, shown this once; send it as Authorization: Bearer (DQ_TOKEN / --token)",
        k.name,
        k.scopes.join(" ")
    );
}
