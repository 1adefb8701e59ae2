//! Coalesced reads of stale keys: a key not refreshed by the last exchange (new here, or
//! idle for `KEEP_FRESH` exchanges) is read from Redis before it decides. Reads from
//! concurrent requests share one `MGET` (per hash slot on a cluster), the way the exact
//! store coalesces its script calls (`coalesce.rs`): no timer, a dispatcher takes the
//! first queued read and whatever is already queued behind it; at most [`MAX_IN_FLIGHT`]
//! `MGET`s are in flight, and reads arriving meanwhile leave together in the next one.
//! Many keys going cold at once (a burst of new keys, a workload coming back) then cost
//! Redis and this process one command per batch, not one per key.

use std::sync::{Arc, Weak};

use futures_util::future::join_all;
use redis::cluster_routing::Slot;
use tokio::sync::{Semaphore, mpsc, oneshot};

use super::Synced;

/// Reads that may wait for the dispatcher.
pub(super) const QUEUE_DEPTH: usize = 16_384;
/// `MGET`s of coalesced reads in flight at once.
const MAX_IN_FLIGHT: usize = 4;
/// Window counts per `MGET`: one command never blocks Redis for long.
const READ_CHUNK: usize = 1024;

/// One item's read: the shared counts of its windows (one hash slot).
pub(super) struct ReadJob {
    pub(super) keys: Vec<Vec<u8>>,
    /// The counts in `keys`' order (absent key: 0); `None` when Redis did not answer.
    pub(super) reply: oneshot::Sender<Option<Vec<u64>>>,
}

/// Sends the queued reads in `MGET`s until the store is dropped.
pub(super) async fn dispatch(inner: Weak<Synced>, mut queue: mpsc::Receiver<ReadJob>) {
    let in_flight = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    while let Some(first) = queue.recv().await {
        // While every read is in flight, reads gather in the queue for the next one.
        let Ok(permit) = Arc::clone(&in_flight).acquire_owned().await else {
            return;
        };
        let mut count = first.keys.len();
        let mut jobs = vec![first];
        while count < READ_CHUNK {
            match queue.try_recv() {
                Ok(job) => {
                    count += job.keys.len();
                    jobs.push(job);
                }
                Err(_) => break,
            }
        }
        let Some(inner) = inner.upgrade() else {
            return;
        };
        tokio::spawn(async move {
            inner.read_jobs(jobs).await;
            drop(permit);
        });
    }
}

impl Synced {
    /// Reads `jobs` (one `MGET` per hash slot on a cluster, concurrently) and answers each.
    async fn read_jobs(&self, jobs: Vec<ReadJob>) {
        let cluster = self.redis.inner().link.is_cluster();
        let mut groups: Vec<(Option<Slot>, Vec<ReadJob>)> = Vec::new();
        for job in jobs {
            // A caller that gave up (dropped) needs no answer.
            if job.reply.is_closed() {
                continue;
            }
            let slot =
                cluster.then(|| Slot::for_key(job.keys.first().map_or(&[][..], Vec::as_slice)));
            match groups.iter_mut().find(|(s, _)| *s == slot) {
                Some((_, group)) => group.push(job),
                None => groups.push((slot, vec![job])),
            }
        }
        join_all(groups.into_iter().map(|(_, group)| self.mget(group))).await;
    }

    async fn mget(&self, jobs: Vec<ReadJob>) {
        let mut cmd = redis::cmd("MGET");
        for job in &jobs {
            cmd.arg(&job.keys);
        }
        let reply = self
            .redis
            .inner()
            .link
            .run(
                move |mut conn| async move { cmd.query_async::<Vec<Option<u64>>>(&mut conn).await },
            )
            .await;
        let expected: usize = jobs.iter().map(|j| j.keys.len()).sum();
        let mut values = match reply {
            Ok(values) if values.len() == expected => Some(values.into_iter()),
            _ => None,
        };
        for job in jobs {
            let counts = values.as_mut().map(|v| {
                v.by_ref()
                    .take(job.keys.len())
                    .map(|c| c.unwrap_or(0))
                    .collect()
            });
            let _ = job.reply.send(counts);
        }
    }
}
