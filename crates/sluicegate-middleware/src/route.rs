//! Routes: which requests are limited, by which policies, keyed by what.
//!
//! A [`RouteSpec`] is one `[[routes]]` table of the configuration; a [`RouteTable`] is the
//! validated set, with the policies resolved, that answers [`RouteTable::find`].
//!
//! # Matching
//! - `path` is a prefix matched **on segment boundaries**: `/api` matches `/api`, `/api/`
//!   and `/api/users`, but not `/apix`. A prefix ending in `/` (such as `/` or `/api/`)
//!   matches every path that starts with it. The query string is not part of the path.
//!   Both the request's path and the route's are first put in normal form by
//!   [`normalize_path`](crate::path::normalize_path) (escapes of unreserved characters
//!   decoded, dot segments removed, repeated slashes merged, `;` parameters cut), so
//!   `/api/%61uth`, `/api//auth` and `/api/./auth` all meet the limits of `/api/auth`.
//!   Comparison is byte for byte, unless the route sets `case_insensitive` (ASCII case
//!   ignored: for upstreams on case-insensitive file systems or frameworks).
//! - `methods`, when given, must contain the request's method (names are case-insensitive
//!   in the configuration and upper-cased).
//! - every `headers` condition must hold: the request has that header with exactly that
//!   value (names case-insensitive, values case-sensitive).
//! - Among the routes that match, the longest `path` wins; among equally long paths, the
//!   one with more header conditions, then the one with `methods`, then the one written
//!   first. A request that matches no route is not limited.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use http::{HeaderName, HeaderValue, Method};
use ipnet::IpNet;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sluicegate_core::Policy;

use crate::access::AccessList;
use crate::lookup::HeaderLookup;

/// How a route turns a request into a client key.
///
/// Parsed from (and written as) `"ip"`, `"header:<name>"`, `"query:<name>"`,
/// `"cookie:<name>"`, `"global"`, or several of the first four joined by `+`
/// (`"ip+header:x-api-key"`).
///
/// ```
/// use sluicegate_middleware::KeySpec;
/// assert_eq!("ip".parse::<KeySpec>().unwrap(), KeySpec::Ip);
/// assert_eq!("header:X-Api-Key".parse::<KeySpec>().unwrap().to_string(), "header:x-api-key");
/// assert_eq!("cookie:session".parse::<KeySpec>().unwrap(), KeySpec::Cookie("session".into()));
/// let both = "ip+query:api_key".parse::<KeySpec>().unwrap();
/// assert_eq!(both, KeySpec::Composite(vec![KeySpec::Ip, KeySpec::Query("api_key".into())]));
/// assert_eq!(both.to_string(), "ip+query:api_key");
/// assert!("cookie".parse::<KeySpec>().is_err());
/// assert!("global+ip".parse::<KeySpec>().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum KeySpec {
    /// The client IP (see [`ClientIdentity`](crate::ClientIdentity)).
    #[default]
    Ip,
    /// The value of this header; requests without it are keyed by IP.
    Header(HeaderName),
    /// The value of this query parameter (percent-decoded); requests without it are keyed by IP.
    Query(String),
    /// The value of this cookie; requests without it are keyed by IP.
    Cookie(String),
    /// One key shared by every client.
    Global,
    /// Several of `Ip`, `Header`, `Query`, `Cookie` together (2 to 8, each at most once):
    /// one state per combination. A request missing any part is keyed by IP.
    Composite(Vec<KeySpec>),
}

impl KeySpec {
    fn parse_part(s: &str) -> Option<KeySpec> {
        let (kind, name) = s.split_once(':').unwrap_or((s, ""));
        match (kind, name) {
            ("ip", "") => Some(KeySpec::Ip),
            ("global", "") => Some(KeySpec::Global),
            ("header", name) => HeaderName::from_bytes(name.trim().as_bytes())
                .ok()
                .map(KeySpec::Header),
            ("query", name) if crate::key::valid_name(name) => {
                Some(KeySpec::Query(name.to_owned()))
            }
            ("cookie", name) if crate::key::valid_name(name) => {
                Some(KeySpec::Cookie(name.to_owned()))
            }
            _ => None,
        }
    }
}

