//! `dq serve` settings: defaults, then `dq.toml` (or `--config`), then
//! `DQ_*` environment variables, then flags — each later source wins.
//! Documented in docs/configuration.md; keep the two in step.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Args;
use serde::Deserialize;

/// Flags of `dq serve`; each also reads a `DQ_*` environment variable.
#[derive(Debug, Args, Default)]
pub(crate) struct ServeArgs {
    /// TOML file with any of the keys below [default: ./dq.toml when present]
    #[arg(long, env = "DQ_CONFIG")]
    pub(crate) config: Option<PathBuf>,
    /// Address of the HTTP API [default: 127.0.0.1:7070]
    #[arg(long, env = "DQ_LISTEN")]
    pub(crate) listen: Option<String>,
    /// Also speak the beanstalkd protocol on this address, e.g. 127.0.0.1:11300 (docs/beanstalkd.md) [default: off]
    #[arg(long = "beanstalkd", env = "DQ_BEANSTALKD_LISTEN")]
    pub(crate) beanstalkd_listen: Option<String>,
    /// Largest job body the beanstalkd listener takes, in bytes [default: 65535]
    #[arg(long, env = "DQ_BEANSTALKD_MAX_JOB_SIZE")]
    pub(crate) beanstalkd_max_job_size: Option<usize>,
    /// API key (dqk_…) beanstalkd connections act as until they send `auth <key>` (docs/beanstalkd.md) [default: none]
    #[arg(long, env = "DQ_BEANSTALKD_KEY", hide_env_values = true)]
    pub(crate) beanstalkd_key: Option<String>,
    /// Speak TLS on the beanstalkd listener too, with the HTTP listener's certificate (--tls-cert, --tls-key) [default: off]
    #[arg(long, env = "DQ_BEANSTALKD_TLS")]
    pub(crate) beanstalkd_tls: Option<bool>,
    /// HTTPS: the certificate chain (PEM), with --tls-key; read again on SIGHUP [default: plain HTTP]
    #[arg(long, env = "DQ_TLS_CERT")]
    pub(crate) tls_cert: Option<PathBuf>,
    /// HTTPS: the certificate's private key (PEM)
    #[arg(long, env = "DQ_TLS_KEY")]
    pub(crate) tls_key: Option<PathBuf>,
    /// Directory of the embedded store, used when no Redis is configured [default: ./dq-data]
    #[arg(long, env = "DQ_DATA_DIR")]
    pub(crate) data_dir: Option<PathBuf>,
    /// Embedded store: bytes of disk kept free (file dq.reserve) so that a full disk can still be drained; 0 keeps none [default: 8388608]
    #[arg(long, env = "DQ_DISK_RESERVE_BYTES")]
    pub(crate) disk_reserve_bytes: Option<u64>,
    /// Use Redis instead of the embedded store: redis://[user:password@]host:port[/db], rediss:// for TLS
    #[arg(long, env = "DQ_REDIS")]
    pub(crate) redis: Option<String>,
    /// Use PostgreSQL instead of the embedded store: postgres://user:password@host:5432/db (docs/postgres.md)
    #[arg(long, env = "DQ_POSTGRES")]
    pub(crate) postgres: Option<String>,
    /// PostgreSQL: the schema dq creates and uses [default: dq]
    #[arg(long, env = "DQ_POSTGRES_SCHEMA")]
    pub(crate) postgres_schema: Option<String>,
    /// PostgreSQL: longest a statement of one store call may run, lock waits included (statement_timeout on dq's connections), e.g. 5s; 0 leaves the server's setting [default: 5s]
    #[arg(long, env = "DQ_POSTGRES_STATEMENT_TIMEOUT")]
    pub(crate) postgres_statement_timeout: Option<String>,
    /// Use several independent Redis servers (shards): their URLs, comma-separated, the same list on every dq instance
    #[arg(long, env = "DQ_REDIS_SHARDS", value_delimiter = ',')]
    pub(crate) redis_shards: Vec<String>,
    /// Use a Redis Cluster: a few of its nodes as redis://host:port, comma-separated
    #[arg(long, env = "DQ_REDIS_CLUSTER", value_delimiter = ',')]
    pub(crate) redis_cluster: Vec<String>,
    /// Redis replicas that must acknowledge each enqueue (Redis WAIT) before dq answers [default: 0]
    #[arg(long, env = "DQ_WAIT_REPLICAS")]
    pub(crate) wait_replicas: Option<u32>,
    /// Longest wait for those replicas, e.g. 1s; past it the enqueue gets 503 [default: 1s]
    #[arg(long, env = "DQ_WAIT_TIMEOUT")]
    pub(crate) wait_timeout: Option<String>,
    /// Key namespace in Redis [default: dq]
    #[arg(long, env = "DQ_REDIS_PREFIX")]
    pub(crate) redis_prefix: Option<String>,
    /// Redis: move a Redis written by an older dq (key layout 1) to this dq's layout; only once every older dq on it is stopped (docs/operations.md, Upgrades). Not read from the file [default: off]
    #[arg(long, env = "DQ_UPGRADE_LAYOUT")]
    pub(crate) upgrade_layout: bool,
    /// Longest wait for one Redis reply, e.g. 5s [default: 5s]
    #[arg(long, env = "DQ_REDIS_TIMEOUT")]
    pub(crate) redis_timeout: Option<String>,
    /// Largest job body in bytes [default: 1048576]
    #[arg(long, env = "DQ_MAX_BODY_BYTES")]
    pub(crate) max_body_bytes: Option<usize>,
    /// Largest delay, e.g. 3650d [default: 3650d]
    #[arg(long, env = "DQ_MAX_DELAY")]
    pub(crate) max_delay: Option<String>,
    /// Longest wait of a reserve, at most 30s (lower it behind a proxy that
    /// closes quiet requests sooner) [default: 30s]
    #[arg(long, env = "DQ_MAX_WAIT")]
    pub(crate) max_wait: Option<String>,
    /// Largest HTTP request body in bytes [default: 33554432]
    #[arg(long, env = "DQ_MAX_REQUEST_BYTES")]
    pub(crate) max_request_bytes: Option<usize>,
    /// Time in-flight requests get to finish at shutdown [default: 10s]
    #[arg(long, env = "DQ_SHUTDOWN_GRACE")]
    pub(crate) shutdown_grace: Option<String>,
    /// Longest wait for a request's headers, and longest keep-alive idle, e.g. 30s [default: 30s]
    #[arg(long, env = "DQ_HTTP_HEADER_TIMEOUT")]
    pub(crate) http_header_timeout: Option<String>,
    /// Longest wait for a request's body; slower gets 408 [default: 30s]
    #[arg(long, env = "DQ_HTTP_BODY_TIMEOUT")]
    pub(crate) http_body_timeout: Option<String>,
    /// Most HTTP connections open at once; beyond it new ones are closed [default: 10000]
    #[arg(long, env = "DQ_MAX_CONNECTIONS")]
    pub(crate) max_connections: Option<usize>,
    /// Longest dispatcher sleep; bounds how late leases taken through other instances are noticed to expire [default: 1s]
    #[arg(long, env = "DQ_DISPATCHER_MAX_SLEEP")]
    pub(crate) dispatcher_max_sleep: Option<String>,
    /// Refuse push callbacks to loopback and private addresses too (link-local and metadata addresses are always refused)
    #[arg(long, env = "DQ_PUSH_DENY_PRIVATE")]
    pub(crate) push_deny_private: Option<bool>,
    /// An enqueue to a topic nobody created creates it (true); with false, an HTTP enqueue or reserve naming one answers 404 topic_not_found (create topics with PUT /v1/topics/{topic} or dq topics put) [default: true]
    #[arg(long, env = "DQ_AUTO_CREATE_TOPICS")]
    pub(crate) auto_create_topics: Option<bool>,
    /// Alert webhooks: URLs that get each alert as a JSON POST (comma-separated)
    #[arg(long, env = "DQ_ALERT_WEBHOOKS", value_delimiter = ',')]
    pub(crate) alert_webhooks: Vec<String>,
    /// Alert e-mail server: smtp://[user:pass@]host:port (plain), add ?tls=required for STARTTLS, or smtps://…
    #[arg(long, env = "DQ_ALERT_SMTP_URL")]
    pub(crate) alert_smtp_url: Option<String>,
    /// Alert e-mail sender [default: dq@localhost]
    #[arg(long, env = "DQ_ALERT_EMAIL_FROM")]
    pub(crate) alert_email_from: Option<String>,
    /// Alert e-mail recipients (comma-separated)
    #[arg(long, env = "DQ_ALERT_EMAIL_TO", value_delimiter = ',')]
    pub(crate) alert_email_to: Vec<String>,
    /// Alert when a topic keeps this many dead letters [default: off]
    #[arg(long, env = "DQ_ALERT_DEAD_THRESHOLD")]
    pub(crate) alert_dead_threshold: Option<u64>,
    /// Least time between two "jobs went dead" alerts of a topic [default: 5m]
    #[arg(long, env = "DQ_ALERT_INTERVAL")]
    pub(crate) alert_interval: Option<String>,
    /// Token for the admin page and for changes through the API (Authorization: Bearer); without it the admin page answers on loopback only [default: none]
    #[arg(long, env = "DQ_ADMIN_TOKEN", hide_env_values = true)]
    pub(crate) admin_token: Option<String>,
    /// Who may call /v1: auto (open until the first API key exists) or required (a key on every call) [default: auto]
    #[arg(long, env = "DQ_AUTH")]
    pub(crate) auth: Option<String>,
    /// Token /metrics wants as Authorization: Bearer (the admin token works too) [default: none, /metrics is open]
    #[arg(long, env = "DQ_METRICS_TOKEN", hide_env_values = true)]
    pub(crate) metrics_token: Option<String>,
    /// Export the jobs' spans (enqueue, hand-outs, push attempts, ack, nack, dead) in their enqueue's trace over OTLP/HTTP (protobuf) to this receiver's base URL, e.g. http://localhost:4318 (spans go to <url>/v1/traces) [default: none, no export]
    #[arg(long, env = "DQ_OTLP_ENDPOINT")]
    pub(crate) otlp_endpoint: Option<String>,
    /// Topics that get dq_topic_* series in /metrics whatever their count: names or prefixes ending in `*`, comma-separated [default: none]
    #[arg(long, env = "DQ_METRICS_TOPICS", value_delimiter = ',')]
    pub(crate) metrics_topics: Vec<String>,
    /// Above this many topics, only those named in metrics_topics or handed out of by this instance get series of their own [default: 1000]
    #[arg(long, env = "DQ_METRICS_MAX_TOPICS")]
    pub(crate) metrics_max_topics: Option<usize>,
    /// Log format: text or json [default: text]
    #[arg(long, env = "DQ_LOG_FORMAT")]
    pub(crate) log_format: Option<String>,
    /// Log filter, e.g. info or dq_server=debug,info [default: info]
    #[arg(long, env = "DQ_LOG_LEVEL")]
    pub(crate) log_level: Option<String>,
}

