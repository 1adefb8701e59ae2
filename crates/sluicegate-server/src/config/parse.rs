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
use sluicegate_core::{AlgorithmKind, Mode, OnStoreError, Policy, PolicyError, PolicySpec};
use sluicegate_middleware::{HeaderSet, KeySpec, RouteSpec, RouteTable};
use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::diagnostic::Collector;
use super::{
    Backend, Config, DEFAULT_MAX_KEYS, Diagnostics, EnvoyConfig, GatewayConfig, ServerConfig,
    StoreConfig,
};

const TOP: &[&str] = &["server", "store", "policies", "routes", "gateway", "envoy"];
const SERVER: &[&str] = &[
    "listen",
    "trusted_proxies",
    "ipv6_prefix",
    "admin_token",
    "headers",
    "forward_auth_deny_status",
];
const STORE: &[&str] = &[
    "backend",
    "url",
    "cluster",
    "key_prefix",
    "timeout",
    "max_keys",
];
const POLICY: &[&str] = &[
    "name",
    "algorithm",
    "limit",
    "period",
    "burst",
    "mode",
    "max_delay",
    "on_store_error",
];
const ROUTE: &[&str] = &["path", "methods", "headers", "policies", "key"];
const GATEWAY: &[&str] = &["listen", "upstream"];
const ENVOY: &[&str] = &["listen", "config", "algorithm", "rules"];

type Value<'i> = Spanned<DeValue<'i>>;

pub(super) fn parse(text: &str, path: &Path) -> Result<Config, Diagnostics> {
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
    };
    let root_span = root.span();
    let root = root.into_inner();
    r.unknown(&root, "the top level", TOP);

    let server = r.section(&root, "server").map(|(t, _)| t);
    let server = r.server(server);
    let store = r.section(&root, "store").map(|(t, _)| t);
    let store = r.store(store);
    let policies = r.policies(root.get("policies"));
    let routes = r.routes(root.get("routes"), &policies, root_span.clone());
    let gateway = r
        .section(&root, "gateway")
        .and_then(|(t, s)| r.gateway(t, s));
    let envoy = r
        .section(&root, "envoy")
        .map(|(t, _)| r.envoy(t, path, &policies));

    if !r.c.is_empty() {
        return Err(r.c.finish(path));
    }
    match (server, store) {
        (Some(server), Some(store)) => Ok(Config {
            server,
            store,
            policies: policies.into_iter().map(|(p, _)| p).collect(),
            routes,
            gateway,
            envoy,
        }),
        // Every `None` above recorded an error, so this is unreachable in practice; still a
        // clean error rather than a panic.
        _ => Err(Diagnostics::single(path, "invalid configuration".into())),
    }
}

struct Reader<'t> {
    c: Collector<'t>,
    /// Every policy name in the file, valid policy or not.
    defined: Vec<String>,
}