impl FromStr for KeySpec {
    type Err = RouteError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let invalid = || RouteError::InvalidKey(s.to_owned());
        if !s.contains('+') {
            return KeySpec::parse_part(s).ok_or_else(invalid);
        }
        let mut parts: Vec<KeySpec> = Vec::new();
        for text in s.split('+') {
            let part = KeySpec::parse_part(text.trim()).ok_or_else(invalid)?;
            // `global` joined with anything is just the other part; a repeated part adds nothing.
            if part == KeySpec::Global || parts.contains(&part) {
                return Err(invalid());
            }
            parts.push(part);
        }
        if parts.len() > crate::key::MAX_PARTS {
            return Err(invalid());
        }
        Ok(KeySpec::Composite(parts))
    }
}

impl fmt::Display for KeySpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeySpec::Ip => f.write_str("ip"),
            KeySpec::Header(name) => write!(f, "header:{name}"),
            KeySpec::Query(name) => write!(f, "query:{name}"),
            KeySpec::Cookie(name) => write!(f, "cookie:{name}"),
            KeySpec::Global => f.write_str("global"),
            KeySpec::Composite(parts) => {
                for (i, part) in parts.iter().enumerate() {
                    if i > 0 {
                        f.write_str("+")?;
                    }
                    write!(f, "{part}")?;
                }
                Ok(())
            }
        }
    }
}

impl Serialize for KeySpec {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for KeySpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// A route as configured: one `[[routes]]` table.
///
/// ```
/// use sluicegate_middleware::{KeySpec, RouteSpec};
/// let spec: RouteSpec = serde_json::from_str(
///     r#"{"path": "/api/auth", "methods": ["POST"], "policies": ["auth"]}"#,
/// ).unwrap();
/// assert_eq!(spec.key, KeySpec::Ip);
/// assert!(spec.headers.is_empty());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteSpec {
    /// Path prefix, starting with `/`.
    pub path: String,
    /// Methods this route applies to; all when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub methods: Option<Vec<String>>,
    /// Exact header conditions (tiers), e.g. `{ "x-plan" = "pro" }`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// Policy names; all must admit a request, and none is consumed unless all do.
    pub policies: Vec<String>,
    /// How clients are told apart.
    #[serde(default)]
    pub key: KeySpec,
    /// Match `path` ignoring ASCII case (`/API/Auth` meets `/api/auth`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub case_insensitive: bool,
    /// Clients (CIDRs) never limited on this route, besides the server's `allow`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<IpNet>,
    /// Clients (CIDRs) always refused (403) on this route, besides the server's `deny`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<IpNet>,
    /// The pool (`[[pools]]`) this route's admitted requests pass through; the key is
    /// the flow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// The pool's level; needed when the pool has more than one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub level: Option<String>,
    /// This route's flows get this many shares within the level (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
    /// The cost charged when a request arrives (an estimate when `settle` is set); default 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<u64>,
    /// Where the real cost comes from after the response: `header:<name>` or
    /// `openai-usage` (see [`crate::settle`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settle: Option<String>,
    /// `all` (default), `failures` or `successes`: requests that do not count are given
    /// back after the response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<String>,
}

impl RouteSpec {
    /// A route on `path` under `policies`, keyed by IP, for every method.
    pub fn new(path: impl Into<String>, policies: &[&str]) -> Self {
        RouteSpec {
            path: path.into(),
            methods: None,
            headers: BTreeMap::new(),
            policies: policies.iter().map(|p| (*p).to_owned()).collect(),
            key: KeySpec::Ip,
            case_insensitive: false,
            allow: Vec::new(),
            deny: Vec::new(),
            pool: None,
            level: None,
            weight: None,
            cost: None,
            settle: None,
            count: None,
        }
    }

    /// Charges `cost` on arrival, settles the real cost from `settle` (`header:<name>` or
    /// `openai-usage`) and counts only `count` (`all`, `failures`, `successes`).
    pub fn response_rules(mut self, cost: u64, settle: Option<&str>, count: Option<&str>) -> Self {
        self.cost = Some(cost);
        self.settle = settle.map(str::to_owned);
        self.count = count.map(str::to_owned);
        self
    }

    /// The parsed `settle` and `count`, or why they are wrong.
    pub fn after_response(&self) -> Result<crate::settle::AfterResponse, String> {
        Ok(crate::settle::AfterResponse {
            settle: self.settle.as_deref().map(str::parse).transpose()?,
            count: self
                .count
                .as_deref()
                .map(str::parse)
                .transpose()?
                .unwrap_or_default(),
        })
    }

