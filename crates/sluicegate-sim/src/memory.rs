//! How many bytes an algorithm's per-key state takes: the number the summary table reports.
//!
//! This is the algorithm's own state (what a store keeps per key and policy), not the key
//! string or the map entry around it, which cost the same for every algorithm.

use std::mem::size_of;

use sluicegate_core::algorithm::fixed_window::FixedWindowState;
use sluicegate_core::algorithm::gcra::GcraState;
use sluicegate_core::algorithm::leaky_bucket::LeakyBucketState;
use sluicegate_core::algorithm::sliding_log::SlidingLogState;
use sluicegate_core::algorithm::sliding_window::SlidingWindowState;
use sluicegate_core::algorithm::token_bucket::TokenBucketState;

/// Bytes held by one key's state, heap included.
///
/// ```
/// use sluicegate_sim::memory::StateBytes;
/// use sluicegate_core::algorithm::gcra::GcraState;
/// assert_eq!(GcraState::default().state_bytes(), 8);
/// ```
pub trait StateBytes {
    /// Bytes held now.
    fn state_bytes(&self) -> usize;
}

macro_rules! fixed_size {
    ($($t:ty),*) => {$(
        impl StateBytes for $t {
            fn state_bytes(&self) -> usize {
                size_of::<Self>()
            }
        }
    )*};
}

fixed_size!(
    FixedWindowState,
    SlidingWindowState,
    TokenBucketState,
    LeakyBucketState,
    GcraState
);

impl StateBytes for sluicegate_core::algorithm::concurrency::ConcurrencyState {
    fn state_bytes(&self) -> usize {
        size_of::<Self>() + self.leases.capacity() * size_of::<(u64, u64)>()
    }
}

impl StateBytes for SlidingLogState {
    fn state_bytes(&self) -> usize {
        size_of::<Self>() + self.entries.capacity() * size_of::<(u64, u64)>()
    }
}
