//! The shared connection's lifecycle: connecting, reconnecting, the circuit breaker, and
//! running one command within the store's timeout.

use std::future::Future;
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::RwLock;
use redis::{RedisError, RedisResult, Script};
use sluicegate_core::StoreError;
use tokio::sync::Notify;

use crate::breaker::Breaker;
use crate::conn::{Conn, Target, connect_timeout};
use crate::store::{METRIC_DURATION, METRIC_ERRORS};

/// A store error that is Redis's fault (the caller applies `on_store_error`).
pub(crate) fn unavailable(message: impl Into<String>) -> StoreError {
    StoreError::Unavailable(message.into())
}

/// Error replies that mean the server cannot decide for now: out of memory under
/// `maxmemory noeviction`, a replica (after a failover), loading its dataset, busy with a
/// script, cut off from its master, a cluster without the slot, or refusing writes because
/// it cannot persist. They are outages like a timeout: `on_store_error` applies and they
/// count towards the circuit breaker.
pub const OUTAGE_REPLIES: [&str; 9] = [
    "OOM",
    "READONLY",
    "LOADING",
    "BUSY",
    "MASTERDOWN",
    "CLUSTERDOWN",
    "TRYAGAIN",
    "MISCONF",
    "NOREPLICAS",
];

/// What a failed command says about Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The connection is broken: drop it and reconnect.
    Connection,
    /// Redis answers but cannot decide now (one of [`OUTAGE_REPLIES`]).
    Refusing,
    /// Any other error reply (a script error, `WRONGTYPE`, `NOPERM`…): a bug or a
    /// misconfiguration, never an outage, so never a reason to fail open.
    Internal,
}

/// Sorts a failed command into [`Failure`]s.
pub(crate) fn classify(e: &RedisError) -> Failure {
    if e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || e.is_unrecoverable_error()
    {
        return Failure::Connection;
    }
    let code = e.code().unwrap_or_default();
    if OUTAGE_REPLIES.contains(&code) {
        Failure::Refusing
    } else {
        Failure::Internal
    }
}

/// At most one log line a second for a kind of failure: a dead store must not flood the log.
#[derive(Debug, Default)]
pub(crate) struct LogEvery {
    /// Seconds since process start (plus one) of the last line.
    last: AtomicU64,
}

impl LogEvery {
    /// Whether a line may be written now (and claims it).
    pub(crate) fn ready(&self) -> bool {
        static START: OnceLock<Instant> = OnceLock::new();
        let now = START.get_or_init(Instant::now).elapsed().as_secs() + 1;
        let last = self.last.load(Ordering::Relaxed);
        now > last
            && self
                .last
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }
}

struct Current {
    /// Bumped on every change, so a failure seen on an old connection cannot drop a new one.
    generation: u64,
    conn: Option<Conn>,
}

/// The connection to Redis, shared by every call, and what decides whether to use it.
pub(crate) struct Link {
    target: Target,
    timeout: Duration,
    current: RwLock<Current>,
    breaker: Breaker,
    /// Wakes the background probe (see `store::probe_loop`).
    wake: Arc<Notify>,
    /// The key the probe writes: a write is what OOM, READONLY and MASTERDOWN refuse,
    /// where a `PING` would still succeed.
    probe_key: String,
    log: LogEvery,
}

impl Link {
    /// Not connected yet: the first [`Link::probe_once`] connects. `probe_key` is the key
    /// a health probe writes (with a one-second TTL).
    pub(crate) fn new(target: Target, timeout: Duration, probe_key: String) -> Link {
        Link {
            target,
            timeout,
            current: RwLock::new(Current {
                generation: 0,
                conn: None,
            }),
            breaker: Breaker::default(),
            wake: Arc::new(Notify::new()),
            probe_key,
            log: LogEvery::default(),
        }
    }

    /// A write with a short TTL: succeeds only where a decision could be written.
    pub(crate) fn probe_command(&self) -> redis::Cmd {
        let mut cmd = redis::cmd("SET");
        cmd.arg(&self.probe_key).arg(1).arg("PX").arg(1000);
        cmd
    }

