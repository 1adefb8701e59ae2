//! `[server]`, `[store]`, `[gateway]` and `[envoy]`.

use super::*;

impl Reader<'_> {
    /// A list of CIDRs (a bare address is a /32 or /128), each error with its position.
    pub(super) fn cidrs(&mut self, t: &DeTable<'_>, field: &str, what: &str) -> Option<Vec<IpNet>> {
        let list = self.get::<Vec<Spanned<String>>>(t, field, what)?;
        let nets = list
            .into_inner()
            .into_iter()
            .filter_map(|cidr| match parse_cidr(cidr.get_ref()) {
                Some(net) => Some(net),
                None => {
                    self.c.error(
                        cidr.span(),
                        format!(
                            "invalid CIDR {:?} in {field} (write e.g. \"10.0.0.0/8\" or \"::1\")",
                            cidr.get_ref()
                        ),
                    );
                    None
                }
            })
            .collect();
        Some(nets)
    }

    pub(super) fn server(&mut self, table: Option<&DeTable<'_>>) -> Option<ServerConfig> {
        let mut server = ServerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            trusted_proxies: Vec::new(),
            ipv6_prefix: 64,
            admin_token: None,
            headers: HeaderSet::DEFAULT.to_vec(),
            forward_auth_deny_status: 429,
            client_ip_header: ClientIpHeader::default(),
            forward_auth_source: ForwardAuthSource::default(),
            api_token: None,
            connections: ConnectionLimits::default(),
            max_waiting: DEFAULT_MAX_WAITING,
            allow: Vec::new(),
            deny: Vec::new(),
            reservation_secret: None,
            reservation_ttl: super::super::DEFAULT_RESERVATION_TTL,
        };
        let Some(t) = table else {
            return Some(server);
        };
        let what = "[server]";
        self.unknown(t, what, SERVER);
        if let Some(listen) = self.address(t, "listen", what) {
            server.listen = listen;
        }
        if let Some(list) = self.cidrs(t, "trusted_proxies", what) {
            server.trusted_proxies = list;
        }
        if let Some(list) = self.cidrs(t, "allow", what) {
            server.allow = list;
        }
        if let Some(list) = self.cidrs(t, "deny", what) {
            server.deny = list;
        }
        if let Some(prefix) = self.get::<u64>(t, "ipv6_prefix", what) {
            if *prefix.get_ref() == 0 || *prefix.get_ref() > 128 {
                self.c
                    .error(prefix.span(), "ipv6_prefix must be between 1 and 128");
            } else {
                server.ipv6_prefix = *prefix.get_ref() as u8;
            }
        }
        server.admin_token = self.token(t, "admin_token", "disable the admin endpoints");
        server.api_token = self.token(t, "api_token", "leave /v1 and /dashboard open");
        if let Some(secret) = self.get::<String>(t, "reservation_secret", what) {
            if secret.get_ref().len() < 16 {
                self.c.error(
                    secret.span(),
                    "reservation_secret must be at least 16 bytes (it signs reservations and leases)",
                );
            } else {
                server.reservation_secret = Some(secret.into_inner());
            }
        }
        if let Some(ttl) = self.duration(t, "reservation_ttl", what) {
            server.reservation_ttl = ttl;
        }
        if let Some(sets) = self.header_sets(t) {
            server.headers = sets;
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
        self.server_hardening(t, &mut server);
        Some(server)
    }

    /// `headers`: each set once, named as [`HeaderSet`] parses it.
    fn header_sets(&mut self, t: &DeTable<'_>) -> Option<Vec<HeaderSet>> {
        let sets = self.get::<Vec<Spanned<String>>>(t, "headers", "[server]")?;
        let mut parsed = Vec::new();
        for set in sets.into_inner() {
            match set.get_ref().parse::<HeaderSet>() {
                Ok(h) if parsed.contains(&h) => self.c.error(
                    set.span(),
                    format!("header set {:?} listed twice", set.get_ref()),
                ),
                Ok(h) => parsed.push(h),
                Err(e) => self.c.error(set.span(), e.to_string()),
            }
        }
        Some(parsed)
    }

    /// `client_ip_header`, `forward_auth_source` and the connection limits.
    fn server_hardening(&mut self, t: &DeTable<'_>, server: &mut ServerConfig) {
        let what = "[server]";
        if let Some(name) = self.get::<String>(t, "client_ip_header", what) {
            match name.get_ref().parse::<ClientIpHeader>() {
                Ok(h) => server.client_ip_header = h,
                Err(e) => self.c.error(name.span(), e),
            }
        }
        if let Some(name) = self.get::<String>(t, "forward_auth_source", what) {
            match name.get_ref().as_str() {
                "x-original" => server.forward_auth_source = ForwardAuthSource::XOriginal,
                "x-forwarded" => server.forward_auth_source = ForwardAuthSource::XForwarded,
                other => self.c.error(
                    name.span(),
                    format!(
                        "unknown forward_auth_source {other:?}; expected x-original (nginx: X-Original-URI/-Method) or x-forwarded (Traefik, Caddy: X-Forwarded-Uri/-Method)"
                    ),
                ),
            }
        }
        let limits = &mut server.connections;
        if let Some(d) = self.duration(t, "header_read_timeout", what) {
            limits.header_read_timeout = d;
        }
        if let Some(d) = self.duration(t, "idle_timeout", what) {
            limits.idle_timeout = d;
        }
        if let Some(n) = self.count(t, "max_connections", what) {
            limits.max_connections = n;
        }
        if let Some(n) = self.count(t, "max_waiting", what) {
            server.max_waiting = n;
        }
    }

    /// A whole number of at least 1 (and at most a billion: beyond is surely a typo).
    fn count(&mut self, t: &DeTable<'_>, key: &str, what: &str) -> Option<usize> {
        let n = self.get::<u64>(t, key, what)?;
        match usize::try_from(*n.get_ref()) {
            Ok(v) if (1..=1_000_000_000).contains(&v) => Some(v),
            _ => {
                self.c
                    .error(n.span(), format!("{key} must be between 1 and 1000000000"));
                None
            }
        }
    }

    /// A bearer token: non-empty printable ASCII (it travels in a header).
    fn token(&mut self, t: &DeTable<'_>, key: &str, without: &str) -> Option<String> {
        let token = self.get::<String>(t, key, "[server]")?;
        if token.get_ref().trim().is_empty() {
            self.c.error(
                token.span(),
                format!("{key} must not be empty (remove it to {without})"),
            );
            None
        } else if http::HeaderValue::from_str(&format!("Bearer {}", token.get_ref())).is_err() {
            self.c.error(
                token.span(),
                format!("{key} must be printable ASCII (it travels in an HTTP header)"),
            );
            None
        } else {
            Some(token.into_inner())
        }
    }

    pub(super) fn store(
        &mut self,
        table: Option<&DeTable<'_>>,
        path: &Path,
    ) -> Option<StoreConfig> {
        let mut store = StoreConfig {
            backend: Backend::Memory,
            url: None,
            cluster: Vec::new(),
            key_prefix: "sluicegate".to_owned(),
            timeout: Duration::from_millis(50),
            max_keys: DEFAULT_MAX_KEYS,
            max_memory: crate::config::DEFAULT_MAX_MEMORY,
            snapshot: None,
            snapshot_interval: crate::config::DEFAULT_SNAPSHOT_INTERVAL,
            sync: None,
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
        if let Some(max) = self.bytes(t, "max_memory", what) {
            store.max_memory = max;
        }
        self.snapshot(t, path, &mut store);
        self.sync(t, &mut store);
        Some(store)
    }

    /// `sync`: Redis only, between `SYNC_MIN` and `SYNC_MAX` (which policies it can decide
    /// is checked with the policies, `store_can_decide`).
    fn sync(&mut self, t: &DeTable<'_>, store: &mut StoreConfig) {
        let Some(text) = self.get::<String>(t, "sync", "[store]") else {
            return;
        };
        let (min, max) = (sluicegate_redis::SYNC_MIN, sluicegate_redis::SYNC_MAX);
        let error = match parse_duration(text.get_ref()) {
            Err(e) => Some(e.to_string()),
            Ok(_) if store.backend != Backend::Redis => Some(
                "sync is for backend = \"redis\": the memory store is already local".to_owned(),
            ),
            Ok(d) if d < min || d > max => Some(format!(
                "sync must be between {} and {}",
                humantime::format_duration(min),
                humantime::format_duration(max)
            )),
            Ok(d) => {
                store.sync = Some(d);
                None
            }
        };
        if let Some(message) = error {
            self.c.error(text.span(), message);
        }
    }

    /// `snapshot` and `snapshot_interval`: the memory store's only (Redis keeps its state).
    fn snapshot(&mut self, t: &DeTable<'_>, path: &Path, store: &mut StoreConfig) {
        let what = "[store]";
        if let Some(interval) = self.duration(t, "snapshot_interval", what) {
            store.snapshot_interval = interval;
        }
        let Some(file) = self.get::<String>(t, "snapshot", what) else {
            return;
        };
        if store.backend != Backend::Memory {
            self.c.error(
                file.span(),
                "snapshot is for backend = \"memory\"; Redis keeps its own state",
            );
        } else if file.get_ref().trim().is_empty() {
            self.c.error(file.span(), "snapshot must name a file");
        } else {
            let base = path.parent().unwrap_or_else(|| Path::new(""));
            store.snapshot = Some(base.join(file.get_ref()));
        }
    }

    pub(super) fn gateway(
        &mut self,
        t: &DeTable<'_>,
        span: Range<usize>,
        file: &Path,
    ) -> Option<GatewayConfig> {
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
                    self.c.error(u.span(), reason.to_string());
                    None
                }
            });
        let upstream_timeout = self
            .duration(t, "upstream_timeout", what)
            .unwrap_or(DEFAULT_UPSTREAM_TIMEOUT);
        let tls = self.gateway_tls(t, file);
        let upstream_ca = self.upstream_ca(t, file, upstream.as_ref());
        Some(GatewayConfig {
            listen: listen?,
            upstream: upstream?,
            upstream_timeout,
            tls: tls?,
            upstream_ca: upstream_ca?,
        })
    }

    /// `tls_cert` and `tls_key` (both or neither), read and checked now, so a bad path or
    /// PEM is reported at its field by `validate`, at start and on reload. `None` on error.
    fn gateway_tls(
        &mut self,
        t: &DeTable<'_>,
        file: &Path,
    ) -> Option<Option<crate::tls::GatewayTls>> {
        let what = "[gateway]";
        let cert = self.get::<String>(t, "tls_cert", what);
        let key = self.get::<String>(t, "tls_key", what);
        let (cert, key) = match (cert, key) {
            (None, None) if t.get("tls_cert").is_none() && t.get("tls_key").is_none() => {
                return Some(None);
            }
            (Some(cert), Some(key)) => (cert, key),
            (cert, key) => {
                let (at, missing) = match (&cert, &key) {
                    (Some(c), None) if t.get("tls_key").is_none() => (c.span(), "tls_key"),
                    (None, Some(k)) if t.get("tls_cert").is_none() => (k.span(), "tls_cert"),
                    // The other one is present but invalid: its error is recorded already.
                    _ => return None,
                };
                self.c.error(
                    at,
                    format!("[gateway]: tls_cert and tls_key go together; `{missing}` is missing"),
                );
                return None;
            }
        };
        let (cert_path, key_path) = (beside(file, cert.get_ref()), beside(file, key.get_ref()));
        match crate::tls::GatewayTls::load(cert_path, key_path) {
            Ok(tls) => Some(Some(tls)),
            Err((field, e)) => {
                let (name, at) = match field {
                    crate::tls::TlsField::Cert => ("tls_cert", cert.span()),
                    crate::tls::TlsField::Key => ("tls_key", key.span()),
                };
                self.c.error(at, format!("{name}: {e}"));
                None
            }
        }
    }

    /// `upstream_ca`, read and checked now; only for an `https://` upstream.
    fn upstream_ca(
        &mut self,
        t: &DeTable<'_>,
        file: &Path,
        upstream: Option<&http::Uri>,
    ) -> Option<Option<crate::tls::UpstreamCa>> {
        let Some(ca) = self.get::<String>(t, "upstream_ca", "[gateway]") else {
            return t.get("upstream_ca").is_none().then_some(None);
        };
        if upstream.is_some_and(|u| u.scheme_str() != Some("https")) {
            self.c.error(
                ca.span(),
                "upstream_ca is for an https:// upstream; this upstream is http://",
            );
            return None;
        }
        match crate::tls::UpstreamCa::load(beside(file, ca.get_ref())) {
            Ok(ca) => Some(Some(ca)),
            Err(e) => {
                self.c.error(ca.span(), format!("upstream_ca: {e}"));
                None
            }
        }
    }

    // --- [envoy]: parsed here for spans, compiled and checked by sluicegate-envoy ---
    pub(super) fn envoy(
        &mut self,
        t: &DeTable<'_>,
        file: &Path,
        policies: &[(Arc<Policy>, Range<usize>)],
    ) -> sluicegate_envoy::EnvoySection {
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
        self.envoy_concurrency(what, algorithm.as_ref(), rules.as_ref(), policies);
        let mut flag = |key: &str| {
            self.get::<bool>(t, key, what)
                .is_some_and(Spanned::into_inner)
        };
        let (merge_domains, shadow, quota, dynamic_metadata) = (
            flag("merge_domains"),
            flag("shadow"),
            flag("quota"),
            flag("dynamic_metadata"),
        );
        let section = sluicegate_envoy::EnvoySection {
            listen,
            config,
            algorithm: algorithm.map(Spanned::into_inner),
            merge_domains,
            shadow,
            quota,
            dynamic_metadata,
            rules: rules
                .as_ref()
                .map(|r| r.get_ref().clone())
                .unwrap_or_default(),
        };
        self.envoy_compiles(&section, policies, config_key.as_ref(), rules.as_ref());
        section
    }

    /// Envoy asks before the request and never says when it ended: a lease taken there
    /// would only ever expire, so a concurrency limit cannot be enforced (CONTRACT.md).
    fn envoy_concurrency(
        &mut self,
        what: &str,
        algorithm: Option<&Spanned<AlgorithmKind>>,
        rules: Option<&Spanned<Vec<sluicegate_envoy::RuleSpec>>>,
        policies: &[(Arc<Policy>, Range<usize>)],
    ) {
        const NO_END: &str = "Envoy's rate limit service never sees when a request ends, so it cannot hold concurrency leases; limit requests in flight with the gateway or the middleware";
        if let Some(algorithm) = algorithm
            && algorithm.get_ref().is_concurrency()
        {
            self.c.error(
                algorithm.span(),
                format!("{what} algorithm \"concurrency\": {NO_END}"),
            );
        }
        let Some(rules) = rules else {
            return;
        };
        for name in rules.get_ref().iter().flat_map(|r| &r.policies) {
            if policies
                .iter()
                .any(|(p, _)| p.name() == name && p.algorithm().is_concurrency())
            {
                self.c.error(
                    rules.span(),
                    format!("{what} rule uses concurrency policy {name:?}: {NO_END}"),
                );
            }
        }
    }

    /// Compiles the section as `sluicegate-envoy` will, so its errors show at load time.
    fn envoy_compiles(
        &mut self,
        section: &sluicegate_envoy::EnvoySection,
        policies: &[(Arc<Policy>, Range<usize>)],
        config_key: Option<&Spanned<String>>,
        rules: Option<&Spanned<Vec<sluicegate_envoy::RuleSpec>>>,
    ) {
        let known: Vec<Arc<Policy>> = policies.iter().map(|(p, _)| Arc::clone(p)).collect();
        let Err(errors) = sluicegate_envoy::EnvoyConfig::load(section, &known, Path::new(""))
        else {
            return;
        };
        for error in errors.0 {
            // YAML errors carry their own file:line:column; point at the key that named them.
            let span = match (&error.file, config_key, rules) {
                (Some(_), Some(key), _) => key.span(),
                (None, _, Some(rules)) => rules.span(),
                _ => 0..0,
            };
            self.c.error(span, format!("[envoy] {error}"));
        }
    }
}

/// A path from the configuration: relative ones are relative to the file's directory.
fn beside(file: &Path, path: &str) -> PathBuf {
    let path = PathBuf::from(path);
    match file.parent() {
        Some(dir) if path.is_relative() => dir.join(path),
        _ => path,
    }
}
