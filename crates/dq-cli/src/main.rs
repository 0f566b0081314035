//! `dq`: the delay-queue server and its command-line client.
//!
//! A thin shim: `serve` runs [`dq_server::Server`] over a store; every other
//! subcommand calls the HTTP API of a running server (`--server`).

mod bench;
mod client;
mod config;

use std::sync::Arc;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};

use client::ClientCmd;
use config::{LogFormat, ServeArgs, StoreChoice};

/// dq: a delay queue. Jobs go out at their due time: never early, at least once.
#[derive(Debug, Parser)]
#[command(name = "dq", version, about)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run the server (HTTP API, dispatcher)
    Serve(Box<ServeArgs>),
    /// Measure a running server: enqueue, drain, steady, storage
    Bench(bench::BenchArgs),
    #[command(flatten)]
    Client(ClientCmd),
}

fn main() -> std::process::ExitCode {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let cli = Cli::parse();
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = rt.block_on(async {
        match cli.cmd {
            Cmd::Serve(args) => serve(*args).await,
            Cmd::Bench(args) => args.run().await,
            Cmd::Client(cmd) => cmd.run().await,
        }
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn init_logs(format: LogFormat, level: &str) -> Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_new(level)
        .with_context(|| format!("log_level: {level:?} is not a valid filter"))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
    Ok(())
}

async fn serve(args: ServeArgs) -> Result<()> {
    let settings = args.resolve()?;
    init_logs(settings.log_format, &settings.log_level)?;
    let (store, what): (Arc<dyn dq_core::Store>, String) = match &settings.store {
        StoreChoice::Embedded(dir) => {
            let store = dq_embedded::EmbeddedStore::open(dir)?;
            let shown = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.clone());
            let what = format!("embedded, data in {}", shown.display());
            (Arc::new(store), what)
        }
        StoreChoice::Redis(configs) => {
            let mut shards = Vec::new();
            let mut names = Vec::new();
            for (i, config) in configs.iter().enumerate() {
                let name = if config.cluster.is_empty() {
                    dq_redis::mask_url(&config.url)
                } else {
                    let seeds: Vec<String> = config
                        .cluster
                        .iter()
                        .map(|u| dq_redis::mask_url(u))
                        .collect();
                    format!("cluster {}", seeds.join(","))
                };
                let name = if configs.len() > 1 {
                    format!("shard {i} {name}")
                } else {
                    name
                };
                shards.push((name.clone(), dq_redis::RedisStore::new(config)?));
                names.push(name);
            }
            let store = dq_redis::ShardedStore::new(shards);
            let what = format!("redis at {}", names.join("; "));
            match store.load_scripts().await {
                Ok(()) => tracing::info!(redis = %what, "Redis reachable, scripts loaded"),
                Err(e) => {
                    tracing::warn!(redis = %what, error = %e, "Redis not reachable yet; serving anyway and retrying (requests get 503 until it answers)")
                }
            }
            (Arc::new(store), what)
        }
    };
    let mut config = settings.server.clone();
    config.store_name.clone_from(&what);
    let server = dq_server::Server::new(config, store, Arc::new(dq_core::SystemClock));
    server
        .apply_topics(&settings.topics)
        .await
        .map_err(|e| anyhow::anyhow!("config file: {e}"))?;
    let listener = server
        .bind()
        .await
        .with_context(|| format!("cannot listen on {}", settings.server.listen))?;
    let addr = listener.local_addr()?;
    tracing::info!(%addr, store = %what, "dq serving HTTP API on http://{addr}; store: {what}; admin page: http://{addr}/");
    server.run(listener, shutdown_signal()).await?;
    Ok(())
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot listen for SIGTERM");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT received"),
    }
}