    pub(crate) fn kind(&self) -> &'static str {
        self.target.kind()
    }

    pub(crate) fn is_cluster(&self) -> bool {
        self.target.is_cluster()
    }

    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// What the background probe waits on besides its interval.
    pub(crate) fn waker(&self) -> Arc<Notify> {
        Arc::clone(&self.wake)
    }

    pub(crate) fn is_connected(&self) -> bool {
        !self.breaker.is_open() && self.current.read().conn.is_some()
    }

    pub(crate) fn count_error(&self, label: &'static str) {
        metrics::counter!(METRIC_ERRORS, "store" => self.kind(), "error" => label).increment(1);
    }

    /// Connects if there is no connection (loading `script`), or pings if the circuit is
    /// open. Returns whether Redis is usable.
    pub(crate) async fn probe_once(&self, script: &Script) -> bool {
        let (generation, conn) = {
            let current = self.current.read();
            (current.generation, current.conn.clone())
        };
        match conn {
            None => {
                let limit = connect_timeout(self.timeout) * 2;
                let Ok(Ok(mut conn)) =
                    tokio::time::timeout(limit, self.target.connect(self.timeout)).await
                else {
                    return false;
                };
                // Loaded now so the first decision does not pay for a NOSCRIPT round trip;
                // if this fails, redis::Script loads it on first use anyway.
                let _ = tokio::time::timeout(limit, script.load_async(&mut conn)).await;
                {
                    let mut current = self.current.write();
                    current.generation += 1;
                    current.conn = Some(conn);
                }
                self.breaker.success();
                tracing::info!(store = self.kind(), "connected to Redis");
                true
            }
            Some(mut conn) if self.breaker.is_open() => {
                let probe = self.probe_command();
                let answer =
                    tokio::time::timeout(self.timeout * 2, probe.query_async::<()>(&mut conn));
                match answer.await {
                    Ok(Ok(())) => {
                        self.breaker.success();
                        tracing::info!(store = self.kind(), "Redis answers again; circuit closed");
                        true
                    }
                    // Redis answers, but still cannot decide: keep the connection.
                    Ok(Err(e)) if classify(&e) != Failure::Connection => false,
                    _ => {
                        if !self.is_cluster() {
                            self.drop_conn(generation);
                        }
                        false
                    }
                }
            }
            Some(_) => true,
        }
    }

    /// Forgets a dead connection (if it is still the current one) and wakes the prober.
    fn drop_conn(&self, generation: u64) {
        {
            let mut current = self.current.write();
            if current.generation == generation && current.conn.is_some() {
                current.conn = None;
                current.generation += 1;
            }
        }
        self.wake.notify_one();
    }

    /// The connection to use, or an immediate error while the circuit is open or there is
    /// no connection (the caller then applies `on_store_error` without waiting).
    fn conn(&self) -> Result<(u64, Conn), StoreError> {
        if self.breaker.is_open() {
            self.count_error("circuit_open");
            return Err(unavailable(
                "Redis failed repeatedly; failing fast until a probe succeeds",
            ));
        }
        let current = self.current.read();
        match &current.conn {
            Some(conn) => Ok((current.generation, conn.clone())),
            None => {
                drop(current);
                self.wake.notify_one();
                self.count_error("unavailable");
                Err(unavailable("not connected to Redis; reconnecting"))
            }
        }
    }

    /// Fails at once, as a call would, if the circuit is open or there is no connection.
    pub(crate) fn ready(&self) -> Result<(), StoreError> {
        self.conn().map(|_| ())
    }

    /// Runs one command within the timeout, feeding the circuit breaker and the metrics.
    pub(crate) async fn run<T, F, Fut>(&self, call: F) -> Result<T, StoreError>
    where
        F: FnOnce(Conn) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let (generation, conn) = self.conn()?;
        let started = Instant::now();
        let result = tokio::time::timeout(self.timeout, call(conn)).await;
        metrics::histogram!(METRIC_DURATION, "store" => self.kind())
            .record(started.elapsed().as_secs_f64());
        match result {
            Ok(Ok(value)) => {
                self.breaker.success();
                Ok(value)
            }
            Ok(Err(e)) => Err(self.failed(generation, e)),
            Err(_) => {
                self.count_error("timeout");
                if self.breaker.failure() {
                    self.wake.notify_one();
                }
                Err(StoreError::Timeout)
            }
        }
    }

    /// Classifies a failed command, feeds the breaker, logs (at most once a second).
    fn failed(&self, generation: u64, e: RedisError) -> StoreError {
        let failure = classify(&e);
        match failure {
            Failure::Connection | Failure::Refusing => {
                self.count_error("unavailable");
                if self.breaker.failure() {
                    self.wake.notify_one();
                }
                if failure == Failure::Connection && !self.is_cluster() {
                    self.drop_conn(generation);
                }
                if self.log.ready() {
                    tracing::warn!(store = self.kind(), error = %e, "Redis cannot decide; on_store_error applies");
                }
                unavailable(e.to_string())
            }
            Failure::Internal => {
                self.count_error("internal");
                if self.log.ready() {
                    tracing::error!(store = self.kind(), error = %e, "Redis refused a command; failing closed");
                }
                StoreError::Internal(e.to_string())
            }
        }
    }
}
