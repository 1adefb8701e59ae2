//! [`PoolSpec`]: one `[[pools]]` table, and its validation.

use crate::Micros;

/// Largest `concurrency`, `max_concurrency` and `queue` accepted: far above any real
/// upstream, low enough that nothing sized by them can exhaust memory.
pub const MAX_SLOTS: u32 = 1_000_000;
/// Largest `queue`.
pub const MAX_QUEUE: usize = 1_000_000;
/// Longest `max_wait` (one hour).
pub const MAX_WAIT: Micros = 3_600_000_000;
/// Most levels in one pool.
pub const MAX_LEVELS: usize = 64;
/// Largest share of one level, and largest route `weight`.
pub const MAX_SHARES: u32 = 1_000;
/// The one level of a pool that names none.
pub const DEFAULT_LEVEL: &str = "default";
/// `queue` when the table does not say.
pub const DEFAULT_QUEUE: usize = 1_000;
/// `max_wait` when the table does not say (5 s).
pub const DEFAULT_MAX_WAIT: Micros = 5_000_000;

/// How many requests may be in flight through the pool at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Capacity {
    /// A fixed number of slots.
    Fixed(u32),
    /// Follows the upstream's latency ([`AdaptiveLimit`](crate::AdaptiveLimit)) within
    /// `min..=max`.
    Adaptive {
        /// `min_concurrency`.
        min: u32,
        /// `max_concurrency`.
        max: u32,
    },
}

/// A pool as configured, before validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolSpec {
    /// The name routes refer to.
    pub name: String,
    /// `concurrency` (or adaptive with its bounds).
    pub capacity: Capacity,
    /// Requests waiting at once; beyond, 429. Zero: no queue, a request finding every slot
    /// taken is refused at once.
    pub queue: usize,
    /// Longest wait in the queue.
    pub max_wait: Micros,
    /// Levels and their shares, in configuration order. Empty: one level, `default`.
    pub levels: Vec<(String, u32)>,
}

impl PoolSpec {
    /// A pool of `concurrency` fixed slots with the default queue, wait and one level.
    pub fn fixed(name: impl Into<String>, concurrency: u32) -> PoolSpec {
        PoolSpec {
            name: name.into(),
            capacity: Capacity::Fixed(concurrency),
            queue: DEFAULT_QUEUE,
            max_wait: DEFAULT_MAX_WAIT,
            levels: Vec::new(),
        }
    }
    /// An adaptive pool within `min..=max` slots.
    pub fn adaptive(name: impl Into<String>, min: u32, max: u32) -> PoolSpec {
        PoolSpec {
            capacity: Capacity::Adaptive { min, max },
            ..PoolSpec::fixed(name, 1)
        }
    }
    /// Sets `queue`.
    pub fn queue(mut self, queue: usize) -> PoolSpec {
        self.queue = queue;
        self
    }
    /// Sets `max_wait`.
    pub fn max_wait_micros(mut self, max_wait: Micros) -> PoolSpec {
        self.max_wait = max_wait;
        self
    }
    /// Adds a level with `shares`.
    pub fn level(mut self, name: impl Into<String>, shares: u32) -> PoolSpec {
        self.levels.push((name.into(), shares));
        self
    }

    /// Checks every bound; the error names the field. The first of [`PoolSpec::problems`].
    pub fn validate(&self) -> Result<ValidPool, PoolError> {
        if let Some(first) = self.problems().into_iter().next() {
            return Err(first);
        }
        let mut valid = self.clone();
        if valid.levels.is_empty() {
            valid.levels.push((DEFAULT_LEVEL.to_owned(), 1));
        }
        Ok(ValidPool(valid))
    }

    /// Every bound this table breaks, in field order (empty: it is valid). Each error says
    /// which field it is about ([`PoolError::field`]), so a configuration reader can point
    /// at each one.
    pub fn problems(&self) -> Vec<PoolError> {
        let mut out = Vec::new();
        if !name_ok(&self.name) {
            out.push(PoolError::Name(self.name.clone()));
        }
        match self.capacity {
            Capacity::Fixed(n) if n == 0 || n > MAX_SLOTS => out.push(PoolError::Concurrency(n)),
            Capacity::Fixed(_) => {}
            Capacity::Adaptive { min, max } => {
                if min == 0 || min > MAX_SLOTS {
                    out.push(PoolError::MinConcurrency(min));
                }
                if max == 0 || max > MAX_SLOTS {
                    out.push(PoolError::MaxConcurrency(max));
                }
                if min > max {
                    out.push(PoolError::AdaptiveBounds { min, max });
                }
            }
        }
        if self.queue > MAX_QUEUE {
            out.push(PoolError::Queue(self.queue));
        }
        if self.max_wait == 0 || self.max_wait > MAX_WAIT {
            out.push(PoolError::MaxWait(self.max_wait));
        }
        if self.levels.len() > MAX_LEVELS {
            out.push(PoolError::TooManyLevels(self.levels.len()));
        }
        for (i, (level, shares)) in self.levels.iter().enumerate() {
            if !name_ok(level) {
                out.push(PoolError::LevelName(level.clone()));
            } else if self.levels[..i].iter().any(|(l, _)| l == level) {
                out.push(PoolError::DuplicateLevel(level.clone()));
            }
            if *shares == 0 || *shares > MAX_SHARES {
                out.push(PoolError::Shares(level.clone(), *shares));
            }
        }
        out
    }
}