/// The same keys in the TOML file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    listen: Option<String>,
    beanstalkd_listen: Option<String>,
    beanstalkd_max_job_size: Option<usize>,
    beanstalkd_key: Option<String>,
    beanstalkd_tls: Option<bool>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    data_dir: Option<PathBuf>,
    disk_reserve_bytes: Option<u64>,
    redis: Option<String>,
    postgres: Option<String>,
    postgres_schema: Option<String>,
    postgres_statement_timeout: Option<String>,
    #[serde(default)]
    redis_cluster: Vec<String>,
    #[serde(default)]
    redis_shards: Vec<String>,
    wait_replicas: Option<u32>,
    wait_timeout: Option<String>,
    redis_prefix: Option<String>,
    redis_timeout: Option<String>,
    max_body_bytes: Option<usize>,
    max_delay: Option<String>,
    max_wait: Option<String>,
    max_request_bytes: Option<usize>,
    shutdown_grace: Option<String>,
    http_header_timeout: Option<String>,
    http_body_timeout: Option<String>,
    max_connections: Option<usize>,
    dispatcher_max_sleep: Option<String>,
    push_deny_private: Option<bool>,
    auto_create_topics: Option<bool>,
    admin_token: Option<String>,
    auth: Option<String>,
    metrics_token: Option<String>,
    otlp_endpoint: Option<String>,
    #[serde(default)]
    metrics_topics: Vec<String>,
    metrics_max_topics: Option<usize>,
    #[serde(default)]
    alert_webhooks: Vec<String>,
    alert_smtp_url: Option<String>,
    alert_email_from: Option<String>,
    #[serde(default)]
    alert_email_to: Vec<String>,
    alert_dead_threshold: Option<u64>,
    alert_interval: Option<String>,
    #[serde(default)]
    topics: std::collections::BTreeMap<String, dq_core::TopicConfigPatch>,
    /// Read as TOML, then as the API's JSON (a schedule's body is JSON).
    #[serde(default)]
    schedules: std::collections::BTreeMap<String, toml::Value>,
    log_format: Option<String>,
    log_level: Option<String>,
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LogFormat {
    Text,
    Json,
}

