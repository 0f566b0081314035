//! Single enqueues into one topic that arrive together share one store call.
//!
//! Most applications send one job per request: 32 PHP workers enqueueing at
//! once cost 32 store calls — 32 scripts on Redis, 32 fsync'd commits queued
//! one behind the other on PostgreSQL's topic row. Here the first single
//! enqueue into a topic starts a writer; the ones that arrive while its
//! store call is in flight wait in the topic's queue and go together in its
//! next call (at most [`MAX_BATCH`], and never two jobs with the same id in
//! one call, so each gets the answer it would get alone: the second of two
//! with one id is the one that finds the first). Nothing waits for company:
//! a lone enqueue goes at once, as before.
//!
//! Each caller gets its own job's outcome. A store's refusal of a job
//! ([`StoreError::Invalid`], given before anything is written) sends each
//! job of the call again alone, so only the refused one hears of it; any
//! other store error is the answer of every caller of that call (a failed
//! call may have written, as when alone). The writer is a task of its own, so a caller that goes away (a
//! client hanging up) stops nobody else's write.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use dq_core::limits::MAX_BATCH;
use dq_core::{Enqueued, NewJob, StoreError, Topic};
use tokio::sync::oneshot;

use super::{Error, Result, Writer};

type Waiting = (NewJob, oneshot::Sender<Result<Enqueued>>);

/// The topics with a writer running, each with the jobs waiting for it.
#[derive(Default)]
pub(super) struct Combiner {
    queues: Mutex<HashMap<Topic, Vec<Waiting>>>,
}

impl Combiner {
    /// Writes `job` (checked already) into `t`, with whatever other single
    /// enqueues into `t` go at the same moment; its outcome.
    pub(super) async fn enqueue(
        self: &Arc<Self>,
        writer: &Writer,
        t: &Topic,
        job: NewJob,
    ) -> Result<Enqueued> {
        let (tx, rx) = oneshot::channel();
        let start = {
            let mut queues = self.queues.lock().expect("combiner lock");
            match queues.get_mut(t) {
                Some(waiting) => {
                    waiting.push((job, tx));
                    false
                }
                None => {
                    queues.insert(t.clone(), vec![(job, tx)]);
                    true
                }
            }
        };
        if start {
            tokio::spawn(self.clone().write(writer.clone(), t.clone()));
        }
        rx.await.unwrap_or_else(|_| {
            Err(
                StoreError::Unavailable("the enqueue's writer stopped before answering".into())
                    .into(),
            )
        })
    }

    /// The writer of `t`: one store call per round, until the queue is
    /// empty (then the topic leaves the map, under the lock, so the next
    /// enqueue starts a new writer).
    async fn write(self: Arc<Self>, writer: Writer, t: Topic) {
        loop {
            let round = {
                let mut queues = self.queues.lock().expect("combiner lock");
                let Some(waiting) = queues.get_mut(&t) else {
                    return;
                };
                if waiting.is_empty() {
                    queues.remove(&t);
                    return;
                }
                take_round(waiting)
            };
            let (jobs, replies): (Vec<NewJob>, Vec<_>) = round.into_iter().unzip();
            match writer.write(&t, &jobs).await {
                // A store refuses a job it cannot keep before it writes
                // anything: the others of the call must not share that
                // answer, so each goes again alone.
                Err(Error::Store(StoreError::Invalid(_))) if jobs.len() > 1 => {
                    for (job, reply) in jobs.iter().zip(replies) {
                        let one = writer.write(&t, std::slice::from_ref(job)).await;
                        let _ = reply.send(one.and_then(|mut out| {
                            out.pop().ok_or_else(|| {
                                StoreError::Unavailable("the store answered no result".into())
                                    .into()
                            })
                        }));
                    }
                }
                Ok(out) if out.len() == replies.len() => {
                    for (reply, e) in replies.into_iter().zip(out) {
                        let _ = reply.send(Ok(e));
                    }
                }
                Ok(out) => {
                    let e = StoreError::Unavailable(format!(
                        "the store answered {} results for {} jobs",
                        out.len(),
                        replies.len()
                    ));
                    for reply in replies {
                        let _ = reply.send(Err(e.clone().into()));
                    }
                }
                Err(e) => {
                    for reply in replies {
                        let _ = reply.send(Err(e.clone()));
                    }
                }
            }
        }
    }
}

/// The jobs of the next store call: from the front of the queue, at most
/// [`MAX_BATCH`], stopping before a job whose id one of them has (it goes
/// in the next call, after the first is written).
fn take_round(waiting: &mut Vec<Waiting>) -> Vec<Waiting> {
    let mut ids = HashSet::new();
    let n = waiting
        .iter()
        .take(MAX_BATCH)
        .take_while(|(job, _)| job.id.as_ref().is_none_or(|id| ids.insert(id.clone())))
        .count();
    waiting.drain(..n).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use dq_core::{Body, JobId, When};

    fn job(id: Option<&str>) -> Waiting {
        let mut j = NewJob::with_generated_id(Body::Json("1".into()), When::TopicDefault);
        j.id = id.map(|i| JobId::new(i).unwrap());
        (j, oneshot::channel().0)
    }

    fn ids(round: &[Waiting]) -> Vec<Option<String>> {
        round
            .iter()
            .map(|(j, _)| j.id.as_ref().map(|i| i.as_str().to_string()))
            .collect()
    }

    #[test]
    fn a_round_stops_before_an_id_it_holds_and_at_the_batch_limit() {
        let mut q = vec![
            job(Some("a")),
            job(None),
            job(Some("b")),
            job(None),
            job(Some("a")),
            job(Some("c")),
        ];
        let first = take_round(&mut q);
        assert_eq!(
            ids(&first),
            [Some("a".into()), None, Some("b".into()), None]
        );
        assert_eq!(
            ids(&take_round(&mut q)),
            [Some("a".into()), Some("c".into())]
        );
        assert!(take_round(&mut q).is_empty());

        let mut q: Vec<Waiting> = (0..MAX_BATCH + 3).map(|_| job(None)).collect();
        assert_eq!(take_round(&mut q).len(), MAX_BATCH);
        assert_eq!(take_round(&mut q).len(), 3);
    }
}
