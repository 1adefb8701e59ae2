//! The configuration model: what a TOML file (or the embedded default) says, validated.
//!
//! [`load`] parses and validates a file's text, collecting *every* error with its line and
//! column ([`Diagnostics`]); the same function runs for `validate`, at start and on reload.
//! Command-line flags are applied on top by [`Overrides`].

mod diagnostic;
mod parse;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;
use sluicegate_core::Policy;
use sluicegate_envoy::EnvoySection;
use sluicegate_middleware::{ClientIpHeader, HeaderSet, RouteSpec};

pub use diagnostic::{Diagnostic, Diagnostics};

/// Default bound on the keys the in-memory store tracks (core's, the one definition).
pub use sluicegate_core::memory::DEFAULT_MAX_KEYS;

/// A validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// `[server]`: the decision API listener and request handling.
    pub server: ServerConfig,
    /// `[store]`: where limiter state lives.
    pub store: StoreConfig,
    /// `[[policies]]`, in file order; names are unique.
    pub policies: Vec<Arc<Policy>>,
    /// `[[overrides]]`: per-key limits, each checked against its policy.
    pub overrides: Vec<ConfigOverride>,
    /// `[[routes]]`, in file order.
    pub routes: Vec<RouteSpec>,
    /// `[[pools]]` (fair throttling), in file order; names are unique.
    pub pools: Vec<sluicegate_throttle::ValidPool>,
    /// `[gateway]`: the reverse proxy, when configured.
    pub gateway: Option<GatewayConfig>,
    /// `[envoy]`: the Envoy rate limit service, when configured.
    pub envoy: Option<EnvoySection>,
}

/// One `[[overrides]]` entry: `key`'s own numbers under the policy named `policy`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigOverride {
    /// The policy's name.
    pub policy: String,
    /// The client key.
    pub key: String,
    /// The numbers (checked against the policy).
    pub value: sluicegate_core::Override,
}

/// `[server]`.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    /// Address of the decision API, admin endpoints and `/metrics`.
    pub listen: SocketAddr,
    /// Peers allowed to set `X-Forwarded-For` / `Forwarded`.
    pub trusted_proxies: Vec<IpNet>,
    /// IPv6 clients are keyed by this prefix length.
    pub ipv6_prefix: u8,
    /// Bearer token for the admin endpoints; they are disabled without one.
    pub admin_token: Option<String>,
    /// Which rate-limit header sets responses carry: `draft-6`, `ietf`, `legacy`.
    pub headers: Vec<HeaderSet>,
    /// Status of a denied forward-auth request.
    pub forward_auth_deny_status: u16,
    /// The one header trusted proxies name the client in.
    pub client_ip_header: ClientIpHeader,
    /// The header pair forward-auth reads the original request from.
    pub forward_auth_source: ForwardAuthSource,
    /// Bearer token for `/v1/*` and `/dashboard*` (the admin token also passes).
    pub api_token: Option<String>,
    /// Connection limits of the HTTP listeners (API and gateway).
    pub connections: ConnectionLimits,
    /// Delay mode: requests waiting for their turn at once; beyond, rejected.
    pub max_waiting: usize,
    /// Clients (CIDRs) never limited.
    pub allow: Vec<IpNet>,
    /// Clients (CIDRs) always refused with 403 `forbidden`.
    pub deny: Vec<IpNet>,
    /// Signs reservations and API leases (HMAC-SHA256). Instances sharing a Redis store
    /// must share it so that one settles what another reserved; without it each process
    /// signs with a random key of its own.
    pub reservation_secret: Option<String>,
    /// How long a reservation can be settled after its admission.
    pub reservation_ttl: Duration,
}

/// Default of `server.reservation_ttl`.
pub const DEFAULT_RESERVATION_TTL: Duration = Duration::from_secs(600);

