//! The shared connection's lifecycle: connecting, reconnecting, the circuit breaker, and
//! running one command within the store's timeout.

use std::future::Future;
use std::sync::Arc;
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
}

impl Link {
    /// Not connected yet: the first [`Link::probe_once`] connects.
    pub(crate) fn new(target: Target, timeout: Duration) -> Link {
        Link {
            target,
            timeout,
            current: RwLock::new(Current {
                generation: 0,
                conn: None,
            }),
            breaker: Breaker::default(),
            wake: Arc::new(Notify::new()),
        }
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
                let ping = redis::cmd("PING");
                let answer =
                    tokio::time::timeout(self.timeout * 2, ping.query_async::<()>(&mut conn));
                if let Ok(Ok(())) = answer.await {
                    self.breaker.success();
                    tracing::info!(store = self.kind(), "Redis answers again; circuit closed");
                    true
                } else {
                    if !self.is_cluster() {
                        self.drop_conn(generation);
                    }
                    false
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

    fn failed(&self, generation: u64, e: RedisError) -> StoreError {
        self.count_error("unavailable");
        let connection = e.is_io_error()
            || e.is_connection_dropped()
            || e.is_connection_refusal()
            || e.is_timeout()
            || e.is_unrecoverable_error();
        if connection {
            if self.breaker.failure() {
                self.wake.notify_one();
            }
            if !self.is_cluster() {
                self.drop_conn(generation);
            }
        } else {
            tracing::warn!(store = self.kind(), error = %e, "Redis refused a command");
        }
        unavailable(e.to_string())
    }
}
