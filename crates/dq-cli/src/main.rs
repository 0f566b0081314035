//! `dq`: the delay-queue server and its command-line client.
//!
//! A thin shim: `serve` runs [`dq_server::Server`] over a store; `backup`
//! and `restore` work on an embedded data directory; every other
//! subcommand calls the HTTP API of a running server (`--server`), `export`
//! and `import` ([`transfer`]) included.

/// jemalloc rather than glibc's malloc: over a lifecycle the runtime's
/// workers spent much of their instructions in glibc's `malloc` and `free`
/// (`_int_malloc`, `malloc_consolidate`); jemalloc costs fewer instructions
/// and less CPU per job for a few MB more resident memory (the figures:
/// docs/performance-log.md, "The embedded lifecycle, counted").
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

mod bench;
mod commands;
mod config;
mod conn;
mod notify;
mod ops;
mod output;
mod transfer;

use std::sync::Arc;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};

use commands::ClientCmd;
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
    /// Measure a running server: enqueue, drain, steady, backlog, push, forward, storage, topics
    Bench(bench::BenchArgs),
    #[command(flatten)]
    Client(ClientCmd),
    #[command(flatten)]
    Ops(ops::OpsCmd),
    #[command(flatten)]
    Transfer(transfer::TransferCmd),
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
            Cmd::Ops(cmd) => cmd.run().await,
            Cmd::Transfer(cmd) => cmd.run().await,
        }
    });
    // Whatever is still running (a blocking call stuck on a dead peer) must
    // not keep the process alive once the work is done.
    rt.shutdown_timeout(std::time::Duration::from_secs(2));
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Logs go to stderr through a writer thread that never blocks the server:
/// when stderr cannot take more (a pipe nobody reads, a stalled terminal),
/// lines are dropped rather than stalling requests or shutdown. Colour only
/// when stderr is a terminal. Keep the guard until exit (it flushes).
fn init_logs(
    format: LogFormat,
    level: &str,
) -> Result<tracing_appender::non_blocking::WorkerGuard> {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_new(level)
        .with_context(|| format!("log_level: {level:?} is not a valid filter"))?;
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .lossy(true)
        .finish(std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(writer);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
    Ok(guard)
}

async fn serve(args: ServeArgs) -> Result<()> {
    let settings = args.resolve()?;
    let _logs = init_logs(settings.log_format, &settings.log_level)?;
    // Forwarding topics write through dq-redis's sink; over a Redis store
    // it acks and writes in one script where the target is the store's own.
    let (store, what, sink): (Arc<dyn dq_core::Store>, String, dq_redis::RedisSink) =
        match &settings.store {
            StoreChoice::Embedded(dir, options) => {
                let store = dq_embedded::EmbeddedStore::open_with(dir, options)?;
                let shown = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.clone());
                let what = format!("embedded, data in {}", shown.display());
                (Arc::new(store), what, dq_redis::RedisSink::new())
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
                let store = Arc::new(dq_redis::ShardedStore::new(shards));
                let what = format!("redis at {}", names.join("; "));
                match store.load_scripts().await {
                    Ok(()) => tracing::info!(redis = %what, "Redis reachable, scripts loaded"),
                    Err(e) => {
                        tracing::warn!(redis = %what, error = %e, "Redis not reachable yet; serving anyway and retrying (requests get 503 until it answers)")
                    }
                }
                // No script runs on a shard before its layout is accepted.
                store.hold_until_layout_checked();
                check_layout(store.clone(), settings.upgrade_layout).await?;
                let sink = dq_redis::RedisSink::over(store.clone());
                (store, what, sink)
            }
            StoreChoice::Postgres(config) => {
                let what = format!(
                    "postgres at {}, schema {}",
                    dq_postgres::mask_url(&config.url),
                    config.schema
                );
                let store =
                    dq_postgres::PgStore::new(config).with_context(|| format!("opening {what}"))?;
                open_postgres(&store, &what).await?;
                (Arc::new(store), what, dq_redis::RedisSink::new())
            }
        };
    let mut config = settings.server.clone();
    config.store_name.clone_from(&what);
    let server = dq_server::Server::new(config, store, Arc::new(dq_core::MonotonicClock::new()))
        .with_forward_sink(Arc::new(sink));
    server
        .apply_topics(&settings.topics)
        .await
        .map_err(|e| anyhow::anyhow!("config file: {e}"))?;
    server
        .apply_schedules(&settings.schedules)
        .await
        .map_err(|e| anyhow::anyhow!("config file: {e}"))?;
    let listener = server
        .bind()
        .await
        .with_context(|| format!("cannot listen on {}", settings.server.listen))?;
    let addr = listener.local_addr()?;
    let scheme = if settings.server.tls.is_some() {
        "https"
    } else {
        "http"
    };
    tracing::info!(%addr, store = %what, "dq serving HTTP API on {scheme}://{addr}; store: {what}; admin page: {scheme}://{addr}/");
    let notifier = notify::Notifier::from_env();
    let svc = server.state().service.clone();
    drain_on_sigusr1(svc.clone(), settings.server.shutdown_grace);
    {
        // Whoever asked for it (SIGUSR1 or POST /v1/admin/drain), the
        // service manager hears of a drain.
        let (svc, notifier) = (svc.clone(), notifier.clone());
        tokio::spawn(async move {
            svc.intake().cancelled().await;
            if !svc.shutdown().is_cancelled() {
                notifier.notify("STATUS=draining: no new reservations; /readyz answers 503");
            }
        });
    }
    // The listener is bound: connections queue from now on.
    notifier.notify("READY=1\nSTATUS=serving");
    let stopping = notifier.clone();
    let signal = async move {
        shutdown_signal().await;
        stopping.notify("STOPPING=1");
    };
    server.run(listener, signal).await?;
    Ok(())
}