impl Reader<'_> {
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

    fn server(&mut self, table: Option<&DeTable<'_>>) -> Option<ServerConfig> {
        let mut server = ServerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            trusted_proxies: Vec::new(),
            ipv6_prefix: 64,
            admin_token: None,
            headers: HeaderSet::DEFAULT.to_vec(),
            forward_auth_deny_status: 429,
        };
        let Some(t) = table else {
            return Some(server);
        };
        let what = "[server]";
        self.unknown(t, what, SERVER);
        if let Some(listen) = self.address(t, "listen", what) {
            server.listen = listen;
        }
        if let Some(list) = self.get::<Vec<Spanned<String>>>(t, "trusted_proxies", what) {
            server.trusted_proxies = list
                .into_inner()
                .into_iter()
                .filter_map(|cidr| match parse_cidr(cidr.get_ref()) {
                    Some(net) => Some(net),
                    None => {
                        self.c.error(
                            cidr.span(),
                            format!(
                                "invalid CIDR {:?} in trusted_proxies (write e.g. \"10.0.0.0/8\" or \"::1\")",
                                cidr.get_ref()
                            ),
                        );
                        None
                    }
                })
                .collect();
        }
        if let Some(prefix) = self.get::<u64>(t, "ipv6_prefix", what) {
            if *prefix.get_ref() == 0 || *prefix.get_ref() > 128 {
                self.c
                    .error(prefix.span(), "ipv6_prefix must be between 1 and 128");
            } else {
                server.ipv6_prefix = *prefix.get_ref() as u8;
            }
        }
        if let Some(token) = self.get::<String>(t, "admin_token", what) {
            if token.get_ref().trim().is_empty() {
                self.c.error(
                    token.span(),
                    "admin_token must not be empty (remove it to disable the admin endpoints)",
                );
            } else if http::HeaderValue::from_str(&format!("Bearer {}", token.get_ref())).is_err() {
                self.c.error(
                    token.span(),
                    "admin_token must be printable ASCII (it travels in an HTTP header)",
                );
            } else {
                server.admin_token = Some(token.into_inner());
            }
        }
        if let Some(sets) = self.get::<Vec<Spanned<String>>>(t, "headers", what) {
            let mut parsed = Vec::new();
            for set in sets.into_inner() {
                match set.get_ref().parse::<HeaderSet>() {
                    Ok(h) if parsed.contains(&h) => self.c.error(
                        set.span(),
                        format!("header set {:?} listed twice", set.get_ref()),
                    ),
                    Ok(h) => parsed.push(h),
                    Err(_) => self.c.error(
                        set.span(),
                        format!(
                            "unknown header set {:?}; expected draft-6, ietf or legacy",
                            set.get_ref()
                        ),
                    ),
                }
            }
            server.headers = parsed;
        }
        if let Some(status) = self.get::<u64>(t, "forward_auth_deny_status", what) {
            if (400..=599).contains(status.get_ref()) {
                server.forward_auth_deny_status = *status.get_ref() as u16;
            } else {
                self.c.error(
                    status.span(),
                    "forward_auth_deny_status must be an HTTP error status (400 to 599; nginx auth_request needs 401 or 403)",
                );
            }
        }
        Some(server)
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

    fn store(&mut self, table: Option<&DeTable<'_>>) -> Option<StoreConfig> {
        let mut store = StoreConfig {
            backend: Backend::Memory,
            url: None,
            cluster: Vec::new(),
            key_prefix: "sluicegate".to_owned(),
            timeout: Duration::from_millis(50),
            max_keys: DEFAULT_MAX_KEYS,
        };
        let Some(t) = table else {
            return Some(store);
        };
        let what = "[store]";
        self.unknown(t, what, STORE);
        if let Some(backend) = self.get::<String>(t, "backend", what) {
            match backend.get_ref().as_str() {
                "memory" => store.backend = Backend::Memory,
                "redis" => store.backend = Backend::Redis,
                other => self.c.error(
                    backend.span(),
                    format!("unknown store backend {other:?}; expected memory or redis"),
                ),
            }
        }
        if let Some(url) = self.get::<String>(t, "url", what)
            && self.redis_url(&url)
        {
            store.url = Some(url.into_inner());
        }
        if let Some(seeds) = self.get::<Vec<Spanned<String>>>(t, "cluster", what) {
            for seed in seeds.into_inner() {
                if self.redis_url(&seed) {
                    store.cluster.push(seed.into_inner());
                }
            }
        }
        if let Some(prefix) = self.get::<String>(t, "key_prefix", what) {
            if prefix.get_ref().is_empty() || prefix.get_ref().contains(['{', '}']) {
                self.c.error(
                    prefix.span(),
                    "key_prefix must be non-empty and must not contain { or } (they mark Redis hash tags)",
                );
            } else {
                store.key_prefix = prefix.into_inner();
            }
        }
        if let Some(timeout) = self.duration(t, "timeout", what) {
            store.timeout = timeout;
        }
        if let Some(max) = self.get::<u64>(t, "max_keys", what) {
            match usize::try_from(*max.get_ref()) {
                Ok(n) if n >= 1 => store.max_keys = n,
                _ => self.c.error(max.span(), "max_keys must be at least 1"),
            }
        }
        Some(store)
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

    /// Every `[[policies]]` entry, with the span of its name for route errors.
    fn policies(&mut self, value: Option<&Value<'_>>) -> Vec<(Arc<Policy>, Range<usize>)> {
        let Some(value) = value else {
            return Vec::new();
        };
        let Some(entries) = self.array_of_tables(value, "policies") else {
            return Vec::new();
        };
        let mut out: Vec<(Arc<Policy>, Range<usize>)> = Vec::new();
        for (table, span) in entries {
            // Names are checked for duplicates (and later found by routes) even when the
            // rest of their policy is invalid, so one mistake does not cascade.
            let name = table
                .get("name")
                .and_then(|v| v.get_ref().as_str().map(|n| (n.to_owned(), v.span())));
            if let Some((name, name_span)) = &name {
                if self.defined.contains(name) {
                    self.c
                        .error(name_span.clone(), format!("duplicate policy name {name:?}"));
                    // Still check the rest of it, so its other mistakes show too.
                    let _ = self.policy(table, span);
                    continue;
                }
                self.defined.push(name.clone());
            }
            if let Some((policy, name_span)) = self.policy(table, span) {
                out.push((Arc::new(policy), name_span));
            }
        }
        out
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

    fn policy(&mut self, t: &DeTable<'_>, span: Range<usize>) -> Option<(Policy, Range<usize>)> {
        let what = "policy";
        self.unknown(t, "[[policies]]", POLICY);
        let before = self.c_len();
        let name = self.required::<String>(t, "name", what, &span);
        let algorithm = self.required::<AlgorithmKind>(t, "algorithm", what, &span);
        let limit = self.required::<u64>(t, "limit", what, &span);
        let period = self.required::<String>(t, "period", what, &span);
        let burst = self.get::<u64>(t, "burst", what);
        let mode = self.get::<Mode>(t, "mode", what);
        let max_delay = self.get::<String>(t, "max_delay", what);
        let on_store_error = self.get::<OnStoreError>(t, "on_store_error", what);

        // Each check on its own, so a policy with three mistakes reports three errors.
        if let Some(name) = &name
            && let Err(e @ PolicyError::InvalidName(_)) = Policy::builder(
                name.get_ref(),
                AlgorithmKind::Gcra,
                1,
                Duration::from_secs(1),
            )
            .build()
        {
            self.c.error(name.span(), e.to_string());
        }
        if let Some(limit) = &limit
            && *limit.get_ref() == 0
        {
            self.c
                .error(limit.span(), PolicyError::ZeroLimit.to_string());
        }
        if let Some(period) = &period {
            match parse_duration(period.get_ref()) {
                Ok(d) if d.as_micros() == 0 => self
                    .c
                    .error(period.span(), PolicyError::ZeroPeriod.to_string()),
                Ok(_) => {}
                Err(e) => self.c.error(period.span(), e.to_string()),
            }
        }
        if let Some(burst) = &burst
            && *burst.get_ref() == 0
        {
            self.c
                .error(burst.span(), PolicyError::ZeroBurst.to_string());
        }
        if let (Some(mode), Some(algorithm)) = (&mode, &algorithm)
            && *mode.get_ref() == Mode::Delay
            && !algorithm.get_ref().supports_delay()
        {
            self.c.error(
                mode.span(),
                PolicyError::DelayOnWindow(*algorithm.get_ref()).to_string(),
            );
        }
        if let Some(max_delay) = &max_delay
            && let Err(e) = parse_duration(max_delay.get_ref())
        {
            self.c.error(max_delay.span(), e.to_string());
        }
        if self.c_len() > before {
            return None;
        }
        let (name, algorithm, limit, period) = (name?, algorithm?, limit?, period?);
        let spec = PolicySpec {
            name: name.get_ref().clone(),
            algorithm: algorithm.into_inner(),
            limit: *limit.get_ref(),
            period: period.into_inner(),
            burst: burst.map(Spanned::into_inner),
            mode: mode.map(Spanned::into_inner).unwrap_or_default(),
            max_delay: max_delay.map(Spanned::into_inner),
            on_store_error: on_store_error.map(Spanned::into_inner).unwrap_or_default(),
        };
        match spec.build() {
            Ok(policy) => Some((policy, name.span())),
            Err(e) => {
                // Only the cross-field limits (overflow) are left at this point.
                self.c.error(limit.span(), e.to_string());
                None
            }
        }
    }

    fn c_len(&self) -> usize {
        self.c.len()
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

    fn routes(
        &mut self,
        value: Option<&Value<'_>>,
        policies: &[(Arc<Policy>, Range<usize>)],
        _root: Range<usize>,
    ) -> Vec<RouteSpec> {
        let Some(value) = value else {
            return Vec::new();
        };
        let Some(entries) = self.array_of_tables(value, "routes") else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (t, span) in entries {
            if let Some(route) = self.route(t, span, policies) {
                out.push(route);
            }
        }
        out
    }

    fn route(
        &mut self,
        t: &DeTable<'_>,
        span: Range<usize>,
        policies: &[(Arc<Policy>, Range<usize>)],
    ) -> Option<RouteSpec> {
        let what = "route";
        self.unknown(t, "[[routes]]", ROUTE);
        let before = self.c_len();
        let path = self.required::<String>(t, "path", what, &span);
        if let Some(path) = &path
            && (!path.get_ref().starts_with('/') || path.get_ref().parse::<http::Uri>().is_err())
        {
            self.c.error(
                path.span(),
                format!(
                    "route path {:?} must be a URL path starting with /",
                    path.get_ref()
                ),
            );
        }
        let mut methods = None;
        if let Some(list) = self.get::<Vec<Spanned<String>>>(t, "methods", what) {
            if list.get_ref().is_empty() {
                self.c.error(
                    list.span(),
                    "methods = [] would never match; omit it to match every method",
                );
            }
            let methods = methods.get_or_insert_with(Vec::new);
            for m in list.into_inner() {
                let upper = m.get_ref().to_ascii_uppercase();
                match http::Method::from_bytes(upper.as_bytes()) {
                    Ok(_) if !upper.is_empty() => methods.push(upper),
                    _ => self
                        .c
                        .error(m.span(), format!("invalid HTTP method {:?}", m.get_ref())),
                }
            }
        }
        let mut headers = BTreeMap::new();
        if let Some(map) =
            self.get::<BTreeMap<Spanned<String>, Spanned<String>>>(t, "headers", what)
        {
            for (name, value) in map.into_inner() {
                let lower = name.get_ref().to_ascii_lowercase();
                if http::HeaderName::from_bytes(lower.as_bytes()).is_err() {
                    self.c.error(
                        name.span(),
                        format!("invalid header name {:?}", name.get_ref()),
                    );
                } else if http::HeaderValue::from_str(value.get_ref()).is_err() {
                    self.c.error(
                        value.span(),
                        format!("invalid header value {:?}", value.get_ref()),
                    );
                } else {
                    headers.insert(lower, value.into_inner());
                }
            }
        }
        let mut names = Vec::new();
        match self.required::<Vec<Spanned<String>>>(t, "policies", what, &span) {
            Some(list) if list.get_ref().is_empty() => {
                self.c
                    .error(list.span(), "a route needs at least one policy");
            }
            Some(list) => {
                for name in list.into_inner() {
                    if !self.defined.contains(name.get_ref()) {
                        self.c.error(
                            name.span(),
                            format!(
                                "unknown policy {:?} (not defined in [[policies]])",
                                name.get_ref()
                            ),
                        );
                    } else if names.contains(name.get_ref()) {
                        self.c.error(
                            name.span(),
                            format!("policy {:?} listed twice", name.get_ref()),
                        );
                    } else {
                        names.push(name.into_inner());
                    }
                }
            }
            None => {}
        }
        let mut key = KeySpec::Ip;
        if let Some(text) = self.get::<String>(t, "key", what) {
            match text.get_ref().parse::<KeySpec>() {
                Ok(k) => key = k,
                Err(_) => self.c.error(
                    text.span(),
                    format!(
                        "invalid key {:?}; expected ip, global or header:<name>",
                        text.get_ref()
                    ),
                ),
            }
        }
        if self.c_len() > before
            || names
                .iter()
                .any(|n| !policies.iter().any(|(p, _)| p.name() == n))
        {
            return None;
        }
        let spec = RouteSpec {
            path: path?.into_inner(),
            methods,
            headers,
            policies: names,
            key,
        };
        // The middleware has the last word on what a route is.
        let lookup = |name: &str| {
            policies
                .iter()
                .find(|(p, _)| p.name() == name)
                .map(|(p, _)| Arc::clone(p))
        };
        for (_, e) in RouteTable::validate(std::slice::from_ref(&spec), lookup) {
            self.c.error(span.clone(), e.to_string());
        }
        (self.c_len() == before).then_some(spec)
    }

    fn gateway(&mut self, t: &DeTable<'_>, span: Range<usize>) -> Option<GatewayConfig> {
        let what = "[gateway]";
        self.unknown(t, what, GATEWAY);
        let listen = if t.get("listen").is_some() {
            self.address(t, "listen", what)
        } else {
            self.c
                .error(span.clone(), "[gateway]: missing field `listen`");
            None
        };
        let upstream = self
            .required::<String>(t, "upstream", what, &span)
            .and_then(|u| match parse_upstream(u.get_ref()) {
                Ok(uri) => Some(uri),
                Err(reason) => {
                    self.c.error(u.span(), reason);
                    None
                }
            });
        Some(GatewayConfig {
            listen: listen?,
            upstream: upstream?,
        })
    }

    // --- [envoy]: parsed here for spans, compiled and checked by sluicegate-envoy ---
    fn envoy(
        &mut self,
        t: &DeTable<'_>,
        file: &Path,
        policies: &[(Arc<Policy>, Range<usize>)],
    ) -> EnvoyConfig {
        let what = "[envoy]";
        self.unknown(t, what, ENVOY);
        let listen = if t.get("listen").is_some() {
            self.address(t, "listen", what)
        } else {
            None
        };
        let config_key = self.get::<String>(t, "config", what);
        let config = config_key.as_ref().map(|p| {
            let p = PathBuf::from(p.get_ref());
            match file.parent() {
                Some(dir) if p.is_relative() => dir.join(p),
                _ => p,
            }
        });
        let algorithm = self.get::<AlgorithmKind>(t, "algorithm", what);
        let rules = self.get::<Vec<sluicegate_envoy::RuleSpec>>(t, "rules", what);
        let section = EnvoyConfig {
            listen,
            config,
            algorithm: algorithm.map(Spanned::into_inner),
            rules: rules
                .as_ref()
                .map(|r| r.get_ref().clone())
                .unwrap_or_default(),
        };
        let known: Vec<Arc<Policy>> = policies.iter().map(|(p, _)| Arc::clone(p)).collect();
        if let Err(errors) = sluicegate_envoy::EnvoyConfig::load(&section, &known, Path::new("")) {
            for error in errors.0 {
                // YAML errors carry their own file:line:column; point at the key that named them.
                let span = match (&error.file, &config_key, &rules) {
                    (Some(_), Some(key), _) => key.span(),
                    (None, _, Some(rules)) => rules.span(),
                    _ => 0..0,
                };
                self.c.error(span, format!("{what} {error}"));
            }
        }
        section
    }
    // --- end [envoy] ---
}

/// `http://host:port[/base]` for the gateway.
pub fn parse_upstream(text: &str) -> Result<http::Uri, String> {
    let uri: http::Uri = text
        .parse()
        .map_err(|e| format!("invalid upstream URL {text:?}: {e}"))?;
    if uri.scheme_str() != Some("http") || uri.authority().is_none() {
        return Err(format!(
            "invalid upstream URL {text:?}: write http://host:port (https upstreams are not supported; terminate TLS in front)"
        ));
    }
    Ok(uri)
}

/// `"10.0.0.0/8"`, or a bare address meaning just that host.
fn parse_cidr(text: &str) -> Option<IpNet> {
    text.parse::<IpNet>()
        .ok()
        .or_else(|| text.parse::<IpAddr>().ok().map(IpNet::from))
}