/// Which store `dq serve` uses.
#[derive(Debug, Clone)]
pub(crate) enum StoreChoice {
    /// The embedded store in this directory (the default), opened so.
    Embedded(PathBuf, dq_embedded::Options),
    /// Redis: one server, one Cluster, or several shards (one config each).
    Redis(Vec<dq_redis::RedisConfig>),
    /// PostgreSQL: one database, one schema.
    Postgres(dq_postgres::PgConfig),
}

/// Everything resolved.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) server: dq_server::ServerConfig,
    pub(crate) store: StoreChoice,
    pub(crate) log_format: LogFormat,
    pub(crate) log_level: String,
    /// `--upgrade-layout`: a Redis of an older key layout may be moved on.
    pub(crate) upgrade_layout: bool,
    /// Topic settings from the file's `[topics.<name>]` tables.
    pub(crate) topics: std::collections::BTreeMap<String, dq_core::TopicConfigPatch>,
    /// Schedules from the file's `[schedules.<name>]` tables (the fields
    /// of `PUT /v1/schedules/{name}`).
    pub(crate) schedules: std::collections::BTreeMap<String, dq_api::ScheduleSpec>,
}

/// A `[schedules.<name>]` table as the API's schedule settings.
fn schedule_spec(name: &str, mut table: toml::Value) -> Result<dq_api::ScheduleSpec> {
    // A TOML date-time (start_at = 2026-12-01T09:00:00Z, unquoted) is the
    // API's RFC 3339 string.
    if let Some(t) = table.as_table_mut() {
        for key in ["start_at", "end_at"] {
            if let Some(toml::Value::Datetime(d)) = t.get(key) {
                let text = d.to_string();
                t.insert(key.into(), toml::Value::String(text));
            }
        }
    }
    let json = serde_json::to_string(&table).context("schedule as JSON")?;
    serde_json::from_str(&json).with_context(|| format!("[schedules.{name}]"))
}

