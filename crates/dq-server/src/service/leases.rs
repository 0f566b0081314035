//! Leases: reserve (with its long-poll, [`super::long_poll`]), reserve by
//! id, ack, nack, touch and release, one and in batches, and the deliverer's
//! and forwarder's own hand-outs and acks. Lateness is recorded here, for
//! every job handed out.

use std::borrow::Cow;
use std::time::Duration;

use dq_core::limits;
use dq_core::{
    AckItem, ForwardSink, GiveBack, JobId, Lease, Nack, NackItem, NackOutcome, ReserveParams,
    StoreError, StoreResult, Topic, TouchItem,
};

use super::{Error, Result, Service};

impl Service {
    /// Checks what a consumer's reserve asks ([`ReserveParams::check`])
    /// against this instance's limits; a front-end calls it before
    /// [`Service::reserve`] (the beanstalkd protocol's reserves ask one job,
    /// the tube's lease, and wait in slices of their own timeout, which the
    /// protocol does not bound by `max_wait`).
    ///
    /// # Errors
    /// The first rule broken (`invalid_topics`, `invalid_max`,
    /// `invalid_lease`, `invalid_wait`).
    pub fn check_reserve(&self, params: &ReserveParams) -> Result<()> {
        Ok(params.check(&self.limits)?)
    }

    /// Leases up to `max` due jobs of pull topics, waiting up to `wait_ms`
    /// for one to become due (see `long_poll.rs`). Lateness is recorded for
    /// each job handed out.
    ///
    /// # Errors
    /// [`Error::ShuttingDown`], [`Error::Draining`]; [`Error::TopicIsDelivered`]; a store error when
    /// nothing was reserved.
    pub async fn reserve(
        &self,
        topics: &[Topic],
        max: usize,
        lease_ms: Option<u64>,
        wait_ms: u64,
    ) -> Result<Vec<Lease>> {
        self.check_intake()?;
        // A topic whose settings cannot be read now (its Redis shard does
        // not answer) is left out: the others keep serving. Whether it is
        // a pull topic is not known, so nothing is taken from it.
        let mut pull = Vec::with_capacity(topics.len());
        let mut unreadable = None;
        for t in topics {
            match self.is_delivered(t).await {
                Ok(true) => return Err(Error::TopicIsDelivered(t.to_string())),
                Ok(false) => pull.push(t.clone()),
                Err(e @ Error::Store(StoreError::Unavailable(_))) => {
                    unreadable.get_or_insert(e);
                }
                Err(e) => return Err(e),
            }
        }
        if let (true, Some(e)) = (pull.is_empty(), unreadable) {
            return Err(e);
        }
        // Consumers' calls only: the deliverer's own reserves are no consumer
        // waiting for work (dq_reserve_in_progress).
        let _in_progress = self.metrics.reserving();
        self.hand_out(&pull, max, lease_ms, wait_ms).await
    }

    /// As [`Service::reserve`] without waiting, and handing out while this
    /// instance drains: the beanstalkd listener's drain mode is the
    /// reference's (no new job is put, workers go on emptying the tubes).
    ///
    /// # Errors
    /// [`Error::ShuttingDown`]; [`Error::TopicIsDelivered`]; a store error.
    pub async fn reserve_in_drain(&self, topics: &[Topic], max: usize) -> Result<Vec<Lease>> {
        if self.shutdown.is_cancelled() {
            return Err(Error::ShuttingDown);
        }
        for t in topics {
            if self.is_delivered(t).await? {
                return Err(Error::TopicIsDelivered(t.to_string()));
            }
        }
        self.hand_out(topics, max, None, 0).await
    }

    /// What the deliverer and the forwarder reserve of a topic they deliver:
    /// as [`Service::reserve`], without the pull-only check.
    pub(crate) async fn reserve_delivered(
        &self,
        t: &Topic,
        max: usize,
        lease_ms: u64,
        wait_ms: u64,
    ) -> Result<Vec<Lease>> {
        self.check_intake()?;
        self.hand_out(std::slice::from_ref(t), max, Some(lease_ms), wait_ms)
            .await
    }

    async fn hand_out(
        &self,
        topics: &[Topic],
        max: usize,
        lease_ms: Option<u64>,
        wait_ms: u64,
    ) -> Result<Vec<Lease>> {
        let leases = super::long_poll::reserve(self, topics, max, lease_ms, wait_ms).await;
        for t in topics {
            self.wakers.release(t.as_str());
        }
        let leases = leases?;
        let now = self.now();
        for l in &leases {
            let late = Duration::from_millis(now.saturating_sub(l.due_at_ms));
            self.metrics.observe_lateness(l.topic.as_str(), late);
        }
        self.spans().handed_out(&leases, now);
        Ok(leases)
    }

    /// Completes a job.
    ///
    /// # Errors
    /// [`StoreError::NotFound`], [`StoreError::LeaseMismatch`] for a stale
    /// token, [`StoreError::NotInState`].
    pub async fn ack(&self, t: &Topic, id: &JobId, token: &str) -> Result<()> {
        self.store.ack(t, id, token, self.now()).await?;
        let trace_id = self.spans().acked(t, token);
        tracing::debug!(topic = %t, id = %id, trace_id, "job acked");
        Ok(())
    }

