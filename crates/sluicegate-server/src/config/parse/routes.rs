//! `[[routes]]`: checked here for spans, then by the middleware's own route validation.

use super::*;

impl Reader<'_> {
    pub(super) fn routes(
        &mut self,
        value: Option<&Value<'_>>,
        policies: &[(Arc<Policy>, Range<usize>)],
        pools: &[sluicegate_throttle::ValidPool],
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
            if let Some(route) = self.route(t, span, policies, pools) {
                out.push(route);
            }
        }
        out
    }

    pub(super) fn route(
        &mut self,
        t: &DeTable<'_>,
        span: Range<usize>,
        policies: &[(Arc<Policy>, Range<usize>)],
        pools: &[sluicegate_throttle::ValidPool],
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
                        if policies.iter().any(|(p, _)| {
                            p.name() == name.get_ref() && p.algorithm().is_concurrency()
                        }) {
                            self.concurrency_uses
                                .push((name.span(), name.get_ref().clone()));
                        }
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
                        "invalid key {:?}; expected ip, global, header:<name>, query:<name>, cookie:<name>, or up to 8 of ip/header/query/cookie joined by + (e.g. \"ip+header:x-api-key\")",
                        text.get_ref()
                    ),
                ),
            }
        }
        let route_path = path.as_ref().map_or(String::new(), |p| p.get_ref().clone());
        let (pool, level, weight) = self.route_pool(t, &route_path, pools);
        let allow = self.cidrs(t, "allow", what).unwrap_or_default();
        let deny = self.cidrs(t, "deny", what).unwrap_or_default();
        if self.c_len() > before
            || names
                .iter()
                .any(|n| !policies.iter().any(|(p, _)| p.name() == n))
        {
            return None;
        }
        let case_insensitive = self
            .get::<bool>(t, "case_insensitive", what)
            .is_some_and(Spanned::into_inner);
        let spec = RouteSpec {
            path: path?.into_inner(),
            methods,
            headers,
            policies: names,
            key,
            case_insensitive,
            pool,
            level,
            weight,
            allow,
            deny,
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
}

impl Reader<'_> {
    /// Without `[gateway]`, routes serve only `/v1/forward-auth`, which answers before the
    /// request is proxied and never sees it end: a lease taken there would hold its slot
    /// until `lease` passes, so a concurrency policy cannot be enforced (CONTRACT.md).
    pub(super) fn concurrency_without_gateway(&mut self) {
        for (span, name) in std::mem::take(&mut self.concurrency_uses) {
            self.c.error(
                span,
                format!(
                    "policy {name:?} limits requests in flight, but without [gateway] routes serve only /v1/forward-auth, which never sees a request end; add [gateway] (or use the middleware in your own server), or use a rate algorithm"
                ),
            );
        }
    }
}