fn duration(key: &str, text: &str) -> Result<Duration> {
    humantime::parse_duration(text)
        .with_context(|| format!("{key}: {text:?} is not a duration like 500ms, 30s, 15m, 3650d"))
}

impl ServeArgs {
    /// Merges flags/env over the file over the defaults.
    pub(crate) fn resolve(self) -> Result<Settings> {
        let file = match &self.config {
            Some(path) => read_file(path)?,
            None => {
                let default = PathBuf::from("dq.toml");
                if default.exists() {
                    read_file(&default)?
                } else {
                    FileConfig::default()
                }
            }
        };
        let mut server = dq_server::ServerConfig::default();
        let mut redis = dq_redis::RedisConfig::default();
        let redis_url = self.redis.or(file.redis);
        let postgres_url = self.postgres.or(file.postgres);
        let postgres_schema = self.postgres_schema.or(file.postgres_schema);
        let postgres_statement_timeout = self
            .postgres_statement_timeout
            .or(file.postgres_statement_timeout)
            .map(|t| duration("postgres_statement_timeout", &t))
            .transpose()?;
        let data_dir = self.data_dir.or(file.data_dir);
        let disk_reserve = self.disk_reserve_bytes.or(file.disk_reserve_bytes);
        if let Some(l) = self.listen.or(file.listen) {
            server.listen = l
                .parse::<SocketAddr>()
                .with_context(|| format!("listen: {l:?} is not an address like 127.0.0.1:7070"))?;
        }
        if let Some(p) = self.redis_prefix.or(file.redis_prefix) {
            if p.is_empty()
                || p.len() > 64
                || !p
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-'))
            {
                bail!("redis_prefix: {p:?} must be 1-64 characters of A-Z a-z 0-9 . _ : -");
            }
            redis.prefix = p;
        }
        if let Some(n) = self.wait_replicas.or(file.wait_replicas) {
            if n > 16 {
                bail!("wait_replicas: {n} is more than 16");
            }
            redis.wait_replicas = n;
        }
        if let Some(t) = self.wait_timeout.or(file.wait_timeout) {
            redis.wait_timeout = duration("wait_timeout", &t)?;
            if redis.wait_timeout.is_zero() {
                bail!("wait_timeout: must be more than 0 (0 would make WAIT block forever)");
            }
        }
        if let Some(t) = self.redis_timeout.or(file.redis_timeout) {
            redis.response_timeout = duration("redis_timeout", &t)?;
        }
        let bs_size = self
            .beanstalkd_max_job_size
            .or(file.beanstalkd_max_job_size);
        if let Some(l) = self.beanstalkd_listen.or(file.beanstalkd_listen) {
            let listen = l.parse().with_context(|| {
                format!("beanstalkd_listen: {l:?} is not an address like 127.0.0.1:11300")
            })?;
            let max_job_size = bs_size.unwrap_or(65_535);
            if max_job_size == 0 {
                bail!("beanstalkd_max_job_size: must be at least 1");
            }
            server.beanstalkd = Some(dq_server::beanstalkd::BeanstalkdConfig {
                listen,
                max_job_size,
                key: self.beanstalkd_key.or(file.beanstalkd_key),
                auth_required: false,
                tls: self.beanstalkd_tls.or(file.beanstalkd_tls).unwrap_or(false),
            });
        } else if bs_size.is_some() {
            bail!("beanstalkd_max_job_size is set but beanstalkd_listen (--beanstalkd) is not");
        }
        match (
            self.tls_cert.or(file.tls_cert),
            self.tls_key.or(file.tls_key),
        ) {
            (Some(cert), Some(key)) => {
                server.tls = Some(dq_server::tls::TlsFiles { cert, key });
            }
            (None, None) => {}
            _ => bail!("tls_cert and tls_key go together: give both (or neither, for plain HTTP)"),
        }
        if let Some(b) = self.max_body_bytes.or(file.max_body_bytes) {
            server.limits.max_body_bytes = b;
        }
        if let Some(d) = self.max_delay.or(file.max_delay) {
            server.limits.max_delay_ms = duration("max_delay", &d)?.as_millis() as u64;
        }
        if let Some(w) = self.max_wait.or(file.max_wait) {
            let ms = duration("max_wait", &w)?.as_millis() as u64;
            if ms > dq_core::limits::MAX_WAIT_MS {
                bail!("max_wait must be at most 30s, got {w:?}");
            }
            server.limits.max_wait_ms = ms;
        }
        if let Some(b) = self.max_request_bytes.or(file.max_request_bytes) {
            server.max_request_bytes = b;
        }
        if let Some(g) = self.shutdown_grace.or(file.shutdown_grace) {
            server.shutdown_grace = duration("shutdown_grace", &g)?;
        }
        if let Some(t) = self.http_header_timeout.or(file.http_header_timeout) {
            server.http.header_timeout = duration("http_header_timeout", &t)?;
            if server.http.header_timeout.is_zero() {
                bail!("http_header_timeout: must be more than 0");
            }
        }
        if let Some(t) = self.http_body_timeout.or(file.http_body_timeout) {
            server.http.body_timeout = duration("http_body_timeout", &t)?;
            if server.http.body_timeout.is_zero() {
                bail!("http_body_timeout: must be more than 0");
            }
        }
        if let Some(n) = self.max_connections.or(file.max_connections) {
            if n == 0 {
                bail!("max_connections: must be at least 1");
            }
            server.http.max_connections = n;
        }
        if let Some(s) = self.dispatcher_max_sleep.or(file.dispatcher_max_sleep) {
            server.dispatcher_max_sleep = duration("dispatcher_max_sleep", &s)?;
            if server.dispatcher_max_sleep.is_zero() {
                bail!("dispatcher_max_sleep: must be more than 0");
            }
        }
        if let Some(d) = self.push_deny_private.or(file.push_deny_private) {
            server.push_deny_private = d;
        }
        if let Some(a) = self.auto_create_topics.or(file.auto_create_topics) {
            server.auto_create_topics = a;
        }
        if let Some(t) = self.admin_token.or(file.admin_token) {
            if t.len() < 16 || t.chars().any(|c| c.is_whitespace() || c.is_control()) {
                bail!(
                    "admin_token: must be at least 16 characters without spaces (e.g. from `openssl rand -hex 24`)"
                );
            }
            server.admin_token = Some(t);
        }
        match self.auth.or(file.auth).as_deref() {
            None | Some("auto") => server.auth_required = false,
            Some("required") => server.auth_required = true,
            Some(other) => bail!("auth: must be auto or required, got {other:?}"),
        }
        if let Some(b) = &mut server.beanstalkd {
            b.auth_required = server.auth_required;
            if b.tls && server.tls.is_none() {
                bail!(
                    "beanstalkd_tls: needs tls_cert and tls_key (the beanstalkd listener uses the HTTP listener's certificate)"
                );
            }
        }
        if let Some(t) = self.metrics_token.or(file.metrics_token) {
            if t.len() < 16 || t.chars().any(|c| c.is_whitespace() || c.is_control()) {
                bail!(
                    "metrics_token: must be at least 16 characters without spaces (e.g. from `openssl rand -hex 24`)"
                );
            }
            server.metrics_token = Some(t);
        }
        if let Some(url) = self.otlp_endpoint.or(file.otlp_endpoint) {
            let rest = url
                .strip_prefix("http://")
                .or_else(|| url.strip_prefix("https://"));
            if rest.is_none_or(|r| r.is_empty() || r.starts_with('/')) {
                bail!(
                    "otlp_endpoint: must be an http:// or https:// URL of an OTLP/HTTP receiver, e.g. http://localhost:4318, got {url:?}"
                );
            }
            server.otlp_endpoint = Some(url);
        }
        let patterns = if self.metrics_topics.is_empty() {
            file.metrics_topics
        } else {
            self.metrics_topics
        };
        for p in patterns {
            let pattern = dq_server::keys::TopicPattern::parse(&p)
                .map_err(|m| anyhow::anyhow!("metrics_topics: {p:?}: {m}"))?;
            server.metrics_series.topics.push(pattern);
        }
        if let Some(n) = self.metrics_max_topics.or(file.metrics_max_topics) {
            server.metrics_series.max_topics = n;
        }
        let a = &mut server.alerts;
        a.webhooks = if self.alert_webhooks.is_empty() {
            file.alert_webhooks
        } else {
            self.alert_webhooks
        };
        a.smtp_url = self.alert_smtp_url.or(file.alert_smtp_url);
        if let Some(f) = self.alert_email_from.or(file.alert_email_from) {
            a.email_from = f;
        }
        a.email_to = if self.alert_email_to.is_empty() {
            file.alert_email_to
        } else {
            self.alert_email_to
        };
        a.dead_threshold = self.alert_dead_threshold.or(file.alert_dead_threshold);
        if let Some(i) = self.alert_interval.or(file.alert_interval) {
            a.min_interval = duration("alert_interval", &i)?;
        }
        if a.smtp_url.is_some() && a.email_to.is_empty() {
            bail!("alert_smtp_url is set but alert_email_to names no recipient");
        }
        let log_format = match self.log_format.or(file.log_format).as_deref() {
            None | Some("text") => LogFormat::Text,
            Some("json") => LogFormat::Json,
            Some(other) => bail!("log_format: {other:?} is neither text nor json"),
        };
        let log_level = self
            .log_level
            .or(file.log_level)
            .unwrap_or_else(|| "info".into());
        if redis.wait_replicas > 0 && redis.wait_timeout >= redis.response_timeout {
            bail!("wait_timeout must be shorter than redis_timeout (a WAIT reply comes after it)");
        }
        let cluster = if self.redis_cluster.is_empty() {
            file.redis_cluster
        } else {
            self.redis_cluster
        };
        let shards = if self.redis_shards.is_empty() {
            file.redis_shards
        } else {
            self.redis_shards
        };
        let chosen = [
            redis_url.is_some(),
            postgres_url.is_some(),
            !cluster.is_empty(),
            !shards.is_empty(),
            data_dir.is_some(),
        ]
        .iter()
        .filter(|c| **c)
        .count();
        if chosen > 1 {
            bail!(
                "choose one store: redis, redis_cluster, redis_shards, postgres or data_dir (the embedded store) are given together"
            );
        }
        let check = |key: &str, urls: &[String]| -> Result<()> {
            for url in urls {
                if !url.starts_with("redis://") && !url.starts_with("rediss://") {
                    bail!("{key}: {url:?} is not a redis:// or rediss:// URL");
                }
            }
            let distinct: std::collections::HashSet<&String> = urls.iter().collect();
            if distinct.len() != urls.len() {
                bail!("{key}: a URL is listed twice");
            }
            Ok(())
        };
        if postgres_schema.is_some() && postgres_url.is_none() {
            bail!("postgres_schema applies to the PostgreSQL store (postgres)");
        }
        if postgres_statement_timeout.is_some() && postgres_url.is_none() {
            bail!("postgres_statement_timeout applies to the PostgreSQL store (postgres)");
        }
        let store = if let Some(url) = redis_url {
            redis.url = url;
            StoreChoice::Redis(vec![redis])
        } else if let Some(url) = postgres_url {
            if !url.starts_with("postgres://") && !url.starts_with("postgresql://") {
                bail!(
                    "postgres: {:?} is not a postgres:// or postgresql:// URL",
                    dq_postgres::mask_url(&url)
                );
            }
            if redis.wait_replicas > 0 {
                bail!("wait_replicas applies to Redis; PostgreSQL replicates by its own settings");
            }
            StoreChoice::Postgres(dq_postgres::PgConfig {
                url,
                schema: postgres_schema.unwrap_or_else(|| "dq".into()),
                statement_timeout: match postgres_statement_timeout {
                    None => Some(dq_postgres::DEFAULT_STATEMENT_TIMEOUT),
                    Some(t) if t.is_zero() => None,
                    Some(t) => Some(t),
                },
                ..Default::default()
            })
        } else if !cluster.is_empty() {
            check("redis_cluster", &cluster)?;
            redis.cluster = cluster;
            StoreChoice::Redis(vec![redis])
        } else if !shards.is_empty() {
            check("redis_shards", &shards)?;
            StoreChoice::Redis(
                shards
                    .into_iter()
                    .map(|url| dq_redis::RedisConfig {
                        url,
                        ..redis.clone()
                    })
                    .collect(),
            )
        } else {
            if redis.wait_replicas > 0 {
                bail!("wait_replicas applies to Redis; the embedded store is on one disk");
            }
            let options = dq_embedded::Options {
                disk_reserve_bytes: disk_reserve.unwrap_or(dq_embedded::DEFAULT_DISK_RESERVE_BYTES),
                ..Default::default()
            };
            StoreChoice::Embedded(
                data_dir.unwrap_or_else(|| PathBuf::from("dq-data")),
                options,
            )
        };
        if disk_reserve.is_some() && !matches!(store, StoreChoice::Embedded(..)) {
            bail!(
                "disk_reserve_bytes applies to the embedded store (data_dir), not to Redis or PostgreSQL"
            );
        }
        let schedules = file
            .schedules
            .into_iter()
            .map(|(name, table)| Ok((name.clone(), schedule_spec(&name, table)?)))
            .collect::<Result<_>>()?;
        Ok(Settings {
            upgrade_layout: self.upgrade_layout,
            topics: file.topics,
            schedules,
            server,
            store,
            log_format,
            log_level,
        })
    }
}