    /// Sends the route's admitted requests through `pool` at `level` (`None`: the pool's
    /// only level).
    pub fn pool(mut self, pool: impl Into<String>, level: Option<&str>) -> Self {
        self.pool = Some(pool.into());
        self.level = level.map(str::to_owned);
        self
    }

    /// Sets the weight of this route's flows within its pool level.
    pub fn weight(mut self, weight: u32) -> Self {
        self.weight = Some(weight);
        self
    }

    /// Matches the path ignoring ASCII case.
    pub fn case_insensitive(mut self, yes: bool) -> Self {
        self.case_insensitive = yes;
        self
    }

    /// Restricts the route to these methods.
    pub fn methods(mut self, methods: &[&str]) -> Self {
        self.methods = Some(methods.iter().map(|m| (*m).to_owned()).collect());
        self
    }

    /// Adds an exact header condition.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(name.into(), value.into());
        self
    }

    /// Sets the key.
    pub fn key(mut self, key: KeySpec) -> Self {
        self.key = key;
        self
    }

    /// Sets the route's allow and deny lists (see [`AccessList`]).
    pub fn access(mut self, allow: Vec<IpNet>, deny: Vec<IpNet>) -> Self {
        self.allow = allow;
        self.deny = deny;
        self
    }
}

/// Why a route is invalid. Every variant names the route by its path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    /// The path is empty, does not start with `/`, or is not a URL path.
    #[error("route path {0:?} must be a URL path starting with /")]
    InvalidPath(String),
    /// A route names a policy that is not defined.
    #[error("route {path:?}: unknown policy {policy:?} (not defined in [[policies]])")]
    UnknownPolicy {
        /// The route.
        path: String,
        /// The missing policy.
        policy: String,
    },
    /// A route with no policy.
    #[error("route {0:?}: a route needs at least one policy")]
    NoPolicy(String),
    /// The same policy twice in a route.
    #[error("route {path:?}: policy {policy:?} listed twice")]
    DuplicatePolicy {
        /// The route.
        path: String,
        /// The repeated policy.
        policy: String,
    },
    /// A method name that is not a valid HTTP token.
    #[error("route {path:?}: invalid HTTP method {method:?}")]
    InvalidMethod {
        /// The route.
        path: String,
        /// The method.
        method: String,
    },
    /// `methods = []` would never match.
    #[error("route {0:?}: methods = [] would never match; omit it to match every method")]
    EmptyMethods(String),
    /// A header condition whose name is not a valid header name.
    #[error("route {path:?}: invalid header name {name:?}")]
    InvalidHeader {
        /// The route.
        path: String,
        /// Header name.
        name: String,
        /// Header value.
        value: String,
    },
    /// A header condition whose value is not a valid header value.
    #[error("route {path:?}: invalid header value {value:?} for {name:?}")]
    InvalidHeaderValue {
        /// The route.
        path: String,
        /// Header name.
        name: String,
        /// Header value.
        value: String,
    },
    /// A key that is not `ip`, `header:<name>`, `query:<name>`, `cookie:<name>`, `global`
    /// or a composite of up to 8 distinct non-global parts joined by `+`.
    #[error(
        "invalid key {0:?}; expected \"ip\", \"header:<name>\", \"query:<name>\", \"cookie:<name>\", \"global\", or up to 8 of the others joined by \"+\" (e.g. \"ip+header:x-api-key\")"
    )]
    InvalidKey(String),
    /// A `cost`, `settle` or `count` that cannot work.
    #[error("route {path:?}: {reason}")]
    InvalidResponseRule {
        /// The route.
        path: String,
        /// Why.
        reason: String,
    },
}

/// Where in a [`RouteSpec`] a mistake is: the field, as configured, and for a list or
/// table the entry. A configuration reader maps it to a place in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteField {
    /// `path`.
    Path,
    /// `methods`, the whole list (`None`) or its entry at this index.
    Methods(Option<usize>),
    /// `headers`: the condition on this header name, as written.
    Headers(String),
    /// `policies`, the whole list (`None`) or its entry at this index.
    Policies(Option<usize>),
}

/// One mistake in a [`RouteSpec`]: where, and what.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{error}")]
pub struct RouteFieldError {
    /// Where.
    pub field: RouteField,
    /// What.
    pub error: RouteError,
}