    /// Acks each item in one store call ([`Store::ack_batch`](dq_core::Store::ack_batch): one script
    /// per topic on Redis, one transaction on the embedded store); a result
    /// per item, in order, each as [`Service::ack`] answers it.
    pub async fn ack_batch(&self, acks: &[AckItem]) -> Vec<Result<()>> {
        let done = self.store.ack_batch(acks, self.now()).await;
        acks.iter()
            .zip(done)
            .map(|(a, r)| {
                r?;
                let trace_id = self.spans().acked(&a.topic, &a.token);
                tracing::debug!(topic = %a.topic, id = %a.id, trace_id, "job acked");
                Ok(())
            })
            .collect()
    }

    /// Fails an attempt: retried after `nack.retry_in_ms` (or the retry
    /// policy's wait), or dead when it was the last or `nack.dead` says so.
    ///
    /// # Errors
    /// `invalid_delay` beyond the largest delay; as [`Service::ack`].
    pub async fn nack(&self, t: &Topic, id: &JobId, nack: Nack<'_>) -> Result<NackOutcome> {
        if let Some(ms) = nack.retry_in_ms {
            self.limits.check_delay(ms)?;
        }
        let out = self.store.nack(t, id, nack, self.now()).await;
        self.changed(t);
        let out = out?;
        self.nacked(t, id, &nack, &out);
        Ok(out)
    }

    /// Nacks each item in one store call ([`Store::nack_batch`](dq_core::Store::nack_batch): one script
    /// per topic on Redis, one transaction on the embedded store); a result
    /// per item, in order, each as [`Service::nack`] answers it (an item
    /// whose `retry_in_ms` is out of bounds is refused alone, before the
    /// store sees it).
    pub async fn nack_batch(&self, items: &[NackItem]) -> Vec<Result<NackOutcome>> {
        let refused: Vec<Option<Error>> = items
            .iter()
            .map(|it| {
                let ms = it.retry_in_ms?;
                let e = self.limits.check_delay(ms).err()?;
                Some(StoreError::from(e).into())
            })
            .collect();
        let valid = valid(items, &refused);
        let done = self.store.nack_batch(&valid, self.now()).await;
        let mut topics: Vec<&Topic> = valid.iter().map(|it| &it.topic).collect();
        topics.sort();
        topics.dedup();
        for t in topics {
            self.changed(t);
        }
        for (it, r) in valid.iter().zip(&done) {
            if let Ok(o) = r {
                self.nacked(&it.topic, &it.id, &it.nack(), o);
            }
        }
        answers(refused, done)
    }

    /// What a nack did, for the dispatcher and the log.
    fn nacked(&self, t: &Topic, id: &JobId, nack: &Nack<'_>, out: &NackOutcome) {
        if matches!(out, NackOutcome::Dead { .. }) {
            self.wakers.died(t.as_str());
        }
        let error = limits::clip_error(nack.error);
        let trace_id = self.spans().nacked(t, nack.token, error, out);
        match *out {
            NackOutcome::Retry { due_at_ms, attempt } => {
                tracing::info!(topic = %t, id = %id, attempt, error = %error, retry_at_ms = due_at_ms, trace_id, "job failed; will retry");
            }
            NackOutcome::Dead { attempt } if nack.dead => {
                tracing::warn!(topic = %t, id = %id, attempt, error = %error, trace_id, "job failed for good; dead");
            }
            NackOutcome::Dead { attempt } => {
                tracing::warn!(topic = %t, id = %id, attempt, error = %error, trace_id, "job failed for the last time; dead");
            }
        }
    }

    /// Gives a reserved job back without counting the attempt, due after
    /// `delay_ms`, counted as `how` says; returns the new due time.
    ///
    /// # Errors
    /// `invalid_delay`; as [`Service::ack`].
    pub async fn release(
        &self,
        t: &Topic,
        id: &JobId,
        token: &str,
        delay_ms: u64,
        how: GiveBack,
    ) -> Result<u64> {
        self.limits.check_delay(delay_ms)?;
        let due = self
            .store
            .release(t, id, token, delay_ms, how, self.now())
            .await;
        self.changed(t);
        let due = due?;
        let trace_id = self.spans().released(token);
        tracing::debug!(topic = %t, id = %id, due_at_ms = due, trace_id, "job released");
        Ok(due)
    }

    /// Extends a lease to now + `lease_ms` (or the job's / topic's lease);
    /// returns the new deadline.
    ///
    /// # Errors
    /// `invalid_lease`; as [`Service::ack`].
    pub async fn touch(
        &self,
        t: &Topic,
        id: &JobId,
        token: &str,
        lease_ms: Option<u64>,
    ) -> Result<u64> {
        if let Some(ms) = lease_ms {
            limits::check_lease(ms)?;
        }
        let deadline = self.store.touch(t, id, token, lease_ms, self.now()).await?;
        // A shorter lease than before ends before the dispatcher's plan says.
        self.wakers.lease_ends(t.as_str(), deadline);
        tracing::debug!(topic = %t, id = %id, lease_deadline_ms = deadline, "lease extended");
        Ok(deadline)
    }

