//! [`RedisConfig`]: where the Redis store connects and how long it waits, and
//! [`RedisStoreError`]: why a configuration is refused.

use std::time::Duration;

/// How to reach Redis and how the store behaves.
///
/// Exactly one of `url` (a standalone server) and `cluster` (Redis Cluster seed nodes) is set.
///
/// ```
/// use sluicegate_redis::RedisConfig;
/// let config = RedisConfig {
///     url: Some("redis://127.0.0.1:6379/0".into()),
///     ..RedisConfig::default()
/// };
/// assert_eq!(config.key_prefix, "sluicegate");
/// assert!(config.validate().is_ok());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisConfig {
    /// A standalone server: `redis://[user:password@]host:port[/db]`, or `rediss://…` for
    /// TLS. (`#insecure`, which skips certificate verification, works only in test builds:
    /// the `test-util` feature.)
    pub url: Option<String>,
    /// Redis Cluster seed nodes, e.g. `["redis://127.0.0.1:7000"]`.
    pub cluster: Vec<String>,
    /// Every key starts with this and a colon: `[A-Za-z0-9_.:-]`, 1 to 64 characters.
    pub key_prefix: String,
    /// The longest one store call may take; beyond it the call fails with
    /// `StoreError::Timeout` and the policy's `on_store_error` applies.
    pub timeout: Duration,
    /// Remember denials locally until their `retry_after`, skipping Redis meanwhile (see the
    /// crate docs). Off by default.
    pub local_cache: bool,
}

impl Default for RedisConfig {
    /// `redis://127.0.0.1:6379/0`, prefix `sluicegate`, timeout 50 ms, no local cache.
    fn default() -> Self {
        RedisConfig {
            url: Some("redis://127.0.0.1:6379/0".to_owned()),
            cluster: Vec::new(),
            key_prefix: "sluicegate".to_owned(),
            timeout: Duration::from_millis(50),
            local_cache: false,
        }
    }
}

impl RedisConfig {
    /// A standalone server at `url`, the other fields at their defaults.
    pub fn standalone(url: impl Into<String>) -> Self {
        RedisConfig {
            url: Some(url.into()),
            ..RedisConfig::default()
        }
    }

    /// A Redis Cluster reached through `seeds`, the other fields at their defaults.
    pub fn cluster<S: Into<String>>(seeds: impl IntoIterator<Item = S>) -> Self {
        RedisConfig {
            url: None,
            cluster: seeds.into_iter().map(Into::into).collect(),
            ..RedisConfig::default()
        }
    }

    /// Checks what can be checked without a server: one target, a usable prefix, a
    /// non-zero timeout. URLs are parsed by [`RedisStore::connect`](crate::RedisStore::connect).
    pub fn validate(&self) -> Result<(), RedisStoreError> {
        match (&self.url, self.cluster.is_empty()) {
            (Some(_), false) => return Err(RedisStoreError::BothTargets),
            (None, true) => return Err(RedisStoreError::NoTarget),
            _ => {}
        }
        let prefix_ok = !self.key_prefix.is_empty()
            && self.key_prefix.len() <= 64
            && self
                .key_prefix
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'));
        if !prefix_ok {
            return Err(RedisStoreError::InvalidPrefix(self.key_prefix.clone()));
        }
        if self.timeout.is_zero() {
            return Err(RedisStoreError::ZeroTimeout);
        }
        Ok(())
    }
}

/// Why the Redis store refuses a configuration or a policy. Redis being unreachable is not
/// one of them: the store starts anyway and reports `Unavailable` until Redis answers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RedisStoreError {
    /// Neither `url` nor `cluster`.
    #[error("the Redis store needs either a url or cluster seed nodes")]
    NoTarget,
    /// Both `url` and `cluster`.
    #[error("set either a Redis url or cluster seed nodes, not both")]
    BothTargets,
    /// A URL that does not parse.
    #[error("invalid Redis URL {url:?}: {reason}")]
    InvalidUrl {
        /// The URL, with any password replaced by `***`.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A key prefix that could break the key layout.
    #[error("key prefix {0:?} must be 1 to 64 characters of A-Z a-z 0-9 _ . : -")]
    InvalidPrefix(String),
    /// `timeout = 0`.
    #[error("the store timeout must be above zero")]
    ZeroTimeout,
    /// A policy whose numbers the Lua scripts cannot compute exactly.
    #[error("policy {policy:?} is outside the Redis store's exact range: {reason}")]
    OutOfRange {
        /// The policy.
        policy: String,
        /// Which product is too large, and the bound.
        reason: String,
    },
}

/// Hides the password of a URL for error messages.
pub(crate) fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    match rest.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{scheme}://{user}:***@{host}")
        }
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_configs() {
        let mut c = RedisConfig {
            cluster: vec!["redis://a:1".into()],
            ..RedisConfig::default()
        };
        assert_eq!(c.validate(), Err(RedisStoreError::BothTargets));
        c.url = None;
        c.cluster.clear();
        assert_eq!(c.validate(), Err(RedisStoreError::NoTarget));
        let mut c = RedisConfig {
            key_prefix: "a{b}".into(),
            ..RedisConfig::default()
        };
        assert!(matches!(
            c.validate(),
            Err(RedisStoreError::InvalidPrefix(_))
        ));
        c.key_prefix = String::new();
        assert!(matches!(
            c.validate(),
            Err(RedisStoreError::InvalidPrefix(_))
        ));
        let c = RedisConfig {
            timeout: Duration::ZERO,
            ..RedisConfig::default()
        };
        assert_eq!(c.validate(), Err(RedisStoreError::ZeroTimeout));
    }

    #[test]
    fn redacts_passwords() {
        assert_eq!(redact("redis://:s3cret@h:1/0"), "redis://:***@h:1/0");
        assert_eq!(redact("rediss://u:p@h:1"), "rediss://u:***@h:1");
        assert_eq!(redact("redis://h:1"), "redis://h:1");
    }
}