fn read_file(path: &PathBuf) -> Result<FileConfig> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read config file {}", path.display()))?;
    toml::from_str(&text).with_context(|| format!("invalid config file {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults() {
        let s = ServeArgs {
            config: Some(PathBuf::from("/dev/null")),
            ..Default::default()
        }
        .resolve()
        .unwrap();
        assert_eq!(s.server.listen.to_string(), "127.0.0.1:7070");
        assert!(
            matches!(&s.store, StoreChoice::Embedded(d, _) if d == &PathBuf::from("dq-data")),
            "embedded in ./dq-data by default"
        );
        assert_eq!(s.log_format, LogFormat::Text);
    }

    #[test]
    fn flags_win_over_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dq.toml");
        std::fs::write(
            &path,
            "listen = \"127.0.0.1:9000\"\nredis = \"redis://file:1\"\nmax_delay = \"1d\"\nauto_create_topics = false\n",
        )
        .unwrap();
        let s = ServeArgs {
            config: Some(path.clone()),
            redis: Some("redis://flag:2".into()),
            ..Default::default()
        }
        .resolve()
        .unwrap();
        assert_eq!(s.server.listen.to_string(), "127.0.0.1:9000");
        assert!(!s.server.auto_create_topics, "from the file");
        let flag = ServeArgs {
            config: Some(path),
            auto_create_topics: Some(true),
            ..Default::default()
        }
        .resolve()
        .unwrap();
        assert!(flag.server.auto_create_topics, "the flag wins");
        assert!(matches!(&s.store, StoreChoice::Redis(r) if r[0].url == "redis://flag:2"));
        let e = ServeArgs {
            config: Some(PathBuf::from("/dev/null")),
            redis: Some("redis://x:1".into()),
            data_dir: Some(PathBuf::from("d")),
            ..Default::default()
        }
        .resolve()
        .unwrap_err();
        assert!(format!("{e:#}").contains("choose"), "{e:#}");
        assert_eq!(s.server.limits.max_delay_ms, 86_400_000);
    }

    /// `postgres` from the file or the flag (the flag wins), the schema
    /// `dq` unless `postgres_schema` names another, `statement_timeout` 5 s
    /// unless `postgres_statement_timeout` says otherwise (`0`: none set);
    /// refused beside another store, with a URL of another scheme (its
    /// password hidden), a schema or a statement timeout without a
    /// database, and a timeout that is not a duration.
    #[test]
    fn postgres_from_file_or_flag() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dq.toml");
        std::fs::write(
            &path,
            "postgres = \"postgres://file@db/app\"\npostgres_schema = \"queue\"\npostgres_statement_timeout = \"2s\"\n",
        )
        .unwrap();
        let s = ServeArgs {
            config: Some(path.clone()),
            ..Default::default()
        }
        .resolve()
        .unwrap();
        assert!(
            matches!(&s.store, StoreChoice::Postgres(c) if c.url == "postgres://file@db/app" && c.schema == "queue" && c.statement_timeout == Some(Duration::from_secs(2)))
        );
        let s = ServeArgs {
            config: Some(path.clone()),
            postgres_statement_timeout: Some("0".into()),
            ..Default::default()
        }
        .resolve()
        .unwrap();
        assert!(matches!(&s.store, StoreChoice::Postgres(c) if c.statement_timeout.is_none()));
        let s = ServeArgs {
            config: Some(PathBuf::from("/dev/null")),
            postgres: Some("postgresql://flag@db/app".into()),
            ..Default::default()
        }
        .resolve()
        .unwrap();
        assert!(
            matches!(&s.store, StoreChoice::Postgres(c) if c.url == "postgresql://flag@db/app" && c.schema == "dq" && c.statement_timeout == Some(dq_postgres::DEFAULT_STATEMENT_TIMEOUT))
        );
        for (args, needle) in [
            (
                ServeArgs {
                    postgres: Some("postgres://a@b/c".into()),
                    redis: Some("redis://x:1".into()),
                    ..Default::default()
                },
                "choose one store",
            ),
            (
                ServeArgs {
                    postgres: Some("mysql://app:hunter2@db/c".into()),
                    ..Default::default()
                },
                "mysql://app:***@db/c\" is not a postgres://",
            ),
            (
                ServeArgs {
                    postgres_schema: Some("q".into()),
                    ..Default::default()
                },
                "postgres_schema applies",
            ),
            (
                ServeArgs {
                    postgres_statement_timeout: Some("1s".into()),
                    ..Default::default()
                },
                "postgres_statement_timeout applies",
            ),
            (
                ServeArgs {
                    postgres: Some("postgres://a@b/c".into()),
                    postgres_statement_timeout: Some("soon".into()),
                    ..Default::default()
                },
                "postgres_statement_timeout: \"soon\" is not a duration",
            ),
            (
                ServeArgs {
                    postgres: Some("postgres://a@b/c".into()),
                    disk_reserve_bytes: Some(1),
                    ..Default::default()
                },
                "disk_reserve_bytes applies",
            ),
        ] {
            let e = ServeArgs {
                config: Some(PathBuf::from("/dev/null")),
                ..args
            }
            .resolve()
            .unwrap_err();
            let text = format!("{e:#}");
            assert!(text.contains(needle), "{text}");
            assert!(!text.contains("hunter2"), "{text}");
        }
    }

    #[test]
    fn cluster_and_admin_token() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dq.toml");
        std::fs::write(
            &path,
            "redis_cluster = [\"redis://a:1\", \"redis://b:2\"]\nadmin_token = \"0123456789abcdef0\"\n",
        )
        .unwrap();
        let s = ServeArgs {
            config: Some(path.clone()),
            ..Default::default()
        }
        .resolve()
        .unwrap();
        assert!(
            matches!(&s.store, StoreChoice::Redis(r) if r[0].cluster == ["redis://a:1", "redis://b:2"])
        );
        assert_eq!(s.server.admin_token.as_deref(), Some("0123456789abcdef0"));
        let s = ServeArgs {
            config: Some(path.clone()),
            redis_cluster: vec!["redis://c:3".into()],
            ..Default::default()
        }
        .resolve()
        .unwrap();
        assert!(matches!(&s.store, StoreChoice::Redis(r) if r[0].cluster == ["redis://c:3"]));
        let s = ServeArgs {
            config: Some(PathBuf::from("/dev/null")),
            redis_shards: vec!["redis://a:1".into(), "redis://b:2".into()],
            ..Default::default()
        }
        .resolve()
        .unwrap();
        assert!(
            matches!(&s.store, StoreChoice::Redis(r) if r.len() == 2 && r[1].url == "redis://b:2")
        );
        for (args, needle) in [
            (
                ServeArgs {
                    redis: Some("redis://x:1".into()),
                    redis_cluster: vec!["redis://c:3".into()],
                    ..Default::default()
                },
                "choose one store",
            ),
            (
                ServeArgs {
                    redis_cluster: vec!["c:3".into()],
                    ..Default::default()
                },
                "redis_cluster",
            ),
            (
                ServeArgs {
                    redis_shards: vec!["redis://a:1".into(), "redis://a:1".into()],
                    ..Default::default()
                },
                "twice",
            ),
            (
                ServeArgs {
                    admin_token: Some("short".into()),
                    ..Default::default()
                },
                "admin_token",
            ),
        ] {
            let e = ServeArgs {
                config: Some(PathBuf::from("/dev/null")),
                ..args
            }
            .resolve()
            .unwrap_err();
            assert!(format!("{e:#}").contains(needle), "{e:#}");
        }
    }

    /// `dq serve --config` of a file holding `text`.
    fn resolve_file(text: &str) -> Result<Settings> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dq.toml");
        std::fs::write(&path, text).unwrap();
        ServeArgs {
            config: Some(path),
            ..Default::default()
        }
        .resolve()
    }

    #[test]
    fn schedules_from_the_file() {
        let s = resolve_file(
            "[schedules.daily-report]\ntopic = \"reports\"\ncron = \"0 9 * * MON-FRI\"\ntimezone = \"Europe/Berlin\"\nbody = { report = \"daily\", n = 3 }\ncatch_up = \"all\"\nstart_at = 2026-12-01T09:00:00+01:00\n\n[schedules.tick]\ntopic = \"t\"\nevery = \"90s\"\nend_at = \"2027-01-01T00:00:00Z\"\n",
        )
        .unwrap();
        let d = &s.schedules["daily-report"];
        assert_eq!(d.cron.as_deref(), Some("0 9 * * MON-FRI"));
        assert_eq!(d.catch_up, Some(dq_api::CatchUp::All));
        assert_eq!(
            d.body.as_ref().unwrap().get(),
            r#"{"n":3,"report":"daily"}"#
        );
        assert_eq!(s.schedules["tick"].every.as_deref(), Some("90s"));
        assert_eq!(d.start_at.as_deref(), Some("2026-12-01T09:00:00+01:00"));
        assert_eq!(
            s.schedules["tick"].end_at.as_deref(),
            Some("2027-01-01T00:00:00Z")
        );
        // A key the API does not know is refused, with the schedule named.
        let err = resolve_file("[schedules.x]\ntopic = \"t\"\nevry = \"1s\"\n").unwrap_err();
        assert!(
            format!("{err:#}").contains("[schedules.x]") && format!("{err:#}").contains("evry"),
            "{err:#}"
        );
    }

    #[test]
    fn topics_from_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dq.toml");
        std::fs::write(
            &path,
            "[topics.orders]\nmax_attempts = 3\nretry = { delays_ms = [60000, 180000] }\n\n[topics.hooks]\ndelivery = { mode = \"push\", url = \"http://127.0.0.1:9/h\" }\nrate_limit = { limit = 50, per_ms = 1000 }\npaused = true\nkey_concurrency = 2\nkey_rate_limit = { limit = 5, per_ms = 1000, burst = 1 }\n\n[topics.due]\ndelivery = { mode = \"redis_list\", url = \"redis://127.0.0.1:6379/0\", list = \"ready\" }\n",
        )
        .unwrap();
        let s = ServeArgs {
            config: Some(path),
            ..Default::default()
        }
        .resolve()
        .unwrap();
        assert_eq!(s.topics["orders"].max_attempts, Some(3));
        assert!(matches!(
            s.topics["hooks"].delivery,
            Some(dq_core::Delivery::Push(_))
        ));
        assert_eq!(
            s.topics["hooks"].rate_limit,
            Some(Some(dq_core::RateLimit {
                limit: 50,
                per_ms: 1000,
                burst: 50
            }))
        );
        assert_eq!(s.topics["hooks"].paused, Some(true));
        assert_eq!(s.topics["hooks"].key_concurrency, Some(Some(2)));
        assert_eq!(
            s.topics["hooks"].key_rate_limit,
            Some(Some(dq_core::RateLimit {
                limit: 5,
                per_ms: 1000,
                burst: 1
            }))
        );
        assert_eq!(s.topics["orders"].rate_limit, None, "left out: kept");
        assert!(matches!(
            &s.topics["due"].delivery,
            Some(dq_core::Delivery::RedisList(l)) if l.list == "ready"
        ));
    }

    #[test]
    fn bad_values_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dq.toml");
        std::fs::write(&path, "lisen = \"x\"\n").unwrap();
        let e = ServeArgs {
            config: Some(path),
            ..Default::default()
        }
        .resolve()
        .unwrap_err();
        assert!(format!("{e:#}").contains("lisen"), "{e:#}");
        let e = ServeArgs {
            config: Some(PathBuf::from("/dev/null")),
            shutdown_grace: Some("soon".into()),
            ..Default::default()
        }
        .resolve()
        .unwrap_err();
        assert!(format!("{e:#}").contains("shutdown_grace"), "{e:#}");
    }
}