    /// Extends each item's lease in one store call ([`Store::touch_batch`](dq_core::Store::touch_batch):
    /// one script per topic on Redis, one transaction on the embedded
    /// store); a result per item, in order, each as [`Service::touch`]
    /// answers it (an item whose `lease_ms` is out of bounds is refused
    /// alone, before the store sees it).
    pub async fn touch_batch(&self, items: &[TouchItem]) -> Vec<Result<u64>> {
        let refused: Vec<Option<Error>> = items
            .iter()
            .map(|it| {
                let e = limits::check_lease(it.lease_ms?).err()?;
                Some(StoreError::from(e).into())
            })
            .collect();
        let valid = valid(items, &refused);
        let done = self.store.touch_batch(&valid, self.now()).await;
        for (it, r) in valid.iter().zip(&done) {
            if let Ok(deadline) = *r {
                // A shorter lease than before ends before the dispatcher's plan says.
                self.wakers.lease_ends(it.topic.as_str(), deadline);
                tracing::debug!(topic = %it.topic, id = %it.id, lease_deadline_ms = deadline, "lease extended");
            }
        }
        answers(refused, done)
    }

    /// Leases the job `id` of `t` whether it is scheduled, ready or dead
    /// (beanstalkd's `reserve-job`); `None` when it is missing or reserved.
    ///
    /// # Errors
    /// [`Error::ShuttingDown`], [`Error::Draining`]; a store error.
    pub async fn reserve_job(&self, t: &Topic, id: &JobId) -> Result<Option<Lease>> {
        self.check_intake()?;
        self.reserve_job_in_drain(t, id).await
    }

    /// As [`Service::reserve_job`], while this instance drains too (see
    /// [`Service::reserve_in_drain`]).
    ///
    /// # Errors
    /// [`Error::ShuttingDown`]; a store error.
    pub async fn reserve_job_in_drain(&self, t: &Topic, id: &JobId) -> Result<Option<Lease>> {
        if self.shutdown.is_cancelled() {
            return Err(Error::ShuttingDown);
        }
        let now = self.now();
        let lease = self.store.reserve_job(t, id, None, now).await;
        // A failed call may have leased it: the dispatcher looks (see long_poll.rs).
        let deadline = match &lease {
            Ok(Some(l)) => Some(l.lease_deadline_ms),
            Ok(None) => None,
            Err(_) => Some(now),
        };
        if let Some(d) = deadline {
            self.wakers.lease_ends(t.as_str(), d);
        }
        let lease = lease?;
        if let Some(l) = &lease {
            self.spans().handed_out(std::slice::from_ref(l), now);
            tracing::debug!(topic = %t, id = %id, "job reserved by id");
        }
        Ok(lease)
    }

    /// Gives leases back at once, counting nothing (the deliverer or
    /// forwarder of a topic whose settings changed under it, or stopping:
    /// no attempt was made); one that cannot be given back returns after
    /// its lease.
    pub(crate) async fn give_back(&self, leases: &[Lease]) {
        for l in leases {
            if let Err(e) = self
                .release(&l.topic, &l.id, &l.token, 0, GiveBack::Dropped)
                .await
            {
                tracing::debug!(topic = %l.topic, id = %l.id, error = %e, "cannot give a lease back; the job returns after its lease");
            }
        }
    }

    /// Acks reserved jobs of a forwarding topic and writes them into its
    /// target in one step through `sink` where it can (see
    /// [`ForwardSink::ack_and_write`]: on the store's own Redis, which the
    /// sink reaches itself), at this instance's time; `None` for each job
    /// it cannot.
    ///
    /// # Errors
    /// A store error (nothing is known to be done).
    pub(crate) async fn ack_and_write(
        &self,
        sink: &dyn ForwardSink,
        t: &Topic,
        url: &str,
        items: &[dq_core::forward::AckWrite<'_>],
    ) -> Result<Vec<Option<StoreResult<()>>>> {
        Ok(sink.ack_and_write(t, url, items, self.now()).await?)
    }
}

/// The items of a batch the service lets through to the store: the batch
/// itself when nothing was refused (no copy, the usual case), else a copy
/// of the others.
fn valid<'a, T: Clone>(items: &'a [T], refused: &[Option<Error>]) -> Cow<'a, [T]> {
    if refused.iter().all(Option::is_none) {
        Cow::Borrowed(items)
    } else {
        let kept = items.iter().zip(refused).filter(|(_, r)| r.is_none());
        Cow::Owned(kept.map(|(it, _)| it.clone()).collect())
    }
}

/// A result per item of a batch, in order: its refusal, or what the store
/// answered for it (`done` has one result per item not refused).
fn answers<R>(refused: Vec<Option<Error>>, done: Vec<StoreResult<R>>) -> Vec<Result<R>> {
    let mut done = done.into_iter();
    refused
        .into_iter()
        .map(|r| match r {
            Some(e) => Err(e),
            None => done
                .next()
                .expect("a store answers every item")
                .map_err(Error::from),
        })
        .collect()
}
