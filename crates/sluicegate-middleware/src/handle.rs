//! [`LimiterHandle`]: the current [`RateLimiter`], swappable at run time (configuration
//! reload) without locking the request path.

use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::limiter::RateLimiter;

/// A shared, atomically replaceable [`RateLimiter`]. Clones share the same slot: store a
/// new limiter and every layer and server path holding a clone uses it for the next
/// request; requests in flight finish with the one they started with.
///
/// ```
/// use std::sync::Arc;
/// use sluicegate_core::MemoryStore;
/// use sluicegate_middleware::{LimiterHandle, RateLimiter, RateLimitLayer};
///
/// let store = Arc::new(MemoryStore::new(1000));
/// let handle = LimiterHandle::new(RateLimiter::builder(store.clone()).build()?);
/// let layer = RateLimitLayer::from_handle(handle.clone());
/// // Later, on reload:
/// handle.replace(RateLimiter::builder(store).build()?);
/// # Ok::<(), sluicegate_middleware::BuildError>(())
/// ```
#[derive(Clone)]
pub struct LimiterHandle(Arc<ArcSwap<RateLimiter>>);

impl LimiterHandle {
    /// A handle holding `limiter`.
    pub fn new(limiter: RateLimiter) -> Self {
        LimiterHandle(Arc::new(ArcSwap::from_pointee(limiter)))
    }

    /// The current limiter.
    pub fn load(&self) -> Arc<RateLimiter> {
        self.0.load_full()
    }

    /// The current limiter without counting a reference (arc-swap's guard): for a request
    /// that is decided before its future is made.
    pub(crate) fn current(&self) -> arc_swap::Guard<Arc<RateLimiter>> {
        self.0.load()
    }

    /// Replaces the limiter.
    pub fn replace(&self, limiter: RateLimiter) {
        self.0.store(Arc::new(limiter));
    }
}

impl std::fmt::Debug for LimiterHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("LimiterHandle")
            .field(&*self.0.load())
            .finish()
    }
}

impl From<RateLimiter> for LimiterHandle {
    fn from(limiter: RateLimiter) -> Self {
        LimiterHandle::new(limiter)
    }
}