/// `server.header_read_timeout`, `idle_timeout`, `max_connections`: what one HTTP
/// listener allows, so slow or idle clients cannot tie it up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// A connection that has not sent a complete request head by then (from its first
    /// byte, or from the accept) is closed.
    pub header_read_timeout: Duration,
    /// A keep-alive connection with no request, or a request with no traffic either way,
    /// for this long is closed.
    pub idle_timeout: Duration,
    /// Connections served at once per listener; beyond, new ones wait in the backlog.
    pub max_connections: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_connections: 10_000,
        }
    }
}

/// Default of `server.max_waiting`.
pub const DEFAULT_MAX_WAITING: usize = 10_000;

/// `server.forward_auth_source`: which header pair describes the original request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ForwardAuthSource {
    /// `X-Original-URI` / `X-Original-Method` (nginx `auth_request`).
    #[default]
    XOriginal,
    /// `X-Forwarded-Uri` / `X-Forwarded-Method` (Traefik ForwardAuth, Caddy `forward_auth`).
    XForwarded,
}

impl ForwardAuthSource {
    /// The configuration name.
    pub fn name(self) -> &'static str {
        match self {
            ForwardAuthSource::XOriginal => "x-original",
            ForwardAuthSource::XForwarded => "x-forwarded",
        }
    }

    /// The URI and method headers of this source.
    pub fn headers(self) -> (&'static str, &'static str) {
        match self {
            ForwardAuthSource::XOriginal => ("x-original-uri", "x-original-method"),
            ForwardAuthSource::XForwarded => ("x-forwarded-uri", "x-forwarded-method"),
        }
    }
}

/// `[store] backend`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// In this process's memory.
    Memory,
    /// A Redis server or cluster.
    Redis,
}

impl Backend {
    /// The configuration name.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Memory => "memory",
            Backend::Redis => "redis",
        }
    }
}

/// `[store]`.
#[derive(Debug, Clone, PartialEq)]
pub struct StoreConfig {
    /// memory | redis.
    pub backend: Backend,
    /// Redis URL (`redis://`, `rediss://`).
    pub url: Option<String>,
    /// Redis Cluster seed URLs.
    pub cluster: Vec<String>,
    /// Prefix of every Redis key.
    pub key_prefix: String,
    /// Longest wait for one store call.
    pub timeout: Duration,
    /// Bound on keys tracked by the memory store.
    pub max_keys: usize,
    /// Bound on the memory store's limiter state, bytes (sliding logs included).
    pub max_memory: usize,
    /// Memory store: where its state is written on shutdown and every `snapshot_interval`,
    /// and read back at start (resolved against the config file's directory).
    pub snapshot: Option<std::path::PathBuf>,
    /// How often the snapshot is written.
    pub snapshot_interval: Duration,
    /// Redis only: decide locally and exchange counts with Redis at this interval
    /// (`sluicegate_redis::SyncedStore`); `None` decides exactly in Redis.
    pub sync: Option<Duration>,
}

/// Default of `store.snapshot_interval`.
pub const DEFAULT_SNAPSHOT_INTERVAL: Duration = Duration::from_secs(30);

/// Default of `store.max_memory`: 512 MiB.
pub const DEFAULT_MAX_MEMORY: usize = 512 * 1024 * 1024;

/// A size in bytes: a whole number with an optional unit, `B`, `KiB`, `MiB`, `GiB` (powers
/// of 1024) or `KB`, `MB`, `GB` (powers of 1000), e.g. `"512MiB"`, `"64 KiB"`, `"1000000"`.
pub fn parse_bytes(text: &str) -> Result<usize, SizeError> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit() && c != '_')
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .replace('_', "")
        .parse()
        .map_err(|_| SizeError::Number(text.to_owned()))?;
    let scale: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        "KB" | "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        other => return Err(SizeError::Unit(other.to_owned())),
    };
    number
        .checked_mul(scale)
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| SizeError::TooLarge(text.to_owned()))
}

/// Why a size (`store.max_memory`) does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    /// No whole number in front.
    #[error("invalid size {0:?}: expected e.g. \"512MiB\"")]
    Number(String),
    /// A unit that is not one of the nine.
    #[error("unknown size unit {0:?}: expected B, KiB, MiB, GiB, TiB, KB, MB, GB or TB")]
    Unit(String),
    /// More bytes than this machine can address.
    #[error("size {0:?} is too large")]
    TooLarge(String),
}

