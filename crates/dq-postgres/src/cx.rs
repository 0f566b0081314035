//! One store call's transaction ([`Cx`]) and what every verb shares: the
//! state codes, the topic lock, a topic's settings, its counts, and
//! [`Cx::place`], through which a job goes to ready or scheduled and the
//! waiters are told.

use dq_core::*;
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use crate::{Failure, OpResult};

pub(crate) const SCHEDULED: i16 = 0;
pub(crate) const READY: i16 = 1;
pub(crate) const RESERVED: i16 = 2;
pub(crate) const DEAD: i16 = 3;

/// Most jobs moved or deleted per statement: the store contract's one bound.
pub(crate) const BATCH: i64 = dq_core::limits::MAX_BATCH as i64;

pub(crate) fn state_of(code: i16) -> JobState {
    match code {
        SCHEDULED => JobState::Scheduled,
        READY => JobState::Ready,
        RESERVED => JobState::Reserved,
        _ => JobState::Dead,
    }
}

pub(crate) fn code_of(s: JobState) -> i16 {
    match s {
        JobState::Scheduled => SCHEDULED,
        JobState::Ready => READY,
        JobState::Reserved => RESERVED,
        JobState::Dead => DEAD,
    }
}

/// A parameter list.
pub(crate) type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// One call's transaction and the topics to wake at its commit.
pub(crate) struct Cx<'a> {
    tx: &'a deadpool_postgres::Transaction<'a>,
    channel: &'a str,
    wake: Vec<String>,
}

impl<'a> Cx<'a> {
    pub(crate) fn new(tx: &'a deadpool_postgres::Transaction<'a>, channel: &'a str) -> Self {
        Self {
            tx,
            channel,
            wake: Vec::new(),
        }
    }

    pub(crate) async fn q(&self, sql: &str, p: Params<'_>) -> OpResult<Vec<Row>> {
        let st = self.tx.prepare_cached(sql).await?;
        Ok(self.tx.query(&st, p).await?)
    }

    pub(crate) async fn opt(&self, sql: &str, p: Params<'_>) -> OpResult<Option<Row>> {
        let st = self.tx.prepare_cached(sql).await?;
        Ok(self.tx.query_opt(&st, p).await?)
    }

    pub(crate) async fn one(&self, sql: &str, p: Params<'_>) -> OpResult<Row> {
        let st = self.tx.prepare_cached(sql).await?;
        Ok(self.tx.query_one(&st, p).await?)
    }

    pub(crate) async fn exec(&self, sql: &str, p: Params<'_>) -> OpResult<u64> {
        let st = self.tx.prepare_cached(sql).await?;
        Ok(self.tx.execute(&st, p).await?)
    }

    pub(crate) async fn batch(&self, sql: &str) -> OpResult<()> {
        Ok(self.tx.batch_execute(sql).await?)
    }

    /// Tells the topic's waiters, at commit.
    pub(crate) fn wake(&mut self, topic: &Topic) {
        if !self.wake.iter().any(|t| t == topic.as_str()) {
            self.wake.push(topic.as_str().to_string());
        }
    }

    /// Sends the wake-ups as `NOTIFY`s of this transaction: they fire at
    /// its commit, and not at all if it rolls back.
    pub(crate) async fn send_wakes(&mut self) -> OpResult<()> {
        if self.wake.is_empty() {
            return Ok(());
        }
        let topics = std::mem::take(&mut self.wake);
        self.exec(
            "SELECT pg_notify($1, t) FROM unnest($2::text[]) t",
            &[&self.channel, &topics],
        )
        .await?;
        Ok(())
    }

    /// The topic's id, its row locked until the end of the call; `None`
    /// when the topic does not exist. The counts the SQL functions moved
    /// (`topic_deltas`) are folded into the row first.
    pub(crate) async fn lock(&self, topic: &Topic) -> OpResult<Option<i64>> {
        let tid: Option<i64> = self
            .opt(
                "SELECT tid FROM topics WHERE name = $1 FOR UPDATE",
                &[&topic.as_str()],
            )
            .await?
            .map(|r| r.get(0));
        if let Some(t) = tid {
            self.fold_deltas(t).await?;
        }
        Ok(tid)
    }

