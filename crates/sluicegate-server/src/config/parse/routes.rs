//! `[[routes]]`: checked here for spans, then by the middleware's own route validation.

use super::*;

impl Reader<'_> {
    pub(super) fn routes(
        &mut self,
        value: Option<&Value<'_>>,
        policies: &[(Arc<Policy>, Range<usize>)],
        pools: &[sluicegate_throttle::ValidPool],
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

    /// One `[[routes]]` table: the reader checks what TOML decides (unknown fields, types,
    /// the required `path` and `policies`, the key's syntax, CIDRs, the pool); the
    /// middleware's [`RouteSpec::check`] checks the route, and each of its errors is
    /// reported at its field's place.
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
        let methods = self.get::<Vec<Spanned<String>>>(t, "methods", what);
        let headers = self.get::<BTreeMap<Spanned<String>, Spanned<String>>>(t, "headers", what);
        let names = self.required::<Vec<Spanned<String>>>(t, "policies", what, &span);
        let key = self.route_key(t);
        let route_path = path.as_ref().map_or(String::new(), |p| p.get_ref().clone());
        let (pool, level, weight) = self.route_pool(t, &route_path, pools);
        let allow = self.cidrs(t, "allow", what).unwrap_or_default();
        let deny = self.cidrs(t, "deny", what).unwrap_or_default();
        let case_insensitive = self
            .get::<bool>(t, "case_insensitive", what)
            .is_some_and(Spanned::into_inner);
        let (cost, settle, count) = self.route_response(t, names.as_ref(), policies);
        let plain = |list: &Spanned<Vec<Spanned<String>>>| -> Vec<String> {
            list.get_ref().iter().map(|s| s.get_ref().clone()).collect()
        };
        let spec = RouteSpec {
            path: path?.into_inner(),
            methods: methods.as_ref().map(plain),
            headers: headers.as_ref().map_or_else(BTreeMap::new, |map| {
                map.get_ref()
                    .iter()
                    .map(|(k, v)| (k.get_ref().to_ascii_lowercase(), v.get_ref().clone()))
                    .collect()
            }),
            policies: names.as_ref().map(plain).unwrap_or_default(),
            key: key.unwrap_or_default(),
            case_insensitive,
            pool,
            level,
            weight,
            allow,
            deny,
            cost,
            settle,
            count,
        };
        let names = names?;
        let places = Places {
            path: t.get("path").map_or(span.clone(), |v| v.span()),
            table: span,
            methods: methods.as_ref(),
            headers: headers.as_ref(),
            policies: &names,
        };
        for e in spec.check(|name| self.defined.iter().any(|d| d == name)) {
            self.c.error(places.of(&e), e.to_string());
        }
        self.note_concurrency(&names, policies);
        // A route naming a policy that is itself invalid: that policy's error was reported.
        let resolved = spec
            .policies
            .iter()
            .all(|n| policies.iter().any(|(p, _)| p.name() == n));
        (self.c_len() == before && resolved).then_some(spec)
    }

    /// The route's `cost`, `settle` and `count` (response-aware routes), each checked
    /// where it is written: a cost every policy can admit, a settle source, a count.
    fn route_response(
        &mut self,
        t: &DeTable<'_>,
        names: Option<&Spanned<Vec<Spanned<String>>>>,
        policies: &[(Arc<Policy>, Range<usize>)],
    ) -> (Option<u64>, Option<String>, Option<String>) {
        let cost = self.get::<u64>(t, "cost", "route").and_then(|cost| {
            let named: Vec<Arc<Policy>> = policies
                .iter()
                .filter(|(p, _)| {
                    names.is_some_and(|n| n.get_ref().iter().any(|n| n.get_ref() == p.name()))
                })
                .map(|(p, _)| Arc::clone(p))
                .collect();
            match sluicegate_middleware::settle::check_cost(*cost.get_ref(), &named) {
                Ok(()) => Some(cost.into_inner()),
                Err(e) => {
                    self.c.error(cost.span(), e);
                    None
                }
            }
        });
        let mut text = |key: &str, check: fn(&str) -> Result<(), String>| {
            let value = self.get::<String>(t, key, "route")?;
            match check(value.get_ref()) {
                Ok(()) => Some(value.into_inner()),
                Err(e) => {
                    self.c.error(value.span(), e);
                    None
                }
            }
        };
        let settle = text("settle", |s| {
            s.parse::<sluicegate_middleware::SettleFrom>().map(drop)
        });
        let count = text("count", |s| {
            s.parse::<sluicegate_middleware::Count>().map(drop)
        });
        (cost, settle, count)
    }

    /// The route's `key`, parsed: `None` (reported) when it is not a key.
    fn route_key(&mut self, t: &DeTable<'_>) -> Option<KeySpec> {
        let text = self.get::<String>(t, "key", "route")?;
        match text.get_ref().parse::<KeySpec>() {
            Ok(key) => Some(key),
            Err(e) => {
                self.c.error(text.span(), e.to_string());
                None
            }
        }
    }

    /// Remembers where routes name a concurrency policy (see [`Self::concurrency_without_gateway`]).
    fn note_concurrency(
        &mut self,
        names: &Spanned<Vec<Spanned<String>>>,
        policies: &[(Arc<Policy>, Range<usize>)],
    ) {
        for name in names.get_ref() {
            let concurrency = policies
                .iter()
                .any(|(p, _)| p.name() == name.get_ref() && p.algorithm().is_concurrency());
            if concurrency {
                self.concurrency_uses
                    .push((name.span(), name.get_ref().clone()));
            }
        }
    }
}

/// Where a route's fields are in the file.
struct Places<'a> {
    table: Range<usize>,
    path: Range<usize>,
    methods: Option<&'a Spanned<Vec<Spanned<String>>>>,
    headers: Option<&'a Spanned<BTreeMap<Spanned<String>, Spanned<String>>>>,
    policies: &'a Spanned<Vec<Spanned<String>>>,
}

impl Places<'_> {
    /// The span of the mistake's field (a header condition's value when the value is
    /// wrong); the table's when the field is not written.
    fn of(&self, e: &RouteFieldError) -> Range<usize> {
        let value = matches!(e.error, RouteError::InvalidHeaderValue { .. });
        let entry = |list: &Spanned<Vec<Spanned<String>>>, i: &Option<usize>| match i {
            Some(i) => list.get_ref().get(*i).map_or(list.span(), Spanned::span),
            None => list.span(),
        };
        match &e.field {
            RouteField::Path => self.path.clone(),
            RouteField::Methods(i) => self.methods.map_or(self.table.clone(), |m| entry(m, i)),
            RouteField::Policies(i) => entry(self.policies, i),
            RouteField::Headers(name) => self.headers.map_or(self.table.clone(), |map| {
                map.get_ref()
                    .iter()
                    .find(|(k, _)| k.get_ref().eq_ignore_ascii_case(name))
                    .map_or(map.span(), |(k, v)| if value { v.span() } else { k.span() })
            }),
        }
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