impl RouteSpec {
    /// Every mistake in the route, each with its field, given which policy names are
    /// defined: the one set of route rules, which [`Route::new`] also applies.
    ///
    /// ```
    /// use sluicegate_middleware::{RouteField, RouteSpec};
    /// let spec = RouteSpec::new("/api", &["a", "nope", "a"]).methods(&["GET", "BAD METHOD"]);
    /// let found: Vec<RouteField> = spec.check(|name| name == "a").into_iter().map(|e| e.field).collect();
    /// assert_eq!(found, [
    ///     RouteField::Methods(Some(1)), RouteField::Policies(Some(1)), RouteField::Policies(Some(2)),
    /// ]);
    /// ```
    pub fn check(&self, defined: impl Fn(&str) -> bool) -> Vec<RouteFieldError> {
        let mut errors = Vec::new();
        let path = &self.path;
        let mut refuse = |field, error| errors.push(RouteFieldError { field, error });
        if !path.starts_with('/') || path.parse::<http::Uri>().is_err() {
            refuse(RouteField::Path, RouteError::InvalidPath(path.clone()));
        }
        match &self.methods {
            Some(list) if list.is_empty() => {
                refuse(
                    RouteField::Methods(None),
                    RouteError::EmptyMethods(path.clone()),
                );
            }
            Some(list) => {
                for (i, method) in list.iter().enumerate() {
                    if parse_method(method).is_none() {
                        let error = RouteError::InvalidMethod {
                            path: path.clone(),
                            method: method.clone(),
                        };
                        refuse(RouteField::Methods(Some(i)), error);
                    }
                }
            }
            None => {}
        }
        for (name, value) in &self.headers {
            if let Err(error) = header_condition(path, name, value) {
                refuse(RouteField::Headers(name.clone()), error);
            }
        }
        if self.policies.is_empty() {
            refuse(
                RouteField::Policies(None),
                RouteError::NoPolicy(path.clone()),
            );
        }
        for (i, name) in self.policies.iter().enumerate() {
            let (path, policy) = (path.clone(), name.clone());
            if !defined(name) {
                refuse(
                    RouteField::Policies(Some(i)),
                    RouteError::UnknownPolicy { path, policy },
                );
            } else if self.policies[..i].contains(name) {
                refuse(
                    RouteField::Policies(Some(i)),
                    RouteError::DuplicatePolicy { path, policy },
                );
            }
        }
        errors
    }
}

/// A configured method, upper-cased; `None` when it is not an HTTP token.
fn parse_method(text: &str) -> Option<Method> {
    let upper = text.trim().to_ascii_uppercase();
    Method::from_bytes(upper.as_bytes()).ok()
}

/// A header condition `name = value` as `http` types.
fn header_condition(
    path: &str,
    name: &str,
    value: &str,
) -> Result<(HeaderName, HeaderValue), RouteError> {
    let (path, name_text, value_text) = (path.to_owned(), name.to_owned(), value.to_owned());
    let name =
        HeaderName::from_bytes(name.trim().to_ascii_lowercase().as_bytes()).map_err(|_| {
            RouteError::InvalidHeader {
                path: path.clone(),
                name: name_text.clone(),
                value: value_text.clone(),
            }
        })?;
    let value = HeaderValue::from_str(value).map_err(|_| RouteError::InvalidHeaderValue {
        path,
        name: name_text,
        value: value_text,
    })?;
    Ok((name, value))
}

/// A validated route: its conditions and resolved policies.
#[derive(Debug, Clone)]
pub struct Route {
    path: Arc<str>,
    case_insensitive: bool,
    methods: Option<Vec<Method>>,
    headers: Vec<(HeaderName, HeaderValue)>,
    policies: Arc<[Arc<Policy>]>,
    key: KeySpec,
    index: usize,
    fields: Arc<crate::headers::RouteFields>,
    access: Option<AccessList>,
    pool: Option<RoutePool>,
    cost: u64,
    after: Option<Arc<crate::settle::AfterResponse>>,
}

/// A route's `pool`, `level` and `weight`, as written (resolved by
/// [`RateLimiter::with_pools`](crate::RateLimiter::with_pools)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoutePool {
    /// The pool's name.
    pub pool: String,
    /// The level, if named.
    pub level: Option<String>,
    /// Shares of each flow within the level.
    pub weight: u32,
}