/// `[gateway]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayConfig {
    /// Where the proxy listens.
    pub listen: SocketAddr,
    /// The `http://host:port` or `https://host:port` everything is forwarded to.
    pub upstream: http::Uri,
    /// Longest wait for the upstream's response head; then 504.
    pub upstream_timeout: Duration,
    /// `tls_cert` + `tls_key`: serve the gateway over TLS with this certificate.
    pub tls: Option<crate::tls::GatewayTls>,
    /// `upstream_ca`: the roots an `https://` upstream is checked against (default: the
    /// system's).
    pub upstream_ca: Option<crate::tls::UpstreamCa>,
}

impl GatewayConfig {
    /// `https` when the gateway serves TLS, else `http`.
    pub fn scheme(&self) -> &'static str {
        if self.tls.is_some() { "https" } else { "http" }
    }

    /// The files this section reads (certificate, key, CA): the reload watcher re-reads the
    /// configuration when one of them changes.
    pub fn files(&self) -> Vec<&Path> {
        let mut files = Vec::new();
        if let Some(tls) = &self.tls {
            files.extend([tls.cert.as_path(), tls.key.as_path()]);
        }
        if let Some(ca) = &self.upstream_ca {
            files.push(ca.path.as_path());
        }
        files
    }
}

/// Default of `gateway.upstream_timeout`.
pub const DEFAULT_UPSTREAM_TIMEOUT: Duration = Duration::from_secs(30);

/// Command-line flags that override the file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    /// `--listen`.
    pub listen: Option<SocketAddr>,
    /// `--redis`: use the Redis store at this URL.
    pub redis: Option<String>,
    /// `--upstream`.
    pub upstream: Option<http::Uri>,
    /// `--gateway-listen`.
    pub gateway_listen: Option<SocketAddr>,
    /// `--envoy-listen`.
    pub envoy_listen: Option<SocketAddr>,
}

/// The gateway's default address when only `--upstream` is given.
pub const DEFAULT_GATEWAY_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 8000);

/// The embedded default configuration, as TOML (also what `serve` runs without `--config`).
pub const EMBEDDED_DEFAULT: &str = r#"# sluicegate's embedded default
[server]
listen = "127.0.0.1:8080"

[store]
backend = "memory"

[[policies]]
name = "default"
algorithm = "token_bucket"
limit = 60
period = "1m"

[[routes]]
path = "/"
policies = ["default"]
key = "ip"
"#;

impl Config {
    /// The embedded default: in-memory store, API on 127.0.0.1:8080, policy `default`
    /// (token_bucket, 60 a minute, bursts of 60) keyed by client IP on every path.
    pub fn embedded() -> Config {
        match load(EMBEDDED_DEFAULT, Path::new("<embedded>")) {
            Ok(config) => config,
            // The embedded text is a constant covered by tests; failing here is a build bug.
            Err(diags) => unreachable!("embedded default config is invalid: {diags}"),
        }
    }

