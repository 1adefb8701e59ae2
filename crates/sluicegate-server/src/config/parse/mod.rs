//! Reading the TOML through its spanned document tree, so that every field can be checked
//! on its own and every error keeps its line and column; serde's derive stops at the first.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;
use serde::de::{DeserializeOwned, IntoDeserializer};
use sluicegate_core::spec::parse_duration;
use sluicegate_core::{AlgorithmKind, Mode, OnStoreError, Policy, PolicySpec};
use sluicegate_middleware::{
    ClientIpHeader, HeaderSet, KeySpec, RouteError, RouteField, RouteFieldError, RouteSpec,
};
use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::diagnostic::Collector;
use super::{
    Backend, Config, ConnectionLimits, DEFAULT_MAX_KEYS, DEFAULT_MAX_WAITING,
    DEFAULT_UPSTREAM_TIMEOUT, Diagnostics, ForwardAuthSource, GatewayConfig, ServerConfig,
    StoreConfig,
};

mod overrides;
mod policies;
mod pools;
mod routes;
mod sections;

const TOP: &[&str] = &[
    "server",
    "store",
    "policies",
    "overrides",
    "routes",
    "pools",
    "gateway",
    "envoy",
];
const SERVER: &[&str] = &[
    "listen",
    "trusted_proxies",
    "ipv6_prefix",
    "admin_token",
    "headers",
    "forward_auth_deny_status",
    "client_ip_header",
    "forward_auth_source",
    "api_token",
    "header_read_timeout",
    "idle_timeout",
    "max_connections",
    "max_waiting",
    "allow",
    "deny",
    "reservation_secret",
    "reservation_ttl",
];
const STORE: &[&str] = &[
    "backend",
    "url",
    "cluster",
    "key_prefix",
    "timeout",
    "max_keys",
    "max_memory",
    "snapshot",
    "snapshot_interval",
    "sync",
];
const POLICY: &[&str] = &[
    "name",
    "algorithm",
    "limit",
    "period",
    "lease",
    "burst",
    "mode",
    "max_delay",
    "on_store_error",
    "penalty",
    "calendar",
    "timezone",
];
const ROUTE: &[&str] = &[
    "path",
    "methods",
    "headers",
    "policies",
    "key",
    "case_insensitive",
    "allow",
    "deny",
    "pool",
    "level",
    "weight",
    "cost",
    "settle",
    "count",
];
const POOL: &[&str] = &[
    "name",
    "concurrency",
    "min_concurrency",
    "max_concurrency",
    "queue",
    "max_wait",
    "levels",
];
const GATEWAY: &[&str] = &[
    "listen",
    "upstream",
    "upstream_timeout",
    "tls_cert",
    "tls_key",
    "upstream_ca",
];
const ENVOY: &[&str] = &[
    "listen",
    "config",
    "algorithm",
    "merge_domains",
    "shadow",
    "quota",
    "dynamic_metadata",
    "rules",
];

type Value<'i> = Spanned<DeValue<'i>>;

/// The configuration, and its policies as written.
pub(super) fn parse(text: &str, path: &Path) -> Result<(Config, Vec<PolicySpec>), Diagnostics> {
    let mut c = Collector::new(text);
    let root = match DeTable::parse(text) {
        Ok(root) => root,
        Err(e) => {
            c.error(e.span().unwrap_or(0..0), e.message().to_owned());
            return Err(c.finish(path));
        }
    };
    let mut r = Reader {
        c,
        defined: Vec::new(),
        concurrency_uses: Vec::new(),
        pools_defined: Vec::new(),
        specs: Vec::new(),
    };
    let root = root.into_inner();
    r.unknown(&root, "the top level", TOP);

    let server = r.section(&root, "server").map(|(t, _)| t);
    let server = r.server(server);
    let store = r.section(&root, "store").map(|(t, _)| t);
    let store = r.store(store, path);
    let policies = r.policies(root.get("policies"));
    if let Some(store) = &store {
        r.store_can_decide(store, &policies);
    }
    let overrides = r.overrides(root.get("overrides"), &policies, store.as_ref());
    let pools = r.pools(root.get("pools"));
    let routes = r.routes(root.get("routes"), &policies, &pools);
    let gateway = r
        .section(&root, "gateway")
        .and_then(|(t, s)| r.gateway(t, s, path));
    let envoy = r
        .section(&root, "envoy")
        .map(|(t, _)| r.envoy(t, path, &policies));
    // An invalid [gateway] has its own errors; it still gives the routes a request's end.
    if root.get("gateway").is_none() {
        r.concurrency_without_gateway();
    }

    if !r.c.is_empty() {
        return Err(r.c.finish(path));
    }
    match (server, store) {
        (Some(server), Some(store)) => Ok((
            Config {
                server,
                store,
                policies: policies.into_iter().map(|(p, _)| p).collect(),
                overrides,
                routes,
                pools,
                gateway,
                envoy,
            },
            r.specs,
        )),
        // Every `None` above recorded an error, so this is unreachable in practice; still a
        // clean error rather than a panic.
        _ => Err(Diagnostics::single(path, "invalid configuration".into())),
    }
}