    /// Adds the counts the SQL functions left in `topic_deltas` (committed
    /// ones: those of open transactions come in a later call) to the
    /// locked topic row.
    async fn fold_deltas(&self, tid: i64) -> OpResult<()> {
        self.exec(
            "WITH d AS (DELETE FROM topic_deltas WHERE tid = $1 RETURNING *),
                  s AS (SELECT count(*) AS n, coalesce(sum(d_scheduled), 0) AS sc, coalesce(sum(d_ready), 0) AS re,
                          coalesce(sum(d_reserved), 0) AS rs, coalesce(sum(d_dead), 0) AS de,
                          coalesce(sum(enqueued), 0) AS en, coalesce(sum(cancelled), 0) AS ca,
                          coalesce(sum(acked), 0) AS ac,
                          coalesce(bool_or(keyed), false) AS ke FROM d)
             UPDATE topics t SET n_scheduled = n_scheduled + s.sc, n_ready = n_ready + s.re,
               n_reserved = n_reserved + s.rs, n_dead = n_dead + s.de, enqueued = t.enqueued + s.en,
               cancelled = t.cancelled + s.ca, acked = t.acked + s.ac, keyed = t.keyed OR s.ke
             FROM s WHERE t.tid = $1 AND s.n > 0",
            &[&tid],
        )
        .await?;
        Ok(())
    }

    /// The topic's id (without a lock: for reads).
    pub(crate) async fn tid(&self, topic: &Topic) -> OpResult<Option<i64>> {
        Ok(self
            .opt("SELECT tid FROM topics WHERE name = $1", &[&topic.as_str()])
            .await?
            .map(|r| r.get(0)))
    }

