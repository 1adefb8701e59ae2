//! `store.snapshot`: the memory store's state as bytes, written shard by shard (each shard's
//! lock is held only while its own states are copied into a buffer) and read back at start.
//!
//! Layout (little-endian): the magic `SLUICEGATE-SNAP\n`, a version, the store's key hash
//! key (fingerprints depend on it; the file must be as private as the process), the number
//! of shard blocks, each block prefixed by its length, then `END\n` and an FNV-1a 64 of
//! every byte before it. A block holds the shard's key overrides, then per policy its
//! numbers (name, algorithm, limit, period, burst, calendar), its states and its running
//! penalties. Reading checks the magic, the version and the checksum before applying
//! anything, so a foreign, truncated or corrupt file is refused whole.

use std::io::Write;
use std::sync::Arc;

use crate::calendar::{Calendar, CalendarUnit};
use crate::clock::{Clock, Micros};
use crate::overrides::Override;
use crate::policy::{AlgorithmKind, Policy};

use super::MemoryStore;
use super::fingerprint::{Fingerprint, KeyHasher};
use super::persist::{put_str, put_u32, put_u64, take, take_str, take_u8, take_u32, take_u64};
use super::registry::PolicyRef;

/// The first bytes of every snapshot.
pub(crate) const MAGIC: &[u8; 16] = b"SLUICEGATE-SNAP\n";
/// The layout's version.
pub(crate) const VERSION: u32 = 1;
const TRAILER: &[u8; 4] = b"END\n";

/// Why a snapshot was not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    /// The file does not start like a snapshot.
    #[error("not a sluicegate snapshot")]
    Foreign,
    /// Written by a version of sluicegate whose layout this one does not read.
    #[error("snapshot layout version {0}, this build reads {VERSION}")]
    Version(u32),
    /// Cut short, or changed since it was written.
    #[error("snapshot is truncated or corrupt ({0})")]
    Corrupt(&'static str),
}

/// What a snapshot held or restored.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SnapshotInfo {
    /// (policy, key) states written, or restored (expired ones are not).
    pub states: u64,
    /// Bytes of the snapshot.
    pub bytes: u64,
}

/// FNV-1a 64, the checksum of the whole file (a cheap guard against truncation and
/// corruption, not against an attacker, who could write the file anyway).
pub(crate) fn fnv64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// A writer that checksums what goes through it.
pub(crate) struct Summed<W: Write> {
    pub(crate) inner: W,
    pub(crate) hash: u64,
    pub(crate) bytes: u64,
}

impl<W: Write> Summed<W> {
    pub(crate) fn new(inner: W) -> Self {
        Summed {
            inner,
            hash: 0xcbf2_9ce4_8422_2325,
            bytes: 0,
        }
    }

    pub(crate) fn put(&mut self, data: &[u8]) -> std::io::Result<()> {
        for &b in data {
            self.hash ^= u64::from(b);
            self.hash = self.hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
        self.bytes += data.len() as u64;
        self.inner.write_all(data)
    }
}

fn algorithm_code(kind: AlgorithmKind) -> u8 {
    match kind {
        AlgorithmKind::FixedWindow => 1,
        AlgorithmKind::SlidingLog => 2,
        AlgorithmKind::SlidingWindow => 3,
        AlgorithmKind::TokenBucket => 4,
        AlgorithmKind::LeakyBucket => 5,
        AlgorithmKind::Gcra => 6,
        AlgorithmKind::Concurrency => 7,
    }
}

fn algorithm_of(code: u8) -> Option<AlgorithmKind> {
    let all = AlgorithmKind::ALL;
    match code {
        1..=6 => Some(all[usize::from(code) - 1]),
        7 => Some(AlgorithmKind::Concurrency),
        _ => None,
    }
}

const UNITS: [CalendarUnit; 4] = [
    CalendarUnit::Day,
    CalendarUnit::Week,
    CalendarUnit::Month,
    CalendarUnit::Year,
];

/// Appends the numbers that give a policy's states their meaning.
pub(crate) fn put_numbers(out: &mut Vec<u8>, p: &Policy) {
    put_str(out, p.name());
    out.push(algorithm_code(p.algorithm()));
    put_u64(out, p.limit());
    put_u64(out, p.period());
    put_u64(out, p.burst());
    match p.calendar() {
        Some(c) => {
            let unit = UNITS.iter().position(|u| *u == c.unit()).unwrap_or(0);
            out.push(unit as u8 + 1);
            put_str(out, c.zone());
        }
        None => out.push(0),
    }
}

/// Reads numbers written by [`put_numbers`] back into a policy that counts the same way.
pub(crate) fn take_numbers(input: &mut &[u8]) -> Option<Policy> {
    let name = take_str(input)?;
    let algorithm = algorithm_of(take_u8(input)?)?;
    let (limit, period, burst) = (take_u64(input)?, take_u64(input)?, take_u64(input)?);
    let calendar = match take_u8(input)? {
        0 => None,
        unit @ 1..=4 => Some(Calendar::new(UNITS[usize::from(unit) - 1], &take_str(input)?).ok()?),
        _ => return None,
    };
    let period_d = std::time::Duration::from_micros(period);
    let mut builder = Policy::builder(name, algorithm, limit, period_d);
    if algorithm.is_concurrency() {
        builder = builder.lease(period_d);
    } else {
        builder = builder.burst(burst);
    }
    if let Some(calendar) = calendar {
        builder = builder.calendar(calendar);
    }
    builder.build().ok()
}

/// The file's parts after the checks: the hash key and the shard blocks.
pub(crate) struct Parsed<'a> {
    pub(crate) key: (u64, u64),
    pub(crate) blocks: Vec<&'a [u8]>,
}

