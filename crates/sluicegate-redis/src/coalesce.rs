//! Coalescing: on a standalone server, single decisions that arrive while others are being
//! sent share one script call (up to [`BATCH_CHUNK`] requests), the way a batch does.
//!
//! Nothing waits on a timer for a batch to fill: a dispatcher takes the first queued request
//! and whatever else is already queued behind it, and sends them; at most
//! [`MAX_IN_FLIGHT`] calls are in flight at once (pipelined on the shared connection), and
//! requests arriving while all are busy queue up and leave together in the next call. Under
//! light load a call carries one request and leaves at once; under heavy load the per-call
//! cost on Redis (running the script's setup, reading the time) and on the client (encoding,
//! parsing, waking) is paid once for many decisions. Each request is still decided
//! atomically and in one round trip: the script handles the requests of a call one after
//! the other, at the same server time.

use std::sync::{Arc, Weak};

use sluicegate_core::{StoreError, Verdict};
use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::script::Item;
use crate::store::{BATCH_CHUNK, Inner};

/// Requests that may wait for the dispatcher.
pub(crate) const QUEUE_DEPTH: usize = 16_384;

/// Script calls of coalesced requests in flight at once.
pub const MAX_IN_FLIGHT: usize = 4;

/// One request waiting to be sent.
pub(crate) struct Job {
    pub items: Vec<Item>,
    pub reply: oneshot::Sender<Result<Verdict, StoreError>>,
}

/// Sends the queued requests in script calls until the store is dropped.
pub(crate) async fn dispatch(inner: Weak<Inner>, mut queue: mpsc::Receiver<Job>) {
    let in_flight = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    while let Some(first) = queue.recv().await {
        // While every call is in flight, requests gather in the queue for the next one.
        let Ok(permit) = Arc::clone(&in_flight).acquire_owned().await else {
            return;
        };
        let mut jobs = Vec::with_capacity(BATCH_CHUNK);
        jobs.push(first);
        while jobs.len() < BATCH_CHUNK {
            match queue.try_recv() {
                Ok(job) => jobs.push(job),
                Err(_) => break,
            }
        }
        // A caller that gave up (its timeout passed while queued) has already applied
        // on_store_error: its request must not consume anything any more.
        jobs.retain(|job| !job.reply.is_closed());
        if jobs.is_empty() {
            continue;
        }
        let Some(inner) = inner.upgrade() else {
            return;
        };
        tokio::spawn(async move {
            let requests: Vec<&[Item]> = jobs.iter().map(|j| j.items.as_slice()).collect();
            let outcome = inner.decide(&requests, None).await;
            drop(requests);
            drop(permit);
            match outcome {
                Ok(verdicts) => {
                    for (job, verdict) in jobs.into_iter().zip(verdicts) {
                        let _ = job.reply.send(Ok(verdict));
                    }
                }
                Err(e) => {
                    for job in jobs {
                        let _ = job.reply.send(Err(e.clone()));
                    }
                }
            }
        });
    }
}