    /// Reads and validates a file.
    pub fn from_file(path: &Path) -> Result<Config, Diagnostics> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Diagnostics::single(path, format!("cannot read {}: {e}", path.display()))
        })?;
        load(&text, path)
    }

    /// A policy by name.
    pub fn policy(&self, name: &str) -> Option<&Arc<Policy>> {
        self.policies.iter().find(|p| p.name() == name)
    }

    /// Applies command-line flags.
    pub fn apply(&mut self, overrides: &Overrides) -> Result<(), crate::error::ServerError> {
        if let Some(listen) = overrides.listen {
            self.server.listen = listen;
        }
        if let Some(url) = &overrides.redis {
            self.store.backend = Backend::Redis;
            self.store.url = Some(url.clone());
            self.store.cluster.clear();
        }
        if overrides.upstream.is_some() || overrides.gateway_listen.is_some() {
            let upstream = match (&overrides.upstream, &self.gateway) {
                (Some(u), _) => u.clone(),
                (None, Some(g)) => g.upstream.clone(),
                (None, None) => {
                    return Err(crate::error::ServerError::Flags(
                        "--gateway-listen needs --upstream or [gateway] upstream",
                    ));
                }
            };
            let listen = match (overrides.gateway_listen, &self.gateway) {
                (Some(l), _) => l,
                (None, Some(g)) => g.listen,
                (None, None) => DEFAULT_GATEWAY_LISTEN,
            };
            let (upstream_timeout, tls, upstream_ca) = match &self.gateway {
                Some(g) => (g.upstream_timeout, g.tls.clone(), g.upstream_ca.clone()),
                None => (DEFAULT_UPSTREAM_TIMEOUT, None, None),
            };
            self.gateway = Some(GatewayConfig {
                listen,
                upstream,
                upstream_timeout,
                tls,
                upstream_ca,
            });
        }
        if let Some(listen) = overrides.envoy_listen {
            let envoy = self.envoy.get_or_insert_with(EnvoySection::default);
            envoy.listen = Some(listen);
        }
        if self.store.backend == Backend::Redis
            && self.store.url.is_none()
            && self.store.cluster.is_empty()
        {
            return Err(crate::error::ServerError::Flags(
                "[store] backend = \"redis\" needs url or cluster (or --redis URL)",
            ));
        }
        if self.store.backend == Backend::Redis {
            // `--redis` may have switched a memory config to Redis after parsing.
            for policy in &self.policies {
                sluicegate_redis::check_policy(policy)
                    .map_err(crate::error::ServerError::OutOfRange)?;
            }
        }
        Ok(())
    }

    /// A human summary for the start-up banner: listeners, store and every policy.
    pub fn summary(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let _ = writeln!(out, "store: {}", self.store.describe());
        for p in &self.policies {
            let _ = writeln!(out, "policy {}", describe_policy(p));
        }
        for r in &self.routes {
            let methods = match &r.methods {
                Some(m) => m.join(","),
                None => "*".to_owned(),
            };
            let _ = writeln!(
                out,
                "route {} {} key={} policies=[{}]",
                methods,
                r.path,
                r.key,
                r.policies.join(", ")
            );
        }
        out
    }
}

impl StoreConfig {
    /// `memory (max_keys 1000000, max_memory 536870912 bytes)`, `redis redis://… (prefix
    /// sluicegate, timeout 50ms)`.
    pub fn describe(&self) -> String {
        match self.backend {
            Backend::Memory => format!(
                "memory (max_keys {}, max_memory {} bytes)",
                self.max_keys, self.max_memory
            ),
            Backend::Redis => {
                let target = match &self.url {
                    Some(url) if self.cluster.is_empty() => redact(url),
                    _ => format!(
                        "cluster [{}]",
                        self.cluster
                            .iter()
                            .map(|u| redact(u))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                };
                let sync = match self.sync {
                    Some(every) => format!(
                        ", local-first, sync every {}",
                        humantime::format_duration(every)
                    ),
                    None => String::new(),
                };
                format!(
                    "redis {target} (key_prefix {}, timeout {}{sync})",
                    self.key_prefix,
                    humantime::format_duration(self.timeout)
                )
            }
        }
    }
}

/// Hides a password in a Redis URL before it is printed or logged.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}://***@{}", &url[..scheme], &url[at + 1..])
        }
        _ => url.to_owned(),
    }
}

/// `auth: token_bucket 10/1m burst 10 mode reject on_store_error allow`.
pub fn describe_policy(p: &Policy) -> String {
    let mut text = format!(
        "{}: {} {}/{}",
        p.name(),
        p.algorithm(),
        p.limit(),
        humantime::format_duration(p.period_duration())
    );
    if p.algorithm().uses_burst() {
        text.push_str(&format!(" burst {}", p.burst()));
    }
    text.push_str(&format!(" mode {}", p.mode().name()));
    if p.mode() == sluicegate_core::Mode::Delay {
        text.push_str(&format!(
            " max_delay {}",
            humantime::format_duration(Duration::from_micros(p.max_delay()))
        ));
    }
    let on_error = match p.on_store_error() {
        sluicegate_core::OnStoreError::Allow => "allow",
        sluicegate_core::OnStoreError::Deny => "deny",
    };
    text.push_str(&format!(" on_store_error {on_error}"));
    text
}