    /// Locks the rows of `topics` (those that exist), in name order, so
    /// that two calls over the same topics never wait on each other in a
    /// circle.
    pub(crate) async fn lock_topics(&self, topics: &[&Topic]) -> OpResult<()> {
        let mut names: Vec<&str> = topics.iter().map(|t| t.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        self.q(
            "SELECT tid FROM topics WHERE name = ANY($1) ORDER BY name FOR UPDATE",
            &[&names],
        )
        .await?;
        Ok(())
    }

    /// The topic's id, creating the topic if needed; its row locked.
    pub(crate) async fn ensure_tid(&self, topic: &Topic) -> OpResult<i64> {
        if let Some(t) = self.lock(topic).await? {
            return Ok(t);
        }
        let r = self
            .one(
                "INSERT INTO topics (name) VALUES ($1)
                 ON CONFLICT (name) DO UPDATE SET name = excluded.name RETURNING tid",
                &[&topic.as_str()],
            )
            .await?;
        Ok(r.get(0))
    }

    pub(crate) async fn config(&self, tid: i64) -> OpResult<TopicConfig> {
        let d = TopicConfig::default();
        let r = self
            .one(
                "SELECT max_attempts, lease_ms, dead_cap, default_delay_ms, retry, delivery, dedup_ms,
                   paused, rate_limit, key_concurrency, key_rate_limit FROM topics WHERE tid = $1",
                &[&tid],
            )
            .await?;
        Ok(TopicConfig {
            max_attempts: r
                .get::<_, Option<i64>>(0)
                .map_or(d.max_attempts, |v| v as u32),
            lease_ms: r.get::<_, Option<i64>>(1).map_or(d.lease_ms, |v| v as u64),
            dead_cap: r.get::<_, Option<i64>>(2).map_or(d.dead_cap, |v| v as u64),
            default_delay_ms: r
                .get::<_, Option<i64>>(3)
                .map_or(d.default_delay_ms, |v| v as u64),
            retry: r
                .get::<_, Option<String>>(4)
                .and_then(|s| RetryPolicy::decode(&s))
                .unwrap_or(d.retry.clone()),
            delivery: r
                .get::<_, Option<String>>(5)
                .and_then(|s| serde_json::from_str(&s).ok())
                .unwrap_or(d.delivery.clone()),
            partitions: 1,
            dedup_ms: r.get::<_, Option<i64>>(6).map_or(d.dedup_ms, |v| v as u64),
            paused: r.get(7),
            rate_limit: r
                .get::<_, Option<String>>(8)
                .and_then(|s| RateLimit::decode(&s)),
            key_concurrency: r.get::<_, Option<i64>>(9).map(|v| v as u32),
            key_rate_limit: r
                .get::<_, Option<String>>(10)
                .and_then(|s| RateLimit::decode(&s)),
            // Not kept by this store yet (issue #51): refused when set.
            expires_ms: d.expires_ms,
            on_expiry: d.on_expiry,
        })
    }

    /// Adds to a running total of the topic. `name` is one of the counter
    /// columns (a constant of this crate, never input).
    pub(crate) async fn bump(&self, tid: i64, name: &'static str, n: i64) -> OpResult<()> {
        if n != 0 {
            self.exec(
                &format!("UPDATE topics SET {name} = {name} + $1 WHERE tid = $2"),
                &[&n, &tid],
            )
            .await?;
        }
        Ok(())
    }

    /// Adds `d[state]` to the topic's count of jobs in each state.
    pub(crate) async fn counts(&self, tid: i64, d: [i64; 4]) -> OpResult<()> {
        if d != [0; 4] {
            self.exec(
                "UPDATE topics SET n_scheduled = n_scheduled + $1, n_ready = n_ready + $2,
                 n_reserved = n_reserved + $3, n_dead = n_dead + $4 WHERE tid = $5",
                &[&d[0], &d[1], &d[2], &d[3], &tid],
            )
            .await?;
        }
        Ok(())
    }

    /// Due time of the schedule's head.
    pub(crate) async fn sched_head(&self, tid: i64) -> OpResult<Option<u64>> {
        Ok(self
            .opt(
                "SELECT due_ms FROM jobs WHERE tid = $1 AND state = 0 ORDER BY due_ms LIMIT 1",
                &[&tid],
            )
            .await?
            .map(|r| r.get::<_, i64>(0) as u64))
    }

    /// Puts job `seq` (coming from state `from`) where its due time says:
    /// ready if due, else scheduled. `put_delay`: the delay it is given back
    /// with (a nack to retry, a release), which a job ranked in put order
    /// keeps as its `put_delay_ms` (a job in due order keeps none); `None`
    /// leaves it. Wakes the topic's waiters, at commit, when the job is due
    /// now or is the new head of the schedule.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn place(
        &mut self,
        topic: &Topic,
        tid: i64,
        seq: i64,
        from: Option<i16>,
        due: u64,
        put_delay: Option<u64>,
        now: u64,
    ) -> OpResult<i16> {
        let (to, wake) = if due <= now {
            (READY, true)
        } else {
            let head = self.sched_head(tid).await?;
            (SCHEDULED, head.is_none_or(|h| due < h))
        };
        self.exec(
            "UPDATE jobs SET state = $1, due_ms = $2,
               put_delay_ms = CASE WHEN put_delay_ms IS NOT NULL THEN coalesce($4::int8, put_delay_ms) END
             WHERE seq = $3",
            &[&to, &(due as i64), &seq, &put_delay.map(|d| d as i64)],
        )
        .await?;
        self.counts(tid, delta(from, Some(to))).await?;
        if wake {
            self.wake(topic);
        }
        Ok(to)
    }

    /// The database's time (`clock_timestamp()`), Unix ms.
    pub(crate) async fn db_now(&self) -> OpResult<u64> {
        let r = self
            .one(
                "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint",
                &[],
            )
            .await?;
        Ok(r.get::<_, i64>(0).max(0) as u64)
    }

    /// Bumps the settings version (a topic's settings changed or it went).
    pub(crate) async fn settings_changed(&self) -> OpResult<()> {
        self.exec(
            "UPDATE meta SET value = value + 1 WHERE key = 'settings_version'",
            &[],
        )
        .await?;
        Ok(())
    }
}

pub(crate) fn delta(from: Option<i16>, to: Option<i16>) -> [i64; 4] {
    let mut d = [0; 4];
    if let Some(f) = from {
        d[f as usize] -= 1;
    }
    if let Some(t) = to {
        d[t as usize] += 1;
    }
    d
}

/// A job id read back from the table.
pub(crate) fn job_id(s: String) -> OpResult<JobId> {
    JobId::new(s).map_err(|e| Failure(StoreError::Invalid(e)))
}

/// A new lease token: 64 random bits (checked with the job's topic and id,
/// so it only has to differ from the job's earlier tokens; short, as the
/// other stores' are, so that a batch of 1,000 fits a request).
pub(crate) fn new_token() -> String {
    format!("{:016x}", rand::random::<u64>())
}