/// Pool and level names: 1 to 64 characters of `[A-Za-z0-9_.-]` (safe as metric labels).
fn name_ok(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
}

/// The field of a `[[pools]]` table an error is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PoolField {
    /// `name`.
    Name,
    /// `concurrency`.
    Concurrency,
    /// `min_concurrency`.
    MinConcurrency,
    /// `max_concurrency`.
    MaxConcurrency,
    /// `queue`.
    Queue,
    /// `max_wait`.
    MaxWait,
    /// `levels` as a whole.
    Levels,
    /// One level's name (the key in `levels`).
    LevelName(String),
    /// One level's shares (the value in `levels`).
    LevelShares(String),
}

/// A validated [`PoolSpec`] (with its `default` level filled in when it named none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidPool(PoolSpec);

impl ValidPool {
    /// The validated table.
    pub fn spec(&self) -> &PoolSpec {
        &self.0
    }
    /// The pool's name.
    pub fn name(&self) -> &str {
        &self.0.name
    }
    /// The index of a level by name.
    pub fn level_index(&self, level: &str) -> Option<usize> {
        self.0.levels.iter().position(|(l, _)| l == level)
    }
}

/// Why a `[[pools]]` table is invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PoolError {
    /// `name`.
    #[error("pool name {0:?} must be 1 to 64 characters of [A-Za-z0-9_.-]")]
    Name(String),
    /// `concurrency`.
    #[error("concurrency must be from 1 to {MAX_SLOTS} or \"adaptive\", not {0}")]
    Concurrency(u32),
    /// `min_concurrency` out of range.
    #[error("min_concurrency must be from 1 to {MAX_SLOTS}, not {0}")]
    MinConcurrency(u32),
    /// `max_concurrency` out of range.
    #[error("max_concurrency must be from 1 to {MAX_SLOTS}, not {0}")]
    MaxConcurrency(u32),
    /// `min_concurrency` above `max_concurrency`.
    #[error("min_concurrency ({min}) is above max_concurrency ({max})")]
    AdaptiveBounds {
        /// `min_concurrency`.
        min: u32,
        /// `max_concurrency`.
        max: u32,
    },
    /// `queue`.
    #[error("queue must be at most {MAX_QUEUE}, not {0}")]
    Queue(usize),
    /// `max_wait`.
    #[error("max_wait must be above zero and at most 1h, not {} s", *.0 as f64 / 1e6)]
    MaxWait(Micros),
    /// Too many `levels`.
    #[error("at most {MAX_LEVELS} levels in a pool, not {0}")]
    TooManyLevels(usize),
    /// A level's name.
    #[error("level name {0:?} must be 1 to 64 characters of [A-Za-z0-9_.-]")]
    LevelName(String),
    /// The same level twice.
    #[error("level {0:?} is defined twice")]
    DuplicateLevel(String),
    /// A level's shares.
    #[error("level {0:?} needs 1 to {MAX_SHARES} shares, not {1}")]
    Shares(String, u32),
}

impl PoolError {
    /// The field the error is about.
    pub fn field(&self) -> PoolField {
        match self {
            PoolError::Name(_) => PoolField::Name,
            PoolError::Concurrency(_) => PoolField::Concurrency,
            PoolError::MinConcurrency(_) | PoolError::AdaptiveBounds { .. } => {
                PoolField::MinConcurrency
            }
            PoolError::MaxConcurrency(_) => PoolField::MaxConcurrency,
            PoolError::Queue(_) => PoolField::Queue,
            PoolError::MaxWait(_) => PoolField::MaxWait,
            PoolError::TooManyLevels(_) => PoolField::Levels,
            PoolError::LevelName(l) | PoolError::DuplicateLevel(l) => {
                PoolField::LevelName(l.clone())
            }
            PoolError::Shares(l, _) => PoolField::LevelShares(l.clone()),
        }
    }
}
