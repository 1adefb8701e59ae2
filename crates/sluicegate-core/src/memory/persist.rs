//! How each algorithm's per-key state is written into a snapshot and read back: fixed-width
//! little-endian integers, lists prefixed by their length. Reading never trusts the file:
//! every length is checked against what is left, so a corrupt or hostile file gives an
//! error, never a panic or an unbounded allocation.

use std::collections::VecDeque;

use crate::algorithm::concurrency::ConcurrencyState;
use crate::algorithm::fixed_window::FixedWindowState;
use crate::algorithm::gcra::GcraState;
use crate::algorithm::leaky_bucket::LeakyBucketState;
use crate::algorithm::sliding_log::SlidingLogState;
use crate::algorithm::sliding_window::SlidingWindowState;
use crate::algorithm::token_bucket::TokenBucketState;

/// Appends a `u64`.
pub(crate) fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Appends a `u32`.
pub(crate) fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Appends a short string (at most 65535 bytes; longer ones are cut, which no policy name is).
pub(crate) fn put_str(out: &mut Vec<u8>, s: &str) {
    let bytes = &s.as_bytes()[..s.len().min(usize::from(u16::MAX))];
    out.extend_from_slice(&(bytes.len() as u16).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// Takes `n` bytes off the front of `input`.
pub(crate) fn take<'a>(input: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    if input.len() < n {
        return None;
    }
    let (head, rest) = input.split_at(n);
    *input = rest;
    Some(head)
}

/// Reads a `u64`.
pub(crate) fn take_u64(input: &mut &[u8]) -> Option<u64> {
    take(input, 8).map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
}

/// Reads a `u32`.
pub(crate) fn take_u32(input: &mut &[u8]) -> Option<u32> {
    take(input, 4).map(|b| u32::from_le_bytes(b.try_into().unwrap_or([0; 4])))
}

/// Reads a `u8`.
pub(crate) fn take_u8(input: &mut &[u8]) -> Option<u8> {
    take(input, 1).map(|b| b[0])
}

/// Reads a string written by [`put_str`].
pub(crate) fn take_str(input: &mut &[u8]) -> Option<String> {
    let len = take(input, 2).map(|b| u16::from_le_bytes([b[0], b[1]]))?;
    let bytes = take(input, usize::from(len))?;
    String::from_utf8(bytes.to_vec()).ok()
}

/// A list of `(u64, u64)` pairs, its length checked against the bytes left.
fn take_pairs(input: &mut &[u8]) -> Option<VecDeque<(u64, u64)>> {
    let n = take_u32(input)? as usize;
    if n.checked_mul(16)? > input.len() {
        return None;
    }
    (0..n)
        .map(|_| Some((take_u64(input)?, take_u64(input)?)))
        .collect()
}

fn put_pairs(out: &mut Vec<u8>, pairs: &VecDeque<(u64, u64)>) {
    put_u32(out, u32::try_from(pairs.len()).unwrap_or(u32::MAX));
    for &(a, b) in pairs.iter().take(u32::MAX as usize) {
        put_u64(out, a);
        put_u64(out, b);
    }
}

/// A per-key state that a snapshot holds.
pub(crate) trait Persist: Sized {
    /// Appends the state.
    fn put(&self, out: &mut Vec<u8>);
    /// Reads one back; `None` when the bytes are not one.
    fn take(input: &mut &[u8]) -> Option<Self>;
}

impl Persist for FixedWindowState {
    fn put(&self, out: &mut Vec<u8>) {
        put_u64(out, self.window);
        put_u64(out, self.count);
    }
    fn take(input: &mut &[u8]) -> Option<Self> {
        Some(FixedWindowState {
            window: take_u64(input)?,
            count: take_u64(input)?,
        })
    }
}

impl Persist for SlidingWindowState {
    fn put(&self, out: &mut Vec<u8>) {
        put_u64(out, self.window);
        put_u64(out, self.previous);
        put_u64(out, self.current);
    }
    fn take(input: &mut &[u8]) -> Option<Self> {
        Some(SlidingWindowState {
            window: take_u64(input)?,
            previous: take_u64(input)?,
            current: take_u64(input)?,
        })
    }
}

impl Persist for TokenBucketState {
    fn put(&self, out: &mut Vec<u8>) {
        put_u64(out, self.tokens as u64);
        put_u64(out, self.last);
    }
    fn take(input: &mut &[u8]) -> Option<Self> {
        Some(TokenBucketState {
            tokens: take_u64(input)? as i64,
            last: take_u64(input)?,
        })
    }
}

impl Persist for LeakyBucketState {
    fn put(&self, out: &mut Vec<u8>) {
        put_u64(out, self.level);
        put_u64(out, self.last);
    }
    fn take(input: &mut &[u8]) -> Option<Self> {
        Some(LeakyBucketState {
            level: take_u64(input)?,
            last: take_u64(input)?,
        })
    }
}

impl Persist for GcraState {
    fn put(&self, out: &mut Vec<u8>) {
        put_u64(out, self.tat);
    }
    fn take(input: &mut &[u8]) -> Option<Self> {
        Some(GcraState {
            tat: take_u64(input)?,
        })
    }
}

impl Persist for SlidingLogState {
    fn put(&self, out: &mut Vec<u8>) {
        put_u64(out, self.base);
        put_pairs(out, &self.entries);
    }
    fn take(input: &mut &[u8]) -> Option<Self> {
        let base = take_u64(input)?;
        Some(SlidingLogState {
            entries: take_pairs(input)?,
            base,
        })
    }
}

impl Persist for ConcurrencyState {
    fn put(&self, out: &mut Vec<u8>) {
        put_u64(out, self.last);
        put_pairs(out, &self.leases);
    }
    fn take(input: &mut &[u8]) -> Option<Self> {
        let last = take_u64(input)?;
        Some(ConcurrencyState {
            leases: take_pairs(input)?,
            last,
        })
    }
}