struct Reader<'t> {
    c: Collector<'t>,
    /// Every policy name in the file, valid policy or not.
    defined: Vec<String>,
    /// Where routes name a concurrency policy: `(span of the name, name)`.
    concurrency_uses: Vec<(Range<usize>, String)>,
    /// Every pool name in the file, valid pool or not (a route on an invalid pool is not
    /// reported again as naming an unknown one).
    pools_defined: Vec<String>,
    /// Every valid policy as written.
    specs: Vec<PolicySpec>,
}

impl Reader<'_> {
    /// Reports every policy the configured store cannot decide exactly (Redis computes in
    /// doubles, exact to 2^53: see `sluicegate_redis::check_policy`), so it is refused at
    /// load time instead of failing on every request.
    fn store_can_decide(&mut self, store: &StoreConfig, policies: &[(Arc<Policy>, Range<usize>)]) {
        if store.backend != Backend::Redis {
            return;
        }
        for (policy, span) in policies {
            if let Err(e) = sluicegate_redis::check_policy(policy) {
                self.c.error(span.clone(), e.to_string());
            }
            if store.sync.is_some()
                && let Err(reason) = sluicegate_redis::check_synced(policy)
            {
                self.c.error(
                    span.clone(),
                    format!("policy {:?}: {reason}", policy.name()),
                );
            }
        }
    }

    /// Reports every key of `table` not in `known`.
    fn unknown(&mut self, table: &DeTable<'_>, section: &str, known: &[&str]) {
        for key in table.keys() {
            if !known.contains(&key.get_ref().as_ref()) {
                self.c.error(
                    key.span(),
                    format!(
                        "unknown field `{}` in {section}; expected one of: {}",
                        key.get_ref(),
                        known.join(", ")
                    ),
                );
            }
        }
    }

    /// A top-level table such as `[server]`.
    fn section<'a, 'i>(
        &mut self,
        root: &'a DeTable<'i>,
        name: &str,
    ) -> Option<(&'a DeTable<'i>, Range<usize>)> {
        let value = root.get(name)?;
        match value.get_ref() {
            DeValue::Table(t) => Some((t, value.span())),
            other => {
                self.c.error(
                    value.span(),
                    format!(
                        "`{name}` must be a table ([{name}]), found {}",
                        other.type_str()
                    ),
                );
                None
            }
        }
    }

    /// Deserializes one field; `None` when absent or invalid (the error is recorded).
    fn get<T: DeserializeOwned>(
        &mut self,
        table: &DeTable<'_>,
        key: &str,
        what: &str,
    ) -> Option<Spanned<T>> {
        let value = table.get(key)?;
        let span = value.span();
        match T::deserialize(value.clone().into_deserializer()) {
            Ok(v) => Some(Spanned::new(span, v)),
            Err(e) => {
                self.c.error(
                    e.span().unwrap_or(span),
                    format!("{what} `{key}`: {}", e.message()),
                );
                None
            }
        }
    }

    fn required<T: DeserializeOwned>(
        &mut self,
        t: &DeTable<'_>,
        key: &str,
        what: &str,
        span: &Range<usize>,
    ) -> Option<Spanned<T>> {
        if t.get(key).is_none() {
            self.c
                .error(span.clone(), format!("{what}: missing field `{key}`"));
            return None;
        }
        self.get(t, key, what)
    }

    fn c_len(&self) -> usize {
        self.c.len()
    }

    fn array_of_tables<'a, 'i>(
        &mut self,
        value: &'a Value<'i>,
        name: &str,
    ) -> Option<Vec<(&'a DeTable<'i>, Range<usize>)>> {
        let DeValue::Array(items) = value.get_ref() else {
            self.c.error(
                value.span(),
                format!("`{name}` must be an array of tables ([[{name}]])"),
            );
            return None;
        };
        let mut out = Vec::new();
        for item in items.iter() {
            match item.get_ref() {
                DeValue::Table(t) => out.push((t, item.span())),
                other => self.c.error(
                    item.span(),
                    format!(
                        "each entry of `{name}` must be a table, found {}",
                        other.type_str()
                    ),
                ),
            }
        }
        Some(out)
    }

    /// A `host:port` socket address.
    fn address(&mut self, t: &DeTable<'_>, key: &str, what: &str) -> Option<SocketAddr> {
        let text = self.get::<String>(t, key, what)?;
        match text.get_ref().parse::<SocketAddr>() {
            Ok(addr) => Some(addr),
            Err(_) => {
                self.c.error(
                    text.span(),
                    format!(
                        "invalid listen address {:?} in {what} `{key}` (write IP:PORT, e.g. \"127.0.0.1:8080\" or \"[::1]:8080\")",
                        text.get_ref()
                    ),
                );
                None
            }
        }
    }

    /// A positive duration such as `"50ms"`.
    fn duration(&mut self, t: &DeTable<'_>, key: &str, what: &str) -> Option<Duration> {
        let text = self.get::<String>(t, key, what)?;
        match parse_duration(text.get_ref()) {
            Ok(d) if d.is_zero() => {
                self.c
                    .error(text.span(), format!("{key} must be greater than zero"));
                None
            }
            Ok(d) => Some(d),
            Err(e) => {
                self.c.error(text.span(), e.to_string());
                None
            }
        }
    }

    /// A size in bytes: a string with a unit (`"512MiB"`) or a whole number; at least 64 KiB,
    /// below which a store could not hold one shard's cells.
    fn bytes(&mut self, t: &DeTable<'_>, key: &str, what: &str) -> Option<usize> {
        const LEAST: usize = 64 * 1024;
        let value = t.get(key)?;
        let span = value.span();
        let parsed = match value.get_ref() {
            DeValue::Integer(_) => self.get::<u64>(t, key, what).map(|n| {
                usize::try_from(*n.get_ref())
                    .map_err(|_| super::SizeError::TooLarge(n.get_ref().to_string()))
            }),
            _ => self
                .get::<String>(t, key, what)
                .map(|text| super::parse_bytes(text.get_ref())),
        }?;
        match parsed {
            Ok(n) if n >= LEAST => Some(n),
            Ok(_) => {
                self.c.error(span, format!("{key} must be at least 64KiB"));
                None
            }
            Err(e) => {
                self.c.error(span, format!("{key}: {e}"));
                None
            }
        }
    }

    fn redis_url(&mut self, url: &Spanned<String>) -> bool {
        let ok = ["redis://", "rediss://", "redis+unix://", "unix://"]
            .iter()
            .any(|scheme| url.get_ref().starts_with(scheme));
        if !ok {
            self.c.error(
                url.span(),
                format!(
                    "invalid Redis URL {:?}: it must start with redis:// or rediss://",
                    super::redact(url.get_ref())
                ),
            );
        }
        ok
    }
}

/// Why a gateway `upstream` is not usable.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// Not a URI at all.
    #[error("invalid upstream URL {text:?}: {source}")]
    Syntax {
        /// As written.
        text: String,
        /// What the URI parser said.
        source: http::uri::InvalidUri,
    },
    /// A URI, but not `http://` or `https://` with a host.
    #[error("invalid upstream URL {0:?}: write http://host:port or https://host:port")]
    Scheme(String),
}

/// `http://host:port[/base]` or `https://…` for the gateway.
pub fn parse_upstream(text: &str) -> Result<http::Uri, UpstreamError> {
    let uri: http::Uri = text.parse().map_err(|source| UpstreamError::Syntax {
        text: text.to_owned(),
        source,
    })?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.authority().is_none() {
        return Err(UpstreamError::Scheme(text.to_owned()));
    }
    Ok(uri)
}

/// `"10.0.0.0/8"`, or a bare address meaning just that host.
fn parse_cidr(text: &str) -> Option<IpNet> {
    text.parse::<IpNet>()
        .ok()
        .or_else(|| text.parse::<IpAddr>().ok().map(IpNet::from))
}