/// Checks magic, version, length and checksum; splits the blocks.
pub(crate) fn parse(bytes: &[u8]) -> Result<Parsed<'_>, SnapshotError> {
    if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
        return Err(SnapshotError::Foreign);
    }
    let corrupt = SnapshotError::Corrupt;
    if bytes.len() < MAGIC.len() + 4 + TRAILER.len() + 8 {
        return Err(corrupt("too short"));
    }
    let (body, tail) = bytes.split_at(bytes.len() - TRAILER.len() - 8);
    if &tail[..TRAILER.len()] != TRAILER {
        return Err(corrupt("no end marker"));
    }
    let sum = u64::from_le_bytes(tail[TRAILER.len()..].try_into().unwrap_or([0; 8]));
    let mut input = &body[MAGIC.len()..];
    let version = take_u32(&mut input).ok_or(corrupt("header"))?;
    if version != VERSION {
        return Err(SnapshotError::Version(version));
    }
    if fnv64(body) != sum {
        return Err(corrupt("checksum mismatch"));
    }
    let key = (
        take_u64(&mut input).ok_or(corrupt("header"))?,
        take_u64(&mut input).ok_or(corrupt("header"))?,
    );
    let n = take_u32(&mut input).ok_or(corrupt("header"))?;
    let mut blocks = Vec::new();
    for _ in 0..n {
        let len = take_u64(&mut input).ok_or(corrupt("block length"))?;
        let len = usize::try_from(len).map_err(|_| corrupt("block length"))?;
        blocks.push(take(&mut input, len).ok_or(corrupt("block"))?);
    }
    if !input.is_empty() {
        return Err(corrupt("bytes after the last block"));
    }
    Ok(Parsed { key, blocks })
}

/// The header: magic, version, hash key, number of blocks.
pub(crate) fn header(key: (u64, u64), blocks: usize) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    put_u32(&mut out, VERSION);
    put_u64(&mut out, key.0);
    put_u64(&mut out, key.1);
    put_u32(&mut out, u32::try_from(blocks).unwrap_or(u32::MAX));
    out
}

/// The trailer for a file whose bytes before it hash to `sum`.
pub(crate) fn trailer(sum: u64) -> Vec<u8> {
    let mut out = TRAILER.to_vec();
    put_u64(&mut out, sum);
    out
}

/// Writes a snapshot of a [`MemoryStore`] shard by shard: [`SnapshotWriter::copy_next`]
/// holds one shard's lock while it copies that shard's states into a block (the only
/// time decisions on that shard wait), [`SnapshotWriter::write`] writes the block out
/// without any lock. A caller can time each copy: it is the longest a decision can wait.
pub struct SnapshotWriter<'s, C: Clock, W: Write> {
    store: &'s MemoryStore<C>,
    out: Summed<W>,
    current: Vec<(Arc<Policy>, PolicyRef)>,
    next: usize,
    states: u64,
}