/// SIGUSR1 drains this instance ([`dq_server::Service::drain`]): no more
/// jobs handed out, `/readyz` 503 `draining`; deliveries in flight get
/// `grace` to finish before it logs how many remain. The process keeps
/// running until SIGTERM.
fn drain_on_sigusr1(svc: Arc<dq_server::Service>, grace: std::time::Duration) {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut usr1) = signal(SignalKind::user_defined1()) else {
        tracing::warn!("cannot listen for SIGUSR1; drain with dq drain (POST /v1/admin/drain)");
        return;
    };
    tokio::spawn(async move {
        while usr1.recv().await.is_some() {
            tracing::info!("SIGUSR1 received: draining");
            let state = svc.drain(grace).await;
            if !state.drained {
                tracing::warn!(
                    in_flight = state.in_flight,
                    ?grace,
                    "still draining: deliveries in flight after the grace period"
                );
            }
        }
    });
}

/// Checks the layout version of every Redis shard before serving: a layout
/// of a newer dq stops the start, and so does an older one unless `upgrade`
/// (`--upgrade-layout`) says it may be moved on (and no other dq was seen
/// on it lately). Shards that do not answer yet are checked again every
/// second in the background, and refuse every script until then (503); one
/// whose layout this dq must not use then stops the process.
async fn check_layout(store: Arc<dq_redis::ShardedStore>, upgrade: bool) -> Result<()> {
    use dq_redis::layout::Layout;
    let report = |check: &dq_redis::layout::LayoutCheck| {
        for (name, layout) in &check.checked {
            match layout {
                Layout::Written => {
                    tracing::info!(redis = %name, version = dq_redis::layout::LAYOUT_VERSION, "recorded the Redis layout version");
                }
                Layout::Upgraded { from } => {
                    tracing::warn!(redis = %name, from, to = dq_redis::layout::LAYOUT_VERSION, "moved the Redis layout version on (--upgrade-layout); a dq older than this one must not run on it any more");
                }
                Layout::Current => {}
            }
        }
    };
    let check = store
        .check_layout(upgrade)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    report(&check);
    if check.unreachable.is_empty() {
        return Ok(());
    }
    // (With --upgrade-layout every shard had to answer: nothing is moved on
    // later.)
    tokio::spawn(async move {
        let mut logged: Option<std::time::Instant> = None;
        loop {
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            match store.check_layout(false).await {
                Ok(check) => {
                    report(&check);
                    if check.unreachable.is_empty() {
                        return;
                    }
                    // Why its calls still get 503: every 30 s.
                    if logged.is_none_or(|t| t.elapsed() >= std::time::Duration::from_secs(30)) {
                        for (name, e) in &check.unreachable {
                            tracing::warn!(redis = %name, error = %e, "Redis layout not checked yet: its calls get 503 until it is");
                        }
                        logged = Some(std::time::Instant::now());
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, "refusing this Redis layout; stopping");
                    eprintln!("error: {e}");
                    std::process::exit(1);
                }
            }
        }
    });
    Ok(())
}

/// Creates or migrates the PostgreSQL schema before serving. A database
/// that does not answer yet does not stop the start (as Redis does not):
/// dq serves, every store call answers 503 `store_unavailable` and
/// `/readyz` 503, and the schema is checked again every second in the
/// background, with a warning every 30 s, until it answers. A schema dq
/// must not use (a newer dq's, another program's) stops the process, at
/// start or when the database first answers.
async fn open_postgres(store: &dq_postgres::PgStore, what: &str) -> Result<()> {
    use dq_postgres::OpenError;
    match store.migrate().await {
        Ok(()) => {
            tracing::info!(postgres = %what, "PostgreSQL reachable, schema ready");
            return Ok(());
        }
        Err(OpenError::Unreachable(e)) => {
            tracing::warn!(postgres = %what, error = %e, "PostgreSQL not reachable yet; serving anyway and retrying every second (requests get 503 until it answers)");
        }
        Err(e) => return Err(anyhow::Error::new(e).context(format!("opening {what}"))),
    }
    let (store, what) = (store.clone(), what.to_string());
    tokio::spawn(async move {
        let mut logged = std::time::Instant::now();
        loop {
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            match store.migrate().await {
                Ok(()) => {
                    tracing::info!(postgres = %what, "PostgreSQL reachable, schema ready; serving from it now");
                    return;
                }
                Err(OpenError::Unreachable(e)) => {
                    if logged.elapsed() >= std::time::Duration::from_secs(30) {
                        tracing::warn!(postgres = %what, error = %e, "PostgreSQL still not reachable; requests get 503 until it answers");
                        logged = std::time::Instant::now();
                    }
                }
                Err(e) => {
                    tracing::error!(postgres = %what, error = %e, "refusing this PostgreSQL schema; stopping");
                    eprintln!("error: opening {what}: {e}");
                    std::process::exit(1);
                }
            }
        }
    });
    Ok(())
}

/// Completes at the first SIGTERM or SIGINT (graceful shutdown begins); a
/// second one ends the process at once, with 128 + the signal's number.
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot listen for SIGTERM/SIGINT; stop dq with SIGKILL");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received; a second SIGTERM or SIGINT stops at once"),
        _ = int.recv() => tracing::info!("SIGINT received; a second SIGTERM or SIGINT stops at once"),
    }
    tokio::spawn(async move {
        let code = tokio::select! {
            _ = term.recv() => 128 + 15,
            _ = int.recv() => 128 + 2,
        };
        tracing::warn!(
            "second signal: exiting now without finishing in-flight work (their jobs come back after their leases)"
        );
        std::process::exit(code);
    });
}