impl Route {
    /// Validates `spec` ([`RouteSpec::check`]: the first mistake), resolving policy names
    /// with `lookup`.
    pub fn new(
        spec: &RouteSpec,
        index: usize,
        lookup: impl Fn(&str) -> Option<Arc<Policy>>,
    ) -> Result<Route, RouteError> {
        let policies: Vec<Option<Arc<Policy>>> = spec.policies.iter().map(|n| lookup(n)).collect();
        let defined = |name: &str| {
            spec.policies
                .iter()
                .zip(&policies)
                .any(|(n, p)| n == name && p.is_some())
        };
        if let Some(first) = spec.check(defined).into_iter().next() {
            return Err(first.error);
        }
        let policies: Vec<Arc<Policy>> = policies.into_iter().flatten().collect();
        let invalid = |reason: String| RouteError::InvalidResponseRule {
            path: spec.path.clone(),
            reason,
        };
        let cost = spec.cost.unwrap_or(1);
        crate::settle::check_cost(cost, &policies).map_err(invalid)?;
        let after = spec.after_response().map_err(invalid)?;
        let methods = spec
            .methods
            .as_ref()
            .map(|list| list.iter().filter_map(|m| parse_method(m)).collect());
        let headers = spec
            .headers
            .iter()
            .filter_map(|(name, value)| header_condition(&spec.path, name, value).ok())
            .collect();
        let path = &spec.path;
        Ok(Route {
            path: Arc::from(crate::path::normalize_path(path).as_ref()),
            case_insensitive: spec.case_insensitive,
            methods,
            headers,
            fields: Arc::new(crate::headers::RouteFields::new(&policies)),
            policies: policies.into(),
            key: spec.key.clone(),
            index,
            access: (!spec.allow.is_empty() || !spec.deny.is_empty())
                .then(|| AccessList::new(spec.allow.clone(), spec.deny.clone())),
            pool: spec.pool.as_ref().map(|pool| RoutePool {
                pool: pool.clone(),
                level: spec.level.clone(),
                weight: spec.weight.unwrap_or(1),
            }),
            cost,
            after: after.is_active().then(|| Arc::new(after)),
        })
    }

    /// The cost charged when a request arrives.
    pub fn cost(&self) -> u64 {
        self.cost
    }

    /// What happens after the response (`settle`, `count`), when anything does.
    pub fn after(&self) -> Option<&Arc<crate::settle::AfterResponse>> {
        self.after.as_ref()
    }

    /// The path prefix, in normal form.
    pub fn path(&self) -> &str {
        &self.path
    }
    /// The path prefix, shared.
    pub fn path_arc(&self) -> &Arc<str> {
        &self.path
    }
    /// The methods, if restricted.
    pub fn methods(&self) -> Option<&[Method]> {
        self.methods.as_deref()
    }
    /// The header conditions.
    pub fn headers(&self) -> &[(HeaderName, HeaderValue)] {
        &self.headers
    }
    /// The policies, in configuration order.
    pub fn policies(&self) -> &Arc<[Arc<Policy>]> {
        &self.policies
    }
    /// How the client key is formed.
    pub fn key(&self) -> &KeySpec {
        &self.key
    }
    /// The route's own allow and deny lists, if it has any.
    pub fn access(&self) -> Option<&AccessList> {
        self.access.as_ref()
    }
    /// Its `RateLimit-Policy` header value (the `ietf` set), computed once.
    pub fn policy_field(&self) -> Option<&HeaderValue> {
        self.fields.policy_field()
    }
    /// The header values that do not change between its requests, rendered once.
    pub fn fields(&self) -> &Arc<crate::headers::RouteFields> {
        &self.fields
    }
    /// The pool this route's requests pass through, if any.
    pub fn pool(&self) -> Option<&RoutePool> {
        self.pool.as_ref()
    }
    /// The route's position in the configuration.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Whether the route applies to this request; `path` must be in normal form
    /// ([`normalize_path`](crate::path::normalize_path); [`RouteTable::find`] does it).
    pub fn matches<H: HeaderLookup + ?Sized>(
        &self,
        method: &Method,
        path: &str,
        headers: &H,
    ) -> bool {
        path_matches(&self.path, path, self.case_insensitive)
            && self.methods.as_ref().is_none_or(|m| m.contains(method))
            && self
                .headers
                .iter()
                .all(|(name, value)| headers.values(name).any(|v| v == value.as_bytes()))
    }
}

