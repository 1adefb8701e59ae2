//! The one way every entry point asks a store for a decision: the HTTP middleware, the
//! decision API (single and batch) and the Envoy service all go through a [`Decider`], so
//! "call the store, bound the call by a timeout, answer a failure by each policy's
//! `on_store_error`, tell the observer" is written once.
//!
//! Core has no runtime, so the timer is the caller's: a [`Timer`] that sleeps (the tokio one
//! is a two-line impl in the crates that run on tokio).

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use crate::store::{BoxFuture, CheckRequest, KeyedCheck, Store, StoreError};
use crate::verdict::{NoObserver, Verdict, VerdictObserver};

/// Sleeps on the caller's runtime; how a [`Decider`] bounds a store call without one.
pub trait Timer: Send + Sync + 'static {
    /// A future that completes once `duration` has passed.
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()>;
}

/// What a [`Decider`] decided for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decided {
    /// The verdict: the store's, or every policy's `on_store_error` when it failed.
    pub verdict: Verdict,
    /// The store failure (timeout, unreachable) that `on_store_error` answered, for the
    /// caller to log; `None` when the store decided.
    pub failure: Option<StoreError>,
}

/// A store with its timeout and observer: the one decision path.
///
/// ```
/// use std::{sync::Arc, time::Duration};
/// use sluicegate_core::{AlgorithmKind, CheckRequest, Decider, MemoryStore, Policy};
/// # fn block_on<F: std::future::Future>(f: F) -> F::Output {
/// #     let mut f = std::pin::pin!(f);
/// #     let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
/// #     loop { if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) { return v } }
/// # }
/// let decider = Decider::new(Arc::new(MemoryStore::new(1_000)));
/// let policies = [Arc::new(
///     Policy::builder("p", AlgorithmKind::FixedWindow, 1, Duration::from_secs(60)).build()?,
/// )];
/// let first = block_on(decider.check(CheckRequest::new(&policies, "k", 1)))?;
/// let second = block_on(decider.check(CheckRequest::new(&policies, "k", 1)))?;
/// assert!(first.verdict.allowed && !second.verdict.allowed);
/// // A mistake of the caller's is an error, not a store failure.
/// assert!(block_on(decider.check(CheckRequest::new(&policies, "", 1))).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct Decider {
    store: Arc<dyn Store>,
    observer: Arc<dyn VerdictObserver>,
    timeout: Option<(Duration, Arc<dyn Timer>)>,
}

impl std::fmt::Debug for Decider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decider")
            .field("store", &self.store.kind())
            .field("timeout", &self.timeout.as_ref().map(|(t, _)| t))
            .finish_non_exhaustive()
    }
}

impl Decider {
    /// Decisions from `store`, unbounded in time and observed by no one.
    pub fn new(store: Arc<dyn Store>) -> Self {
        Decider {
            store,
            observer: Arc::new(NoObserver),
            timeout: None,
        }
    }

    /// Who sees every decided request (metrics, the dashboard).
    pub fn with_observer(mut self, observer: Arc<dyn VerdictObserver>) -> Self {
        self.observer = observer;
        self
    }

