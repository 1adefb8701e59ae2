//! The connection to Redis: one multiplexed connection to a standalone server, or one
//! cluster connection, shared (cloned) by every concurrent call. Commands from many tasks
//! are pipelined on it by the `redis` crate.

use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{
    AsyncConnectionConfig, Client, Cmd, IntoConnectionInfo, Pipeline, RedisFuture, RedisResult,
    Value,
};

use crate::config::{RedisConfig, RedisStoreError, redact};

/// Where to connect.
// One per store: the size difference between the variants does not matter.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Target {
    Single(Client),
    Cluster(ClusterClient),
}

/// A live connection; cheap to clone.
#[derive(Clone)]
pub(crate) enum Conn {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl Target {
    /// Parses the configuration's URLs; opens nothing yet.
    pub(crate) fn open(config: &RedisConfig) -> Result<Target, RedisStoreError> {
        // rustls needs a process-wide crypto provider for rediss://; the redis crate does not
        // pick one. Installing fails harmlessly when the application already chose one.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let invalid = |url: &str, e: redis::RedisError| RedisStoreError::InvalidUrl {
            url: redact(url),
            reason: e.to_string(),
        };
        if let Some(url) = &config.url {
            return Client::open(url.as_str())
                .map(Target::Single)
                .map_err(|e| invalid(url, e));
        }
        for seed in &config.cluster {
            seed.as_str()
                .into_connection_info()
                .map_err(|e| invalid(seed, e))?;
        }
        // Retries stay short: the store's own timeout and circuit breaker decide how long a
        // caller waits, and the cluster client must not outlast them with its backoff.
        ClusterClient::builder(config.cluster.iter().map(String::as_str))
            .retries(2)
            .min_retry_wait(5)
            .max_retry_wait(50)
            .connection_timeout(connect_timeout(config.timeout))
            .response_timeout(config.timeout)
            .build()
            .map(Target::Cluster)
            .map_err(|e| invalid(&config.cluster.join(","), e))
    }

    /// Opens a connection.
    pub(crate) async fn connect(&self, timeout: Duration) -> RedisResult<Conn> {
        match self {
            Target::Single(client) => {
                // Many tasks share this one connection: a deep queue and a large write
                // buffer let their commands go out in big pipelined writes.
                let config = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(connect_timeout(timeout)))
                    .set_response_timeout(None)
                    .set_pipeline_buffer_size(4096)
                    .set_write_backpressure_boundary(256 * 1024);
                client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await
                    .map(Conn::Single)
            }
            Target::Cluster(client) => client.get_async_connection().await.map(Conn::Cluster),
        }
    }

    /// `redis` or `redis-cluster`.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Target::Single(_) => "redis",
            Target::Cluster(_) => "redis-cluster",
        }
    }

    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self, Target::Cluster(_))
    }
}

/// Connecting (TCP, TLS, AUTH) may take longer than one command; still bounded.
pub(crate) fn connect_timeout(timeout: Duration) -> Duration {
    timeout.max(Duration::from_millis(500))
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}
