//! How the store runs its scripts: on the topic's keys (every script of a
//! topic in its hash slot), retried while a Cluster reshards or fails over,
//! in batches of [`limits::MAX_BATCH`] items per topic, durably (`WAIT`
//! for replicas) for new jobs, and only once this Redis's key layout is
//! checked; the scripts loaded ahead of the first call; each topic added to
//! the topics set once per process.

use std::time::Duration;

use dq_core::store::StoreResult;
use dq_core::*;
use redis::Value;

use crate::RedisStore;
use crate::conn::{Conn, not_run, unavailable};

impl RedisStore {
    /// Unavailable while [`RedisStore::hold_until_layout_checked`] holds.
    pub(crate) fn layout_gate(&self) -> StoreResult<()> {
        if self
            .layout_checked
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            return Ok(());
        }
        Err(StoreError::Unavailable(
            "this Redis did not answer when dq started: its key layout is not checked yet".into(),
        ))
    }

    /// Refuses every script (503, nothing written) until
    /// [`RedisStore::check_layout`] has accepted this Redis's layout;
    /// `dq serve` calls it before its first check.
    pub fn hold_until_layout_checked(&self) {
        self.layout_checked
            .store(false, std::sync::atomic::Ordering::SeqCst);
    }

    /// Loads every script now, so the first real call does not pay for it.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when Redis cannot be reached.
    pub async fn load_scripts(&self) -> StoreResult<()> {
        let mut conn = self.conn.clone();
        for (_, s) in self.scripts.all() {
            s.prepare_invoke()
                .load_async(&mut conn)
                .await
                .map_err(unavailable)?;
        }
        Ok(())
    }

    /// Adds `topic` to the topics set once per process.
    pub(crate) async fn register(&self, topic: &Topic) -> StoreResult<()> {
        self.layout_gate()?;
        if self
            .known
            .lock()
            .expect("poisoned")
            .contains(topic.as_str())
        {
            return Ok(());
        }
        self.add_topic_name(topic.as_str()).await?;
        self.known
            .lock()
            .expect("poisoned")
            .insert(topic.as_str().to_string());
        Ok(())
    }

    /// Runs `script` with the topic's keys and `args` (the topic name first).
    pub(crate) async fn run(
        &self,
        script: &redis::Script,
        topic: &Topic,
        args: &[&[u8]],
    ) -> StoreResult<Value> {
        self.run_on(self.conn.clone(), script, topic, args).await
    }

    async fn run_on(
        &self,
        mut conn: Conn,
        script: &redis::Script,
        topic: &Topic,
        args: &[&[u8]],
    ) -> StoreResult<Value> {
        self.layout_gate()?;
        let tk = self.keys.topic(topic);
        let mut inv = script.prepare_invoke();
        for k in &tk.all {
            inv.key(k);
        }
        inv.arg(topic.as_str());
        for a in args {
            inv.arg(*a);
        }
        // During a Cluster resharding a script whose keys are split between
        // two nodes is refused with TRYAGAIN, or redirected (ASK, MOVED)
        // more often than the client follows by itself; during a failover it
        // may be refused with CLUSTERDOWN or MASTERDOWN. In every case it did
        // not run: wait and run it again, for up to about 3 s beyond the
        // client's own retries.
        let mut wait = Duration::from_millis(20);
        let mut waited = Duration::ZERO;
        loop {
            match inv.invoke_async(&mut conn).await {
                Err(e) if not_run(&e) && waited < Duration::from_secs(3) => {
                    tokio::time::sleep(wait).await;
                    waited += wait;
                    wait = (wait * 2).min(Duration::from_millis(250));
                }
                r => return r.map_err(unavailable),
            }
        }
    }

    /// Runs a batch script (`ack_batch`, `nack_batch`, `touch_batch`) over
    /// items whose topics are `topics` (one per item): one call per topic
    /// (one hash slot) and [`limits::MAX_BATCH`] items, with `head` after
    /// the topic name and then `item_args(i)` for each item `i` of the
    /// call; `decode` reads each item's reply. The calls of one topic run in
    /// turn, so a duplicate item answers as it would one after the other;
    /// the topics run side by side. A result per item, in order.
    pub(crate) async fn run_batches<'a, R>(
        &self,
        script: &redis::Script,
        topics: &[&Topic],
        head: &[&[u8]],
        item_args: impl Fn(usize) -> Vec<std::borrow::Cow<'a, [u8]>>,
        decode: impl Fn(&Value) -> StoreResult<R>,
    ) -> Vec<StoreResult<R>> {
        let mut groups: Vec<(&Topic, Vec<usize>)> = Vec::new();
        for (i, t) in topics.iter().enumerate() {
            match groups.iter_mut().find(|(g, _)| g == t) {
                Some((_, idx)) => idx.push(i),
                None => groups.push((t, vec![i])),
            }
        }
        let (item_args, decode) = (&item_args, &decode);
        let calls = groups.into_iter().map(|(topic, idx)| async move {
            let mut done = Vec::with_capacity(idx.len());
            for chunk in idx.chunks(limits::MAX_BATCH) {
                let owned: Vec<_> = chunk.iter().flat_map(|&i| item_args(i)).collect();
                let mut args: Vec<&[u8]> = head.to_vec();
                args.extend(owned.iter().map(|a| a.as_ref()));
                match self.run(script, topic, &args).await {
                    Ok(Value::Array(a)) if a.len() == chunk.len() => {
                        done.extend(a.iter().map(decode));
                    }
                    Ok(_) => done.extend(
                        chunk
                            .iter()
                            .map(|_| Err(StoreError::Unavailable("batch reply length".into()))),
                    ),
                    Err(e) => done.extend(chunk.iter().map(|_| Err(e.clone()))),
                }
            }
            (idx, done)
        });
        let mut out: Vec<Option<StoreResult<R>>> = topics.iter().map(|_| None).collect();
        for (idx, done) in futures::future::join_all(calls).await {
            for (i, r) in idx.into_iter().zip(done) {
                out[i] = Some(r);
            }
        }
        out.into_iter()
            .map(|r| r.expect("every item is in one call"))
            .collect()
    }

    /// Runs the enqueue script on the connection for new jobs; with
    /// `wait_replicas`, then waits for that many replicas to have it (WAIT
    /// on the same connection, at the master of the topic's slot).
    pub(crate) async fn enqueue_durably(
        &self,
        topic: &Topic,
        args: &[&[u8]],
    ) -> StoreResult<Value> {
        self.enqueue_durably_with(&self.scripts.enqueue, topic, args)
            .await
    }

    /// Runs `script` (enqueue or import_jobs: it writes new jobs) as
    /// [`Self::enqueue_durably`] does.
    pub(crate) async fn enqueue_durably_with(
        &self,
        script: &redis::Script,
        topic: &Topic,
        args: &[&[u8]],
    ) -> StoreResult<Value> {
        let v = self
            .run_on(self.writes.clone(), script, topic, args)
            .await?;
        let Some((replicas, timeout)) = &self.durable else {
            return Ok(v);
        };
        let acked = self
            .writes
            .wait(*replicas, *timeout, self.keys.topic(topic).sched())
            .await
            .map_err(unavailable)?;
        if acked < i64::from(*replicas) {
            return Err(StoreError::Unavailable(format!(
                "written on the master but {acked} of {replicas} replicas acknowledged within {timeout:?}; retry (with the job's id, a retry is harmless)"
            )));
        }
        Ok(v)
    }
}