pub use parse::{UpstreamError, parse_upstream};

/// Parses and validates configuration text; `path` only labels the errors.
pub fn load(text: &str, path: &Path) -> Result<Config, Diagnostics> {
    parse::parse(text, path).map(|(config, _)| config)
}

/// The `[[policies]]` of a configuration file as written (for `sluicegate simulate`, which
/// lays its flags over them), read and validated by the same reader as `serve` and
/// `validate`, so a mistake gets the same message, line and column.
pub fn policy_specs(path: &Path) -> Result<Vec<sluicegate_core::PolicySpec>, Diagnostics> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Diagnostics::single(path, format!("cannot read {}: {e}", path.display())))?;
    parse::parse(&text, path).map(|(_, specs)| specs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_default_is_the_contracts() {
        let config = Config::embedded();
        assert_eq!(config.server.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(config.store.backend, Backend::Memory);
        let p = config.policy("default").unwrap();
        assert_eq!(p.algorithm(), sluicegate_core::AlgorithmKind::TokenBucket);
        assert_eq!((p.limit(), p.burst()), (60, 60));
        assert_eq!(p.period_duration(), Duration::from_secs(60));
        assert_eq!(config.routes[0].path, "/");
        assert_eq!(config.routes[0].key, sluicegate_middleware::KeySpec::Ip);
    }

    #[test]
    fn pool_levels_keep_the_files_order() {
        // The TOML table is read sorted by name; the scheduler's last tie-breaker is the
        // level written first, so the file's order must survive.
        let text =
            "[[pools]]\nname = \"p\"\nconcurrency = 4\nlevels = { zeta = 1, alpha = 2, mid = 1 }\n";
        let config = load(text, Path::new("t.toml")).unwrap();
        let levels: Vec<(&str, u32)> = config.pools[0]
            .spec()
            .levels
            .iter()
            .map(|(l, s)| (l.as_str(), *s))
            .collect();
        assert_eq!(levels, [("zeta", 1), ("alpha", 2), ("mid", 1)]);
    }

    #[test]
    fn every_error_is_reported_with_its_place() {
        let text = "[server]\nlisten = \"nope\"\nbogus = 1\n\n[[policies]]\nname = \"a\"\nalgorithm = \"sliding_log\"\nlimit = 0\nperiod = \"1x\"\nmode = \"delay\"\n\n[[routes]]\npath = \"/\"\npolicies = [\"b\"]\n";
        let diags = load(text, Path::new("t.toml")).unwrap_err();
        let places: Vec<(usize, usize)> = diags.errors.iter().map(|d| (d.line, d.column)).collect();
        assert_eq!(
            places,
            vec![(2, 10), (3, 1), (8, 9), (9, 10), (10, 8), (14, 13)]
        );
        assert!(
            diags
                .to_string()
                .starts_with("t.toml:2:10: error: invalid listen address")
        );
    }

    #[test]
    fn flags_override_the_file() {
        let mut config = Config::embedded();
        config
            .apply(&Overrides {
                listen: Some("127.0.0.1:9999".parse().unwrap()),
                redis: Some("redis://127.0.0.1:6390".into()),
                upstream: Some("http://127.0.0.1:3000".parse().unwrap()),
                ..Overrides::default()
            })
            .unwrap();
        assert_eq!(config.server.listen.port(), 9999);
        assert_eq!(config.store.backend, Backend::Redis);
        assert_eq!(config.gateway.unwrap().listen, DEFAULT_GATEWAY_LISTEN);
        let mut config = Config::embedded();
        let only_listen = Overrides {
            gateway_listen: Some("127.0.0.1:1".parse().unwrap()),
            ..Overrides::default()
        };
        assert!(config.apply(&only_listen).is_err());
    }

    #[test]
    fn sizes_in_bytes() {
        assert_eq!(parse_bytes("512MiB"), Ok(512 << 20));
        assert_eq!(parse_bytes("64 KiB"), Ok(64 << 10));
        assert_eq!(parse_bytes("1_000_000"), Ok(1_000_000));
        assert_eq!(parse_bytes("2GB"), Ok(2_000_000_000));
        assert!(matches!(parse_bytes("12 parsecs"), Err(SizeError::Unit(_))));
        assert!(parse_bytes("MiB").is_err());
        assert!(parse_bytes("-1").is_err());
        assert!(
            parse_bytes("99999999999TiB")
                .unwrap_err()
                .to_string()
                .contains("too large")
        );
        assert_eq!(Config::embedded().store.max_memory, DEFAULT_MAX_MEMORY);
    }

    #[test]
    fn max_memory_is_checked_with_its_place() {
        for (value, reason) in [
            ("\"1KiB\"", "at least 64KiB"),
            ("\"lots\"", "invalid size"),
            ("-5", "max_memory"),
        ] {
            let text = format!("[store]\nmax_memory = {value}\n");
            let diags = load(&text, Path::new("t.toml")).unwrap_err();
            let first = &diags.errors[0];
            assert_eq!((first.line, first.column), (2, 14), "{value}");
            assert!(diags.to_string().contains(reason), "{value}: {diags}");
        }
        let config = load("[store]\nmax_memory = 1048576\n", Path::new("t.toml")).unwrap();
        assert_eq!(config.store.max_memory, 1 << 20);
    }

    #[test]
    fn snapshot_is_for_memory_and_relative_to_the_file() {
        let config = load(
            "[store]\nsnapshot = \"state.bin\"\nsnapshot_interval = \"5s\"\n",
            Path::new("/etc/sg/t.toml"),
        )
        .unwrap();
        assert_eq!(config.store.snapshot, Some("/etc/sg/state.bin".into()));
        assert_eq!(config.store.snapshot_interval, Duration::from_secs(5));
        let text =
            "[store]\nbackend = \"redis\"\nurl = \"redis://127.0.0.1/0\"\nsnapshot = \"s\"\n";
        let diags = load(text, Path::new("t.toml")).unwrap_err();
        assert_eq!(diags.errors[0].line, 4);
        assert!(diags.to_string().contains("snapshot is for"), "{diags}");
    }

    #[test]
    fn overrides_are_checked_against_their_policy() {
        let head = "[[policies]]\nname = \"api\"\nalgorithm = \"fixed_window\"\nlimit = 10\nperiod = \"1d\"\n";
        let ok = format!("{head}[[overrides]]\npolicy = \"api\"\nkey = \"c-1\"\nlimit = 100\n");
        let config = load(&ok, Path::new("t.toml")).unwrap();
        assert_eq!(config.overrides[0].value.limit, 100);
        for (bad, reason) in [
            (
                "policy = \"nope\"\nkey = \"k\"\nlimit = 1",
                "unknown policy",
            ),
            (
                "policy = \"api\"\nkey = \"k\"\nlimit = 0",
                "limit must be at least 1",
            ),
            ("policy = \"api\"\nkey = \"\"\nlimit = 5", "key must be"),
            (
                "policy = \"api\"\nkey = \"k\"\nlimit = 5\ncolor = 1",
                "unknown field",
            ),
        ] {
            let text = format!("{head}[[overrides]]\n{bad}\n");
            let diags = load(&text, Path::new("t.toml")).unwrap_err();
            assert!(diags.to_string().contains(reason), "{bad}: {diags}");
        }
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact("redis://:s3cret@host:6379/0"),
            "redis://***@host:6379/0"
        );
        assert_eq!(redact("redis://host:6379"), "redis://host:6379");
    }
}