/// Prefix match on segment boundaries (bytes, so a cut inside a character is harmless).
fn path_matches(prefix: &str, path: &str, case_insensitive: bool) -> bool {
    let (prefix, path) = (prefix.as_bytes(), path.as_bytes());
    let Some(head) = path.get(..prefix.len()) else {
        return false;
    };
    let same = if case_insensitive {
        head.eq_ignore_ascii_case(prefix)
    } else {
        head == prefix
    };
    let rest = &path[prefix.len()..];
    same && (rest.is_empty() || prefix.ends_with(b"/") || rest.starts_with(b"/"))
}

/// The lengths, longest first, of the prefixes of `path` that [`path_matches`] can accept:
/// the whole path, and every cut just before or just after a `/`.
fn candidate_prefixes(path: &str) -> impl Iterator<Item = usize> + '_ {
    let bytes = path.as_bytes();
    (0..=bytes.len()).rev().filter(move |&len| {
        len == bytes.len() || bytes[len] == b'/' || (len > 0 && bytes[len - 1] == b'/')
    })
}

/// The validated routes, ordered so that the first match is the most specific.
///
/// ```
/// use std::{sync::Arc, time::Duration};
/// use http::{HeaderMap, Method};
/// use sluicegate_core::{AlgorithmKind, Policy};
/// use sluicegate_middleware::{RouteSpec, RouteTable};
///
/// let policy = |name: &str| Policy::builder(name, AlgorithmKind::Gcra, 10, Duration::from_secs(60))
///     .build().map(Arc::new).ok();
/// let table = RouteTable::new(
///     &[RouteSpec::new("/api", &["api"]), RouteSpec::new("/api/auth", &["auth"])],
///     policy,
/// )?;
/// let route = table.find(&Method::GET, "/api/auth/login", &HeaderMap::new()).unwrap();
/// assert_eq!(route.path(), "/api/auth");
/// assert!(table.find(&Method::GET, "/apix", &HeaderMap::new()).is_none());
/// # Ok::<(), sluicegate_middleware::RouteError>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct RouteTable {
    routes: Vec<Route>,
    /// Every route's path prefix, ASCII-lowercased, to the positions in `routes` of the routes
    /// with that prefix (most specific first). A lookup probes only the prefixes of the request
    /// path that end on a segment boundary, so matching costs the same for 5 or 5,000 routes.
    by_prefix: HashMap<Box<str>, Vec<usize>, foldhash::fast::RandomState>,
    /// `lengths[n]`: whether some route's prefix is `n` bytes long; other cuts are not probed.
    lengths: Vec<bool>,
}

/// Up to this many routes a scan of the sorted table is cheaper than hashing the prefixes
/// (callgrind: about 210 instructions for 5 routes, against 2,300 through the index).
const SCAN_LIMIT: usize = 16;

impl RouteTable {
    /// Validates `specs`, resolving policy names with `lookup`; the first error is returned.
    /// Use [`RouteSpec::check`] to get all of them, each with its field.
    pub fn new(
        specs: &[RouteSpec],
        lookup: impl Fn(&str) -> Option<Arc<Policy>>,
    ) -> Result<RouteTable, RouteError> {
        let routes = specs
            .iter()
            .enumerate()
            .map(|(i, spec)| Route::new(spec, i, &lookup))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(RouteTable::from_routes(routes))
    }

    /// A table of already validated routes.
    pub fn from_routes(mut routes: Vec<Route>) -> RouteTable {
        routes.sort_by_key(|r| {
            (
                std::cmp::Reverse(r.path.len()),
                std::cmp::Reverse(r.headers.len()),
                r.methods.is_none(),
                r.index,
            )
        });
        let mut by_prefix: HashMap<Box<str>, Vec<usize>, _> = HashMap::default();
        for (at, route) in routes.iter().enumerate() {
            let prefix = route.path.to_ascii_lowercase().into_boxed_str();
            by_prefix.entry(prefix).or_default().push(at);
        }
        let longest = routes.iter().map(|r| r.path.len()).max().unwrap_or(0);
        let mut lengths = vec![false; longest + 1];
        for route in &routes {
            lengths[route.path.len()] = true;
        }
        RouteTable {
            routes,
            by_prefix,
            lengths,
        }
    }