impl<C: Clock> MemoryStore<C> {
    /// Starts a snapshot into `out` (writes the header).
    pub fn snapshot_writer<W: Write>(&self, out: W) -> std::io::Result<SnapshotWriter<'_, C, W>> {
        let current = self
            .registry
            .refs()
            .into_iter()
            .filter_map(|(key, r)| key.policy().ok().map(|p| (Arc::new(p), r)))
            .collect();
        let mut out = Summed::new(out);
        out.put(&header(self.hasher.key(), self.shards.len()))?;
        Ok(SnapshotWriter {
            store: self,
            out,
            current,
            next: 0,
            states: 0,
        })
    }

    /// Writes a whole snapshot into `out` (see [`SnapshotWriter`]).
    pub fn write_snapshot<W: Write>(&self, out: W) -> std::io::Result<SnapshotInfo> {
        let mut writer = self.snapshot_writer(out)?;
        while let Some(block) = writer.copy_next() {
            writer.write(&block)?;
        }
        writer.finish()
    }

    /// Restores a snapshot into this store, which must be new (nothing decided yet): the
    /// key hash key, every state not expired by now, running penalties and key overrides.
    /// Policies come back with the numbers they were counted under; retaining the
    /// configured ones afterwards ([`MemoryStore::retain_policies`]) carries their states
    /// over or drops them. The whole file is checked before anything is applied.
    pub fn restore(&mut self, bytes: &[u8]) -> Result<SnapshotInfo, SnapshotError> {
        let parsed = parse(bytes)?;
        self.hasher = KeyHasher::from_key(parsed.key.0, parsed.key.1);
        let now = self.clock.now();
        let mut states = 0;
        let written_shards = parsed.blocks.len();
        for block in parsed.blocks {
            states += self
                .restore_block(block, now, written_shards)
                .ok_or(SnapshotError::Corrupt("block"))?;
        }
        Ok(SnapshotInfo {
            states,
            bytes: bytes.len() as u64,
        })
    }

    /// One block (one shard of the store that wrote it, out of `written_shards`).
    fn restore_block(&self, mut input: &[u8], now: Micros, written_shards: usize) -> Option<u64> {
        let input = &mut input;
        for _ in 0..take_u32(input)? {
            let name = take_str(input)?;
            let fp = Fingerprint::from_bits(take_u64(input)?)?;
            let value = match take_u8(input)? {
                1 => {
                    let (limit, burst, period) =
                        (take_u64(input)?, take_u64(input)?, take_u64(input)?);
                    Some(Override {
                        limit,
                        burst: (burst > 0).then_some(burst),
                        period: (period > 0).then_some(period),
                    })
                }
                _ => None,
            };
            let written = match take_u8(input)? {
                1 => Some(Arc::new(take_numbers(input)?)),
                _ => None,
            };
            self.shards[self.shard_of(fp)]
                .lock()
                .restore_override(fp, &name, value, written);
        }
        let mut states = 0;
        for _ in 0..take_u32(input)? {
            let policy = Arc::new(take_numbers(input)?);
            let r = self.registry.get_or_add(&policy);
            let count = take_u32(input)?;
            // The block's states go to one shard here, or spread evenly over several when
            // this store has more shards: each gets room for its share once, up front.
            let share = count as usize * written_shards / self.shards.len().max(written_shards);
            let mut reserved = vec![false; self.shards.len()];
            for _ in 0..count {
                let fp = Fingerprint::from_bits(take_u64(input)?)?;
                let s = self.shard_of(fp);
                let mut shard = self.shards[s].lock();
                if !std::mem::replace(&mut reserved[s], true) {
                    shard.reserve(&r, &policy, now, share + share / 8);
                }
                if shard.load_entry(&r, &policy, fp, input, now)? {
                    states += 1;
                }
            }
            for _ in 0..take_u32(input)? {
                let fp = Fingerprint::from_bits(take_u64(input)?)?;
                let end = take_u64(input)?;
                self.shards[self.shard_of(fp)]
                    .lock()
                    .restore_penalty(&r, fp, end, now);
            }
        }
        input.is_empty().then_some(states)
    }
}

impl<C: Clock, W: Write> SnapshotWriter<'_, C, W> {
    /// Copies the next shard (under its lock, and only while copying) into a block;
    /// `None` after the last.
    pub fn copy_next(&mut self) -> Option<Vec<u8>> {
        let shard = self.store.shards.get(self.next)?;
        self.next += 1;
        let now = self.store.clock.now();
        let mut block = Vec::new();
        self.states += shard.lock().save(&self.current, now, &mut block);
        Some(block)
    }

    /// Writes a block from [`SnapshotWriter::copy_next`] (no lock held).
    pub fn write(&mut self, block: &[u8]) -> std::io::Result<()> {
        self.out.put(&(block.len() as u64).to_le_bytes())?;
        self.out.put(block)
    }

    /// Writes the trailer; returns what was written and the writer.
    pub fn finish(mut self) -> std::io::Result<SnapshotInfo> {
        let sum = self.out.hash;
        let end = trailer(sum);
        self.out.inner.write_all(&end)?;
        self.out.inner.flush()?;
        Ok(SnapshotInfo {
            states: self.states,
            bytes: self.out.bytes + end.len() as u64,
        })
    }
}