    /// Bounds every store call by `timeout`, slept on `timer`; past it, `on_store_error`
    /// decides. `None` leaves calls unbounded (stores with their own timeout, like Redis).
    pub fn with_timeout(mut self, timeout: Option<Duration>, timer: Arc<dyn Timer>) -> Self {
        self.timeout = timeout.map(|t| (t, timer));
        self
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The observer.
    pub fn observer(&self) -> &Arc<dyn VerdictObserver> {
        &self.observer
    }

    /// Decides one request (and consumes if admitted). `Err` for a mistake of the caller's
    /// ([`StoreError::is_bad_request`]) or an error of the configuration or the code (never
    /// answered by `on_store_error`); an outage of the store is answered by each policy's
    /// `on_store_error`. Observed unless `cost` is 0 (a read is not a decision).
    pub async fn check(&self, request: CheckRequest<'_>) -> Result<Decided, StoreError> {
        let decided = self.check_unobserved(request).await?;
        if request.cost > 0 {
            self.observer.observe(request.key, &decided.verdict);
        }
        Ok(decided)
    }

    /// [`Decider::check`] without telling the observer: for a caller that may still change
    /// the verdict (the middleware refuses a delayed request when `max_waiting` is full)
    /// and then calls [`Decider::observe`] with the final one, so that metrics count what
    /// the client got.
    ///
    /// A store that answers at once ([`Store::check_immediate`]: the in-memory one) is
    /// asked so, without a boxed future or a timeout's sleep: it cannot time out.
    pub async fn check_unobserved(&self, request: CheckRequest<'_>) -> Result<Decided, StoreError> {
        if let Some(decided) = self.check_now_unobserved(request) {
            return decided;
        }
        let result = self.bounded(self.store.check(request)).await;
        settle(result, || Verdict::store_failed(request.policies))
    }

    /// [`Decider::check_unobserved`] answered on the caller's thread by a store that answers
    /// at once ([`Store::check_immediate`]); `None`, having done nothing, when the store
    /// answers only through a future. For a caller with no future of its own to put the
    /// decision in (the tower layer decides in `Service::call`).
    pub fn check_now_unobserved(
        &self,
        request: CheckRequest<'_>,
    ) -> Option<Result<Decided, StoreError>> {
        let result = self.store.check_immediate(request)?;
        Some(settle(result, || Verdict::store_failed(request.policies)))
    }

    /// Decides independent requests in one store call; answers in request order, each as
    /// [`Decider::check`] would. A timeout fails every request of the batch.
    pub async fn check_batch(
        &self,
        requests: &[CheckRequest<'_>],
    ) -> Vec<Result<Decided, StoreError>> {
        let results = match self.bounded(batch(&*self.store, requests)).await {
            Ok(results) => results,
            Err(failure) => vec![Err(failure); requests.len()],
        };
        requests
            .iter()
            .zip(results)
            .map(|(request, result)| {
                let decided = settle(result, || Verdict::store_failed(request.policies))?;
                if request.cost > 0 {
                    self.observer.observe(request.key, &decided.verdict);
                }
                Ok(decided)
            })
            .collect()
    }

    /// Decides policies each under its own key and cost in one atomic step
    /// ([`Store::check_keyed`]), bounded and failing like [`Decider::check`]. Not observed:
    /// the caller knows how its items group into clients (the Envoy service observes each
    /// descriptor) and calls [`Decider::observe`].
    pub async fn check_keyed(&self, items: &[KeyedCheck<'_>]) -> Result<Decided, StoreError> {
        let result = self.bounded(self.store.check_keyed(items)).await;
        settle(result, || {
            Verdict::store_failed_each(items.iter().map(|i| i.policy))
        })
    }

    /// Tells the observer about a verdict decided through [`Decider::check_keyed`] or
    /// [`Decider::check_unobserved`].
    pub fn observe(&self, key: &str, verdict: &crate::verdict::VerdictOf<'_>) {
        self.observer.observe(key, verdict);
    }

    /// `call`, or [`StoreError::Timeout`] once the timeout has passed.
    async fn bounded<T>(
        &self,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let Some((timeout, timer)) = &self.timeout else {
            return call.await;
        };
        let mut call = pin!(call);
        let mut sleep = timer.sleep(*timeout);
        std::future::poll_fn(|cx| {
            if let Poll::Ready(result) = call.as_mut().poll(cx) {
                return Poll::Ready(result);
            }
            match sleep.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(StoreError::Timeout)),
                Poll::Pending => Poll::Pending,
            }
        })
        .await
    }
}

/// A batch as one fallible call, so [`Decider::bounded`] can time it out as a whole.
async fn batch(
    store: &dyn Store,
    requests: &[CheckRequest<'_>],
) -> Result<Vec<Result<Verdict, StoreError>>, StoreError> {
    Ok(store.check_batch(requests).await)
}

/// The `on_store_error` rule: an outage ([`StoreError::is_outage`]) becomes the `failed`
/// verdict; the caller's mistakes and errors of the configuration or the code stay errors,
/// so they can never fail open.
fn settle(
    result: Result<Verdict, StoreError>,
    failed: impl FnOnce() -> Verdict,
) -> Result<Decided, StoreError> {
    match result {
        Ok(verdict) => Ok(Decided {
            verdict,
            failure: None,
        }),
        Err(error) if !error.is_outage() => Err(error),
        Err(error) => Ok(Decided {
            verdict: failed(),
            failure: Some(error),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{AlgorithmKind, OnStoreError, Policy};
    use crate::verdict::Outcome;
    use std::sync::Mutex;
    use std::task::{Context, Waker};

    fn block_on<F: Future>(f: F) -> F::Output {
        let mut f = pin!(f);
        let mut cx = Context::from_waker(Waker::noop());
        loop {
            if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
                return v;
            }
        }
    }

    /// A store that never answers, as a dead Redis behind a lost packet.
    struct Silent;
    impl Store for Silent {
        fn check<'a>(&'a self, _: CheckRequest<'a>) -> BoxFuture<'a, Result<Verdict, StoreError>> {
            Box::pin(std::future::pending())
        }
        fn refund<'a>(
            &'a self,
            _: &'a [Arc<Policy>],
            _: &'a str,
            _: u64,
        ) -> BoxFuture<'a, Result<(), StoreError>> {
            Box::pin(std::future::pending())
        }
        fn reset<'a>(&'a self, _: &'a Policy, _: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
            Box::pin(std::future::pending())
        }
        fn ping(&self) -> BoxFuture<'_, Result<(), StoreError>> {
            Box::pin(std::future::pending())
        }
        fn kind(&self) -> &'static str {
            "silent"
        }
    }

    /// A timer whose sleeps are already over: the timeout fires at the first poll.
    struct Elapsed;
    impl Timer for Elapsed {
        fn sleep(&self, _: Duration) -> BoxFuture<'static, ()> {
            Box::pin(std::future::ready(()))
        }
    }

    #[derive(Default)]
    struct Seen(Mutex<Vec<(String, Outcome)>>);
    impl VerdictObserver for Seen {
        fn observe(&self, key: &str, verdict: &crate::VerdictOf<'_>) {
            let mut seen = self.0.lock().unwrap();
            seen.extend(
                verdict
                    .decisions
                    .iter()
                    .map(|d| (key.to_owned(), d.outcome)),
            );
        }
    }

    fn policy(name: &str, on_error: OnStoreError) -> Arc<Policy> {
        Arc::new(
            Policy::builder(name, AlgorithmKind::Gcra, 5, Duration::from_secs(1))
                .on_store_error(on_error)
                .build()
                .unwrap(),
        )
    }

    /// A memory store that answers at once, and never through `check` (which stays
    /// pending, as a store past its timeout): the decider must take the immediate answer.
    struct AtOnce(crate::MemoryStore);
    impl Store for AtOnce {
        fn check<'a>(&'a self, _: CheckRequest<'a>) -> BoxFuture<'a, Result<Verdict, StoreError>> {
            Box::pin(std::future::pending())
        }
        fn check_immediate(
            &self,
            request: CheckRequest<'_>,
        ) -> Option<Result<Verdict, StoreError>> {
            self.0.check_immediate(request)
        }
        fn refund<'a>(
            &'a self,
            _: &'a [Arc<Policy>],
            _: &'a str,
            _: u64,
        ) -> BoxFuture<'a, Result<(), StoreError>> {
            Box::pin(std::future::pending())
        }
        fn reset<'a>(&'a self, _: &'a Policy, _: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
            Box::pin(std::future::pending())
        }
        fn ping(&self) -> BoxFuture<'_, Result<(), StoreError>> {
            Box::pin(std::future::pending())
        }
        fn kind(&self) -> &'static str {
            "at-once"
        }
    }

    #[test]
    fn a_store_that_answers_at_once_is_asked_so_and_cannot_time_out() {
        let seen = Arc::new(Seen::default());
        let decider = Decider::new(Arc::new(AtOnce(crate::MemoryStore::new(100))))
            .with_observer(Arc::clone(&seen) as Arc<dyn VerdictObserver>)
            .with_timeout(Some(Duration::from_millis(5)), Arc::new(Elapsed));
        let closed = [policy("closed", OnStoreError::Deny)];
        let request = CheckRequest::new(&closed, "a", 1);
        // The policy admits 5: the store's own decisions, not `on_store_error`'s.
        for _ in 0..5 {
            let decided = block_on(decider.check(request)).unwrap();
            assert!(decided.verdict.allowed);
            assert_eq!(decided.failure, None);
        }
        let denied = block_on(decider.check(request)).unwrap();
        assert!(!denied.verdict.allowed);
        assert_eq!(denied.failure, None);
        let seen = seen.0.lock().unwrap();
        assert_eq!(seen.len(), 6);
        assert_eq!(seen[5].1, Outcome::Denied);
    }

    #[test]
    fn the_memory_store_answers_at_once_as_through_check_and_arc_forwards_it() {
        let (at_once, through_check) = (
            Arc::new(crate::MemoryStore::new(100)),
            crate::MemoryStore::new(100),
        );
        let policies = [policy("p", OnStoreError::Allow)];
        for key in ["a", "a", "b", "a", "a", "a", "a", "b"] {
            let request = CheckRequest::new(&policies, key, 1);
            let immediate = Store::check_immediate(&at_once, request).expect("answers at once");
            let checked = block_on(through_check.check(request));
            assert_eq!(immediate.map(|v| v.allowed), checked.map(|v| v.allowed));
        }
        assert!(
            Silent
                .check_immediate(CheckRequest::new(&policies, "a", 1))
                .is_none()
        );
    }

    #[test]
    fn a_timed_out_store_is_answered_by_on_store_error_and_observed() {
        let seen = Arc::new(Seen::default());
        let decider = Decider::new(Arc::new(Silent))
            .with_observer(Arc::clone(&seen) as Arc<dyn VerdictObserver>)
            .with_timeout(Some(Duration::from_millis(5)), Arc::new(Elapsed));
        let open = [policy("open", OnStoreError::Allow)];
        let closed = [
            policy("open", OnStoreError::Allow),
            policy("closed", OnStoreError::Deny),
        ];
        let a = block_on(decider.check(CheckRequest::new(&open, "a", 1))).unwrap();
        assert!(a.verdict.allowed);
        assert_eq!(a.failure, Some(StoreError::Timeout));
        let b = block_on(decider.check(CheckRequest::new(&closed, "b", 1))).unwrap();
        assert!(!b.verdict.allowed);
        assert_eq!(b.verdict.retry_after(), Some(1_000_000));
        let seen = seen.0.lock().unwrap();
        assert_eq!(seen.len(), 3);
        assert!(seen.iter().all(|(_, o)| *o == Outcome::StoreError));
        assert_eq!(seen[0].0, "a");
    }

    #[test]
    fn a_timed_out_batch_fails_every_request_and_keyed_checks_time_out_too() {
        let decider = Decider::new(Arc::new(Silent))
            .with_timeout(Some(Duration::from_millis(5)), Arc::new(Elapsed));
        let open = [policy("open", OnStoreError::Allow)];
        let closed = [policy("closed", OnStoreError::Deny)];
        let requests = [
            CheckRequest::new(&open, "a", 1),
            CheckRequest::new(&closed, "b", 1),
        ];
        let results = block_on(decider.check_batch(&requests));
        let allowed: Vec<bool> = results
            .iter()
            .map(|r| r.as_ref().unwrap().verdict.allowed)
            .collect();
        assert_eq!(allowed, [true, false]);
        let items = [
            KeyedCheck::new(&closed[0], "b", 1),
            KeyedCheck::new(&open[0], "b", 1),
        ];
        let keyed = block_on(decider.check_keyed(&items)).unwrap();
        assert_eq!(keyed.failure, Some(StoreError::Timeout));
        assert!(!keyed.verdict.allowed);
        assert_eq!(keyed.verdict.decisions.len(), 2);
    }

    #[test]
    fn reads_and_the_callers_mistakes_are_not_observed() {
        let seen = Arc::new(Seen::default());
        let decider = Decider::new(Arc::new(crate::MemoryStore::new(100)))
            .with_observer(Arc::clone(&seen) as Arc<dyn VerdictObserver>);
        let p = [policy("p", OnStoreError::Allow)];
        assert!(block_on(decider.check(CheckRequest::new(&p, "k", 0))).is_ok());
        let over = block_on(decider.check(CheckRequest::new(&p, "k", 6)));
        assert!(matches!(over, Err(StoreError::CostOverCapacity { .. })));
        assert!(seen.0.lock().unwrap().is_empty());
        assert!(block_on(decider.check(CheckRequest::new(&p, "k", 1))).is_ok());
        assert_eq!(seen.0.lock().unwrap().len(), 1);
    }
}