    /// The most specific route matching the request, if any. `path` is put in normal form
    /// first ([`normalize_path`](crate::path::normalize_path)); it costs no allocation when
    /// it already is.
    pub fn find<H: HeaderLookup + ?Sized>(
        &self,
        method: &Method,
        path: &str,
        headers: &H,
    ) -> Option<&Route> {
        self.find_normal(method, &crate::path::normalize_path(path), headers)
    }

    /// [`find`](Self::find) for a path already in normal form (the limiter normalises it
    /// once for routes and key extractors alike).
    pub(crate) fn find_normal<H: HeaderLookup + ?Sized>(
        &self,
        method: &Method,
        path: &str,
        headers: &H,
    ) -> Option<&Route> {
        if self.routes.len() <= SCAN_LIMIT {
            return self
                .routes
                .iter()
                .find(|route| route.matches(method, path, headers));
        }
        // Prefixes are probed longest first, and each prefix's routes are in table order, so
        // the first match is the one a scan of the sorted table would find. The lowercased
        // copy is made only when the path has an upper-case letter.
        let folded: Cow<'_, str> = if path.bytes().any(|b| b.is_ascii_uppercase()) {
            Cow::Owned(path.to_ascii_lowercase())
        } else {
            Cow::Borrowed(path)
        };
        candidate_prefixes(&folded)
            .filter(|&len| self.lengths.get(len).copied().unwrap_or(false))
            .filter_map(|len| self.by_prefix.get(&folded[..len]))
            .flatten()
            .map(|&at| &self.routes[at])
            .find(|route| route.matches(method, path, headers))
    }

    /// The routes, most specific first.
    pub fn routes(&self) -> &[Route] {
        &self.routes
    }

    /// Whether there is no route (nothing is limited).
    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderMap;
    use sluicegate_core::AlgorithmKind;
    use std::time::Duration;

    fn lookup(name: &str) -> Option<Arc<Policy>> {
        (name != "missing").then(|| {
            Arc::new(
                Policy::builder(name, AlgorithmKind::Gcra, 1, Duration::from_secs(1))
                    .build()
                    .unwrap(),
            )
        })
    }

    /// A path of up to four segments from a small alphabet (so prefixes collide often),
    /// with upper case, empty segments and a trailing slash.
    fn arb_path() -> impl proptest::strategy::Strategy<Value = String> {
        use proptest::prelude::*;
        let segment = prop::sample::select(vec!["a", "A", "api", "Api", "v1", "", "é"]);
        (prop::collection::vec(segment, 0..4), any::<bool>()).prop_map(|(segments, slash)| {
            let mut path = format!("/{}", segments.join("/"));
            if slash && !path.ends_with('/') {
                path.push('/');
            }
            path
        })
    }

    proptest::proptest! {
        /// The prefix index finds exactly the route a scan of the sorted table finds.
        #[test]
        fn the_index_finds_what_a_scan_finds(
            routes in proptest::collection::vec(
                (arb_path(), proptest::bool::ANY, proptest::bool::ANY), SCAN_LIMIT + 1..48),
            paths in proptest::collection::vec(arb_path(), 1..8),
        ) {
            let specs: Vec<_> = routes
                .iter()
                .map(|(path, ci, post)| {
                    let spec = RouteSpec::new(path.clone(), &["a"]).case_insensitive(*ci);
                    if *post { spec.methods(&["POST"]) } else { spec }
                })
                .collect();
            let table = RouteTable::new(&specs, lookup).unwrap();
            for path in &paths {
                for method in [Method::GET, Method::POST] {
                    let normal = crate::path::normalize_path(path);
                    let scan = table
                        .routes()
                        .iter()
                        .find(|r| r.matches(&method, &normal, &HeaderMap::new()))
                        .map(Route::index);
                    let found = table.find(&method, path, &HeaderMap::new()).map(Route::index);
                    proptest::prop_assert_eq!(found, scan, "{} {}", method, path);
                }
            }
        }
    }

    #[test]
    fn segment_boundaries() {
        assert!(path_matches("/api", "/api", false));
        assert!(path_matches("/api", "/api/", false));
        assert!(path_matches("/api", "/api/x", false));
        assert!(!path_matches("/api", "/apix", false));
        assert!(path_matches("/api/", "/api/x", false));
        assert!(!path_matches("/api/", "/api", false));
        assert!(path_matches("/", "/anything", false));
        assert!(!path_matches("/api", "/API/x", false));
        assert!(path_matches("/api", "/API/x", true));
        assert!(!path_matches("/api", "/APIX", true));
        assert!(!path_matches("/é", "/\u{c9}", true));
    }

    #[test]
    fn find_matches_the_normal_form() {
        let table = RouteTable::new(
            &[
                RouteSpec::new("/api/auth", &["a"]),
                RouteSpec::new("/Admin/", &["b"]).case_insensitive(true),
                RouteSpec::new("/x/%7e/", &["c"]),
            ],
            lookup,
        )
        .unwrap();
        let find = |p: &str| {
            table
                .find(&Method::GET, p, &HeaderMap::new())
                .map(Route::path)
        };
        for p in [
            "/api/%61uth/login",
            "/api//auth",
            "/api/./auth",
            "/api/auth;x",
        ] {
            assert_eq!(find(p), Some("/api/auth"), "{p}");
        }
        assert_eq!(find("/ADMIN/users"), Some("/Admin/"));
        assert_eq!(find("/admin/%2E/users"), Some("/Admin/"));
        assert_eq!(find("/x/~/y"), Some("/x/~/"));
        assert_eq!(find("/API/auth"), None);
    }

    #[test]
    fn specificity() {
        let specs = [
            RouteSpec::new("/api", &["a"]),
            RouteSpec::new("/api", &["b"]).methods(&["post"]),
            RouteSpec::new("/api", &["c"]).header("x-plan", "pro"),
            RouteSpec::new("/api", &["d"])
                .header("x-plan", "pro")
                .methods(&["POST"]),
        ];
        let table = RouteTable::new(&specs, lookup).unwrap();
        let mut pro = HeaderMap::new();
        pro.insert("x-plan", HeaderValue::from_static("pro"));
        let name = |m: &Method, h: &HeaderMap| {
            table.find(m, "/api/x", h).unwrap().policies()[0]
                .name()
                .to_owned()
        };
        assert_eq!(name(&Method::GET, &HeaderMap::new()), "a");
        assert_eq!(name(&Method::POST, &HeaderMap::new()), "b");
        assert_eq!(name(&Method::GET, &pro), "c");
        assert_eq!(name(&Method::POST, &pro), "d");
    }

    #[test]
    fn errors() {
        let bad = |spec: RouteSpec| RouteTable::new(&[spec], lookup).unwrap_err();
        assert!(matches!(
            bad(RouteSpec::new("/x", &["missing"])),
            RouteError::UnknownPolicy { .. }
        ));
        assert!(matches!(
            bad(RouteSpec::new("x", &["a"])),
            RouteError::InvalidPath(_)
        ));
        assert!(matches!(
            bad(RouteSpec::new("/x", &[])),
            RouteError::NoPolicy(_)
        ));
        assert!(matches!(
            bad(RouteSpec::new("/x", &["a", "a"])),
            RouteError::DuplicatePolicy { .. }
        ));
        assert!(matches!(
            bad(RouteSpec::new("/x", &["a"]).methods(&["GE T"])),
            RouteError::InvalidMethod { .. }
        ));
        assert!(matches!(
            bad(RouteSpec::new("/x", &["a"]).header("bad name", "v")),
            RouteError::InvalidHeader { .. }
        ));
        let toml_like: Result<RouteSpec, _> =
            serde_json::from_str(r#"{"path": "/", "policies": ["a"], "extra": 1}"#);
        assert!(toml_like.is_err());
        let specs = [
            RouteSpec::new("/ok", &["a"]),
            RouteSpec::new("/x", &["missing"]),
            RouteSpec::new("nope", &["a"]),
        ];
        let wrong: Vec<usize> = specs
            .iter()
            .enumerate()
            .filter(|(_, spec)| !spec.check(|name| lookup(name).is_some()).is_empty())
            .map(|(i, _)| i)
            .collect();
        assert_eq!(wrong, [1, 2]);
        let bad_key: Result<RouteSpec, _> =
            serde_json::from_str(r#"{"path": "/", "policies": ["a"], "key": "cookie:"}"#);
        assert!(bad_key.is_err());
    }
}
