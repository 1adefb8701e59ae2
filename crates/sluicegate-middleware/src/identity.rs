//! Who the client is: its IP address behind trusted proxies, and the key a route limits by.
//!
//! `X-Forwarded-For` and `Forwarded` are written by whoever sends the request, so they are
//! believed only as far as a chain of trusted proxies vouches for them: starting from the
//! TCP peer, each trusted hop names the one before it, and the first address that is not
//! trusted is the client. A spoofed header from an untrusted peer changes nothing.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use http::{HeaderMap, HeaderName, Method};
use ipnet::{IpNet, Ipv6Net};
use sluicegate_core::store::MAX_KEY_LEN;

use crate::key::ClientKey;
use crate::lookup::{HeaderLookup, visible_ascii};
use crate::route::{KeySpec, Route};

/// How the client IP is found: the peer, or what trusted proxies say.
///
/// ```
/// use std::net::IpAddr;
/// use http::HeaderMap;
/// use sluicegate_middleware::ClientIdentity;
///
/// let identity = ClientIdentity::new(vec!["10.0.0.0/8".parse()?], 64);
/// let mut headers = HeaderMap::new();
/// headers.insert("x-forwarded-for", "198.51.100.1, 203.0.113.9, 10.0.0.2".parse()?);
///
/// // From a trusted proxy: the right-most untrusted address.
/// let proxy: IpAddr = "10.0.0.1".parse()?;
/// assert_eq!(identity.client_ip(proxy, &headers), "203.0.113.9".parse::<IpAddr>()?);
/// // From anyone else: the header is ignored.
/// let stranger: IpAddr = "192.0.2.7".parse()?;
/// assert_eq!(identity.client_ip(stranger, &headers), stranger);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
/// The one header a trusted proxy names the client in (`server.client_ip_header`).
///
/// Only this header is read: a proxy that writes `Forwarded` does not remove the
/// `X-Forwarded-For` a client sent, so reading both would let the client choose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClientIpHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2` (nginx, HAProxy `option forwardfor`,
    /// Traefik, Caddy, most load balancers).
    #[default]
    XForwardedFor,
    /// `Forwarded: for=client, for=proxy1` (RFC 7239).
    Forwarded,
    /// `X-Real-IP: client` (nginx `proxy_set_header X-Real-IP $remote_addr`).
    XRealIp,
}

impl ClientIpHeader {
    /// The configuration name: `x-forwarded-for`, `forwarded` or `x-real-ip`.
    pub fn name(self) -> &'static str {
        match self {
            ClientIpHeader::XForwardedFor => "x-forwarded-for",
            ClientIpHeader::Forwarded => "forwarded",
            ClientIpHeader::XRealIp => "x-real-ip",
        }
    }

    // A `static` lent, where a `const` was a `HeaderName` made and dropped (a call through
    // the `Bytes` vtable) on every request.
    fn header(self) -> &'static HeaderName {
        match self {
            ClientIpHeader::XForwardedFor => &X_FORWARDED_FOR,
            ClientIpHeader::Forwarded => &FORWARDED,
            ClientIpHeader::XRealIp => &X_REAL_IP,
        }
    }

    fn parser(self) -> fn(&str) -> Option<IpAddr> {
        match self {
            ClientIpHeader::Forwarded => forwarded_for,
            ClientIpHeader::XForwardedFor | ClientIpHeader::XRealIp => parse_node,
        }
    }
}

impl std::str::FromStr for ClientIpHeader {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "x-forwarded-for" => Ok(ClientIpHeader::XForwardedFor),
            "forwarded" => Ok(ClientIpHeader::Forwarded),
            "x-real-ip" => Ok(ClientIpHeader::XRealIp),
            _ => Err(format!(
                "unknown client_ip_header {s:?}; expected x-forwarded-for, forwarded or x-real-ip"
            )),
        }
    }
}

/// How the client IP is found: the peer, or what trusted proxies say.
///
/// ```
/// use std::net::IpAddr;
/// use http::HeaderMap;
/// use sluicegate_middleware::ClientIdentity;
///
/// let identity = ClientIdentity::new(vec!["10.0.0.0/8".parse()?], 64);
/// let mut headers = HeaderMap::new();
/// headers.insert("x-forwarded-for", "198.51.100.1, 203.0.113.9, 10.0.0.2".parse()?);
///
/// // From a trusted proxy: the right-most untrusted address.
/// let proxy: IpAddr = "10.0.0.1".parse()?;
/// assert_eq!(identity.client_ip(proxy, &headers), "203.0.113.9".parse::<IpAddr>()?);
/// // From anyone else: the header is ignored.
/// let stranger: IpAddr = "192.0.2.7".parse()?;
/// assert_eq!(identity.client_ip(stranger, &headers), stranger);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientIdentity {
    /// Peers (and hops) allowed to say who the client is.
    pub trusted_proxies: Vec<IpNet>,
    /// IPv6 clients are limited per network of this prefix length (0..=128).
    pub ipv6_prefix: u8,
    /// The one header read from trusted proxies.
    pub header: ClientIpHeader,
}

impl Default for ClientIdentity {
    /// No trusted proxy; IPv6 per /64; `X-Forwarded-For`.
    fn default() -> Self {
        ClientIdentity {
            trusted_proxies: Vec::new(),
            ipv6_prefix: 64,
            header: ClientIpHeader::XForwardedFor,
        }
    }
}

impl ClientIdentity {
    /// An identity trusting `trusted_proxies`, cutting IPv6 addresses to `ipv6_prefix` bits
    /// (values over 128 are taken as 128), reading `X-Forwarded-For`.
    pub fn new(trusted_proxies: Vec<IpNet>, ipv6_prefix: u8) -> Self {
        ClientIdentity {
            trusted_proxies,
            ipv6_prefix: ipv6_prefix.min(128),
            header: ClientIpHeader::XForwardedFor,
        }
    }

    /// Reads `header` instead of `X-Forwarded-For`.
    pub fn with_header(mut self, header: ClientIpHeader) -> Self {
        self.header = header;
        self
    }

    /// Whether `ip` may speak for the client.
    pub fn is_trusted(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.trusted_proxies.iter().any(|net| net_contains(net, ip))
    }

    /// The client's address: `peer` unless it is trusted; then the right-most address of
    /// the configured [`header`](Self::header) (all its lines, in order, as one list) that
    /// is not trusted. If the chain holds only trusted addresses, the left-most.
    ///
    /// Entries are parsed one by one, so a malformed one (a non-ASCII byte, `unknown`, an
    /// obfuscated `Forwarded` node) spoils only itself: the proxy's own entry on the same
    /// line still names the client. Reaching a malformed entry ends the walk at the last
    /// good address, which is never the trusted peer when the header named anything good.
    /// IPv4-mapped IPv6 addresses count as IPv4; IPv6 addresses are cut to
    /// [`ipv6_prefix`](Self::ipv6_prefix).
    pub fn client_ip<H: HeaderLookup + ?Sized>(&self, peer: IpAddr, headers: &H) -> IpAddr {
        self.mask(self.client_addr(peer, headers))
    }

    /// The client's address as [`client_ip`](Self::client_ip) finds it, before IPv6 is cut
    /// to the prefix: what allow and deny lists match.
    pub fn client_addr<H: HeaderLookup + ?Sized>(&self, peer: IpAddr, headers: &H) -> IpAddr {
        let mut current = canonical(peer);
        if !self.is_trusted(current) {
            return current;
        }
        let parse = self.header.parser();
        // A node of `X-Forwarded-For` or `X-Real-IP` is most often a bare IPv4 address:
        // read off the bytes first (`Forwarded`'s elements are `for=…` pairs).
        let nodes = self.header != ClientIpHeader::Forwarded;
        // Walk right to left, straight off the header bytes: no allocation per request.
        for value in headers.values(self.header.header()).rev() {
            for entry in value.rsplit(|b| *b == b',') {
                if entry.iter().all(u8::is_ascii_whitespace) {
                    continue; // "a,,b" or a trailing comma: nothing said, nothing spoiled
                }
                let parsed = match dotted_quad(entry).filter(|_| nodes) {
                    Some(v4) => Some(IpAddr::V4(v4)),
                    None => std::str::from_utf8(entry).ok().and_then(parse),
                };
                match parsed.map(canonical) {
                    None => return current,
                    Some(ip) if self.is_trusted(ip) => current = ip,
                    Some(ip) => return ip,
                }
            }
        }
        current
    }

    /// Cuts an IPv6 address to the configured prefix; IPv4 is unchanged.
    pub fn mask(&self, ip: IpAddr) -> IpAddr {
        match canonical(ip) {
            IpAddr::V6(v6) => Ipv6Net::new(v6, self.ipv6_prefix)
                .map(|net| IpAddr::V6(net.network()))
                .unwrap_or(IpAddr::V6(v6)),
            v4 => v4,
        }
    }

    /// The client key for `ip` (already found by [`client_ip`](Self::client_ip)):
    /// `ip:203.0.113.9`, or `ip:2001:db8:1:2::/64` for a masked IPv6 network.
    pub fn ip_key(&self, ip: IpAddr) -> String {
        use std::fmt::Write;
        let mut key = String::with_capacity(48);
        key.push_str("ip:");
        match ip {
            // The hot case, without the formatting machinery.
            IpAddr::V4(v4) => {
                for (i, octet) in v4.octets().into_iter().enumerate() {
                    if i > 0 {
                        key.push('.');
                    }
                    push_u8(&mut key, octet);
                }
            }
            IpAddr::V6(v6) => {
                let _ = write!(key, "{v6}");
                if self.ipv6_prefix < 128 {
                    let _ = write!(key, "/{}", self.ipv6_prefix);
                }
            }
        }
        key
    }
}

impl ClientIdentity {
    /// [`ip_key`](Self::ip_key) as a decision holds it: an IPv4 key in place, without an
    /// allocation.
    pub(crate) fn client_key(&self, ip: IpAddr) -> ClientKey {
        match ip {
            IpAddr::V4(v4) => ClientKey::ipv4(v4),
            v6 => ClientKey::from(self.ip_key(v6)),
        }
    }
}

fn push_u8(out: &mut String, n: u8) {
    if n >= 100 {
        out.push(char::from(b'0' + n / 100));
    }
    if n >= 10 {
        out.push(char::from(b'0' + (n / 10) % 10));
    }
    out.push(char::from(b'0' + n % 10));
}

static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
static X_REAL_IP: HeaderName = HeaderName::from_static("x-real-ip");
static FORWARDED: HeaderName = http::header::FORWARDED;

/// Whether `net` holds `ip` (what `IpNet::contains` says): the address's bits under the
/// prefix are the network's. `ipnet` compares against the network and broadcast addresses
/// it computes each time, about twice the instructions for the trusted-proxy checks made
/// twice a request (`net_contains_is_ipnet_s`).
fn net_contains(net: &IpNet, ip: IpAddr) -> bool {
    match (net, ip) {
        (IpNet::V4(net), IpAddr::V4(ip)) => {
            let mask = u32::MAX
                .checked_shl(32 - u32::from(net.prefix_len()))
                .unwrap_or(0);
            (u32::from(net.addr()) ^ u32::from(ip)) & mask == 0
        }
        (IpNet::V6(net), IpAddr::V6(ip)) => {
            let mask = u128::MAX
                .checked_shl(128 - u32::from(net.prefix_len()))
                .unwrap_or(0);
            (u128::from(net.addr()) ^ u128::from(ip)) & mask == 0
        }
        _ => false,
    }
}

/// IPv4-mapped IPv6 (`::ffff:a.b.c.d`) as IPv4, so a dual-stack listener does not split a
/// client in two.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

/// `bytes` as a dotted-quad IPv4 address (`203.0.113.9`, ASCII whitespace around it
/// allowed), read straight off the bytes; `None` for anything else, which [`parse_node`]
/// then reads. It accepts only what `parse_node` reads the same (four decimal octets of at
/// most 255 without a leading zero, as std's parser: the property test
/// `dotted_quad_reads_what_parse_node_reads` holds it to that) and skips the UTF-8 check
/// and std's general address parser, most of the forwarded chain's ~1,050 instructions a
/// request (callgrind, docs/benchmarks/middleware.md).
fn dotted_quad(bytes: &[u8]) -> Option<Ipv4Addr> {
    // Octet by octet: one to three digits each, then a dot or the end. Reading a byte at a
    // time with a state (the first version, kept as the tests' oracle) cost ~20
    // instructions a byte.
    let mut rest = bytes.trim_ascii();
    let mut octets = [0u8; 4];
    for (i, octet) in octets.iter_mut().enumerate() {
        let (value, len) = leading_octet(rest)?;
        *octet = value;
        rest = rest.get(len..)?;
        if i < 3 {
            rest = rest.strip_prefix(b".")?;
        }
    }
    rest.is_empty().then(|| Ipv4Addr::from(octets))
}

/// The decimal octet `bytes` starts with and its length: `0` alone (a leading zero then
/// leaves a digit where the caller wants a dot or the end, and the address is refused), or
/// one to three digits of at most 255 (a fourth digit is likewise left for the caller).
#[inline]
fn leading_octet(bytes: &[u8]) -> Option<(u8, usize)> {
    let digit = |i: usize| {
        bytes
            .get(i)
            .map(|b| b.wrapping_sub(b'0'))
            .filter(|d| *d < 10)
    };
    let first = digit(0)?;
    if first == 0 {
        return Some((0, 1));
    }
    let Some(second) = digit(1) else {
        return Some((first, 1));
    };
    let Some(third) = digit(2) else {
        return Some((first * 10 + second, 2));
    };
    let value = u16::from(first) * 100 + u16::from(second) * 10 + u16::from(third);
    Some((u8::try_from(value).ok()?, 3))
}

/// One node of `X-Forwarded-For` or `Forwarded: for=`: `1.2.3.4`, `1.2.3.4:80`,
/// `2001:db8::1`, `[2001:db8::1]` or `[2001:db8::1]:443` (surrounding whitespace ignored).
/// `None` for anything else. Pure; never panics (a fuzz target).
///
/// ```
/// use sluicegate_middleware::identity::parse_node;
/// assert_eq!(parse_node(" [2001:db8::1]:443 "), Some("2001:db8::1".parse().unwrap()));
/// assert_eq!(parse_node("unknown"), None);
/// ```
pub fn parse_node(text: &str) -> Option<IpAddr> {
    let text = text.trim();
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Some(rest) = text.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        let port_ok = after.is_empty()
            || after
                .strip_prefix(':')
                .is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
        return port_ok.then(|| inside.parse::<Ipv6Addr>().ok().map(IpAddr::V6))?;
    }
    let (host, port) = text.rsplit_once(':')?;
    if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    host.parse::<Ipv4Addr>().ok().map(IpAddr::V4)
}

/// The `for=` node of one `Forwarded` element (RFC 7239), e.g.
/// `for="[2001:db8::1]:80";proto=https`; `None` without one, or for `unknown` and
/// obfuscated nodes. Pure; never panics (a fuzz target).
///
/// ```
/// use sluicegate_middleware::identity::forwarded_for;
/// assert_eq!(forwarded_for("proto=http;For=\"192.0.2.60:80\""), Some("192.0.2.60".parse().unwrap()));
/// assert_eq!(forwarded_for("for=_hidden"), None);
/// ```
pub fn forwarded_for(element: &str) -> Option<IpAddr> {
    element.split(';').find_map(|pair| {
        let (name, value) = pair.split_once('=')?;
        if !name.trim().eq_ignore_ascii_case("for") {
            return None;
        }
        let value = value.trim();
        let value = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or(value);
        parse_node(value)
    })
}

/// A client key as it may appear in a log: its kind (`ip:`, `header:x-api-key:`) and a
/// short fingerprint, never the value. Keys are API keys, session cookies and addresses;
/// logs travel further than the limiter's state. The fingerprint is keyed per process, so
/// lines about one client can be matched up, but a low-entropy value (an IPv4 address)
/// cannot be recovered by hashing every candidate.
///
/// ```
/// use sluicegate_middleware::identity::key_hint;
/// let hint = key_hint("header:x-api-key:sk_live_secret");
/// assert!(hint.starts_with("header:x-api-key:#"));
/// assert!(!hint.contains("secret"));
/// assert_eq!(hint, key_hint("header:x-api-key:sk_live_secret"));
/// assert!(key_hint("ip:203.0.113.9").starts_with("ip:#"));
/// ```
pub fn key_hint(key: &str) -> String {
    use std::hash::BuildHasher;
    static SEED: std::sync::OnceLock<std::collections::hash_map::RandomState> =
        std::sync::OnceLock::new();
    let fingerprint = SEED
        .get_or_init(std::collections::hash_map::RandomState::new)
        .hash_one(key);
    let kind = match key.split_once(':') {
        Some(("ip", _)) => "ip:".len(),
        Some((kind, rest)) if kind.bytes().all(|b| b.is_ascii_lowercase()) => {
            // `header:<name>:<value>` and the like: the name is configuration, not data.
            match rest.split_once(':') {
                Some((name, _)) if !name.is_empty() && !name.contains(['=', ' ']) => {
                    kind.len() + 1 + name.len() + 1
                }
                _ => kind.len() + 1,
            }
        }
        _ => 0,
    };
    format!("{}#{:08x}", &key[..kind], fingerprint as u32)
}

/// What a [`KeyExtractor`] may look at.
#[derive(Debug, Clone, Copy)]
pub struct KeyContext<'a> {
    /// The request method.
    pub method: &'a Method,
    /// The request path.
    pub path: &'a str,
    /// The query string, without the `?`, if the request has one.
    pub query: Option<&'a str>,
    /// The request headers.
    pub headers: &'a HeaderMap,
    /// The TCP peer.
    pub peer: IpAddr,
    /// The client IP as found by [`ClientIdentity::client_ip`].
    pub client_ip: IpAddr,
    /// The identity in use (for [`ClientIdentity::ip_key`]).
    pub identity: &'a ClientIdentity,
}

/// Turns a request on a route into the client key the store limits by.
///
/// The default, [`RouteKey`], follows the route's [`KeySpec`]. Implement this to key by
/// anything else (a JWT subject, a tenant from the path); return `None` to let a request
/// through unlimited. Keys longer than 1024 bytes are not allowed by the stores: the
/// limiter falls back to the IP key for them.
///
/// ```
/// use sluicegate_middleware::{KeyContext, KeyExtractor, Route};
///
/// /// Limits per tenant, the first path segment after `/t/`.
/// struct Tenant;
/// impl KeyExtractor for Tenant {
///     fn key(&self, _route: &Route, request: &KeyContext<'_>) -> Option<String> {
///         let tenant = request.path.strip_prefix("/t/")?.split('/').next()?;
///         Some(format!("tenant:{tenant}"))
///     }
/// }
/// ```
pub trait KeyExtractor: Send + Sync + 'static {
    /// The key, or `None` to leave the request unlimited.
    fn key(&self, route: &Route, request: &KeyContext<'_>) -> Option<String>;
}

/// The standard keys of a route's [`KeySpec`]: `ip:<client ip>`, `header:<name>:<value>`
/// (falling back to the IP key when the header is absent, empty, not visible ASCII or
/// too long) and `global`. The prefixes keep a header value from ever naming another
/// client's IP bucket.
#[derive(Debug, Clone, Copy, Default)]
pub struct RouteKey;

impl KeyExtractor for RouteKey {
    fn key(&self, route: &Route, request: &KeyContext<'_>) -> Option<String> {
        Some(route_key(route.key(), request))
    }
}

/// The key of `spec` for a request (see [`RouteKey`]). A request without the header,
/// query parameter or cookie the spec names (or whose key would be over 1024 bytes) is
/// keyed by IP; a composite is keyed by IP when any of its parts is missing.
pub fn route_key(spec: &KeySpec, request: &KeyContext<'_>) -> String {
    let inputs = KeyInputs {
        headers: request.headers,
        query: request.query,
        client_ip: request.client_ip,
        identity: request.identity,
    };
    route_key_of(spec, &inputs).into_string()
}

/// What the standard keys read of a request, from any [`HeaderLookup`].
pub(crate) struct KeyInputs<'a, H: ?Sized> {
    pub(crate) headers: &'a H,
    pub(crate) query: Option<&'a str>,
    pub(crate) client_ip: IpAddr,
    pub(crate) identity: &'a ClientIdentity,
}

/// [`route_key`] on any [`HeaderLookup`]: the one place the standard keys are formed.
pub(crate) fn route_key_of<H: HeaderLookup + ?Sized>(
    spec: &KeySpec,
    request: &KeyInputs<'_, H>,
) -> ClientKey {
    let ip_key = || request.identity.client_key(request.client_ip);
    let key = match spec {
        // An IP key (46 bytes at most) is never over `MAX_KEY_LEN`; IPv4 is held in place.
        KeySpec::Ip => return ip_key(),
        KeySpec::Composite(parts) => composite_key(parts, request),
        part => part_key(part, request),
    };
    key.filter(|k| k.len() <= MAX_KEY_LEN)
        .map_or_else(ip_key, ClientKey::from)
}

/// One part's key, prefixed by its kind so that no value can name another kind's state
/// (a header value is never an IP key); `None` when the request lacks it.
fn part_key<H: HeaderLookup + ?Sized>(
    spec: &KeySpec,
    request: &KeyInputs<'_, H>,
) -> Option<String> {
    match spec {
        KeySpec::Ip => Some(request.identity.ip_key(request.client_ip)),
        KeySpec::Global => Some("global".to_owned()),
        KeySpec::Header(name) => {
            // The first line only, as `HeaderMap::get` reads.
            let value = request
                .headers
                .values(name)
                .next()
                .and_then(visible_ascii)
                .map(str::trim)
                .filter(|v| !v.is_empty())?;
            Some(format!("header:{}:{value}", name.as_str()))
        }
        KeySpec::Query(name) => {
            let value = crate::key::query_value(request.query?, name)?;
            Some(format!("query:{name}:{value}"))
        }
        KeySpec::Cookie(name) => {
            let lines = request
                .headers
                .values(&http::header::COOKIE)
                .filter_map(visible_ascii);
            let value = crate::key::cookie_value(lines, name)?;
            Some(format!("cookie:{name}:{value}"))
        }
        KeySpec::Composite(_) => None,
    }
}

/// The parts' keys joined by `+`, each escaped so that the join is unambiguous.
fn composite_key<H: HeaderLookup + ?Sized>(
    parts: &[KeySpec],
    request: &KeyInputs<'_, H>,
) -> Option<String> {
    let mut out = String::new();
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            out.push('+');
        }
        crate::key::escape_part(&part_key(part, request)?, &mut out);
        if out.len() > MAX_KEY_LEN {
            return None;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity() -> ClientIdentity {
        ClientIdentity::new(
            vec![
                "127.0.0.1/32".parse().unwrap(),
                "10.0.0.0/8".parse().unwrap(),
            ],
            64,
        )
    }

    fn xff(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", value.parse().unwrap());
        h
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// The walk as it was before [`dotted_quad`]: every entry through the UTF-8 check
    /// and the configured parser (the oracle of the fast path).
    fn client_addr_slow(id: &ClientIdentity, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let mut current = canonical(peer);
        if !id.is_trusted(current) {
            return current;
        }
        let parse = id.header.parser();
        for value in headers.get_all(id.header.header()).iter().rev() {
            for entry in value.as_bytes().rsplit(|b| *b == b',') {
                if entry.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                match std::str::from_utf8(entry)
                    .ok()
                    .and_then(parse)
                    .map(canonical)
                {
                    None => return current,
                    Some(ip) if id.is_trusted(ip) => current = ip,
                    Some(ip) => return ip,
                }
            }
        }
        current
    }

    /// Entries near a dotted quad: octets with leading zeros, over 255, too few or too
    /// many, ports, whitespace (ASCII and not), IPv6, garbage and non-ASCII bytes.
    fn node_bytes() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        let octet = prop_oneof![
            4 => (0..=255u16).prop_map(|n| n.to_string()),
            2 => (0..=255u16).prop_map(|n| format!("{n:03}")),
            1 => (0..=99u16).prop_map(|n| format!("0{n}")),
            1 => (256..=9999u16).prop_map(|n| n.to_string()),
            1 => Just(String::new()),
            1 => "[0-9a-f+-]{1,3}",
        ];
        // Mostly four octets: what the fast path reads.
        let count = prop_oneof![6 => Just(4usize), 1 => 1..7usize];
        let quad = (
            count.prop_flat_map(move |n| proptest::collection::vec(octet.clone(), n)),
            prop_oneof![
                4 => Just(""),
                1 => Just(" "),
                1 => Just("\t"),
                1 => Just("\u{a0}"),
                1 => Just(":80"),
                1 => Just(":")
            ],
            prop_oneof![
                4 => Just(""),
                1 => Just(" "),
                1 => Just("\r\n"),
                1 => Just("\u{2003}")
            ],
        )
            .prop_map(|(octets, after, before)| {
                format!("{before}{}{after}", octets.join(".")).into_bytes()
            });
        prop_oneof![
            4 => quad,
            1 => "[0-9a-f:.\\[\\] ]{0,20}".prop_map(String::into_bytes),
            1 => proptest::collection::vec(any::<u8>(), 0..16),
        ]
    }

    /// The first `dotted_quad`, a byte at a time: the oracle of the octet-wise one.
    fn dotted_quad_bytewise(bytes: &[u8]) -> Option<Ipv4Addr> {
        // One pass over the bytes (an iterator of `split` pieces cost more than std's parser).
        let mut octets = [0u8; 4];
        let mut done = 0; // octets before the current one
        let (mut value, mut digits) = (0u16, 0u8);
        for &b in bytes.trim_ascii() {
            match b {
                b'0'..=b'9' => {
                    if digits == 1 && value == 0 {
                        return None; // a leading zero
                    }
                    value = value * 10 + u16::from(b - b'0');
                    digits += 1;
                    if value > 255 {
                        return None; // also bounds an octet to 3 digits (no leading zero)
                    }
                }
                b'.' if digits > 0 && done < 3 => {
                    octets[done] = u8::try_from(value).ok()?;
                    done += 1;
                    (value, digits) = (0, 0);
                }
                _ => return None,
            }
        }
        if digits == 0 || done != 3 {
            return None;
        }
        octets[3] = u8::try_from(value).ok()?;
        Some(Ipv4Addr::from(octets))
    }

    proptest::proptest! {
        /// The prefix test says what `ipnet` says, for networks of every length of both
        /// families, addresses near them (the same bits up to a random point) or not, and
        /// the other family.
        #[test]
        fn net_contains_is_ipnet_s(
            net_bits in proptest::num::u128::ANY,
            ip_bits in proptest::num::u128::ANY,
            prefix in 0..=128u8,
            shared in 0..=128u32,
            v4_net in proptest::bool::ANY,
            v4_ip in proptest::bool::ANY,
        ) {
            // The address shares the network's first `shared` bits.
            let keep = u128::MAX.checked_shl(128 - shared).unwrap_or(0);
            let near = (net_bits & keep) | (ip_bits & !keep);
            let net = if v4_net {
                IpNet::V4(ipnet::Ipv4Net::new(Ipv4Addr::from((net_bits >> 96) as u32), prefix.min(32)).unwrap())
            } else {
                IpNet::V6(Ipv6Net::new(Ipv6Addr::from(net_bits), prefix).unwrap())
            };
            let ip = if v4_ip {
                IpAddr::V4(Ipv4Addr::from((near >> 96) as u32))
            } else {
                IpAddr::V6(Ipv6Addr::from(near))
            };
            proptest::prop_assert_eq!(net_contains(&net, ip), net.contains(&ip));
        }

        /// The fast path accepts only what `parse_node` reads, and reads it the same.
        #[test]
        fn dotted_quad_reads_what_parse_node_reads(entry in node_bytes()) {
            proptest::prop_assert_eq!(dotted_quad(&entry), dotted_quad_bytewise(&entry));
            if let Some(v4) = dotted_quad(&entry) {
                let slow = std::str::from_utf8(&entry).ok().and_then(parse_node);
                proptest::prop_assert_eq!(slow, Some(IpAddr::V4(v4)));
            }
        }

        /// The whole walk, with the fast path, finds the client the old walk found: any
        /// chain (several lines, empty and malformed entries), trusted peer or not, every
        /// header kind.
        #[test]
        fn client_addr_is_the_walk_it_was(
            lines in proptest::collection::vec(
                proptest::collection::vec(node_bytes(), 0..5), 0..3),
            peer in proptest::prop_oneof![
                proptest::strategy::Just("127.0.0.1"),
                proptest::strategy::Just("10.1.2.3"),
                proptest::strategy::Just("192.0.2.1"),
                proptest::strategy::Just("::ffff:10.0.0.1"),
            ],
            kind in 0..3usize,
        ) {
            let header = [
                ClientIpHeader::XForwardedFor,
                ClientIpHeader::XRealIp,
                ClientIpHeader::Forwarded,
            ][kind];
            let id = identity().with_header(header);
            let mut h = HeaderMap::new();
            for line in lines {
                let mut value = line.join(&b","[..]);
                if header == ClientIpHeader::Forwarded {
                    value = line
                        .iter()
                        .flat_map(|e| [b"for=".as_slice(), e, b","].concat())
                        .collect();
                }
                if let Ok(value) = http::HeaderValue::from_bytes(&value) {
                    h.append(header.header(), value);
                }
            }
            let peer = ip(peer);
            proptest::prop_assert_eq!(id.client_addr(peer, &h), client_addr_slow(&id, peer, &h));
        }
    }

    #[test]
    fn untrusted_peer_ignores_headers() {
        assert_eq!(
            identity().client_ip(ip("192.0.2.1"), &xff("203.0.113.5")),
            ip("192.0.2.1")
        );
    }

    #[test]
    fn rightmost_untrusted_hop() {
        let id = identity();
        let peer = ip("127.0.0.1");
        assert_eq!(
            id.client_ip(peer, &xff("1.1.1.1, 2.2.2.2, 10.1.1.1")),
            ip("2.2.2.2")
        );
        assert_eq!(
            id.client_ip(peer, &xff("10.9.9.9, 10.1.1.1")),
            ip("10.9.9.9")
        );
        assert_eq!(id.client_ip(peer, &HeaderMap::new()), peer);
        // A malformed entry stops the walk at the last trusted hop.
        assert_eq!(
            id.client_ip(peer, &xff("1.1.1.1, garbage, 10.1.1.1")),
            ip("10.1.1.1")
        );
        assert_eq!(id.client_ip(peer, &xff("2.2.2.2:8080")), ip("2.2.2.2"));
        assert_eq!(
            id.client_ip(peer, &xff("[2001:db8::1]:80")),
            ip("2001:db8::")
        );
        // Several header lines are one list, in order.
        let mut h = xff("1.1.1.1");
        h.append("x-forwarded-for", "3.3.3.3".parse().unwrap());
        assert_eq!(id.client_ip(peer, &h), ip("3.3.3.3"));
    }

    #[test]
    fn a_malformed_entry_spoils_only_itself() {
        let id = identity();
        let peer = ip("127.0.0.1");
        // nginx's $proxy_add_x_forwarded_for puts the client's bytes and the real
        // address on one line; a non-ASCII byte must not hide the real address.
        let mut h = HeaderMap::new();
        h.insert(
            "x-forwarded-for",
            http::HeaderValue::from_bytes(b"1.1.1.1\xff, 2.2.2.2").unwrap(),
        );
        assert_eq!(id.client_ip(peer, &h), ip("2.2.2.2"));
        h.insert(
            "x-forwarded-for",
            http::HeaderValue::from_bytes(b"\xfe\xff, 10.1.1.1, 2.2.2.2").unwrap(),
        );
        assert_eq!(id.client_ip(peer, &h), ip("2.2.2.2"));
        // The same on separate lines, the client's first.
        let mut h = HeaderMap::new();
        h.append(
            "x-forwarded-for",
            http::HeaderValue::from_bytes(b"\xff").unwrap(),
        );
        h.append("x-forwarded-for", "2.2.2.2".parse().unwrap());
        assert_eq!(id.client_ip(peer, &h), ip("2.2.2.2"));
        // Behind only trusted hops, a malformed entry ends the walk at the last good one.
        assert_eq!(
            id.client_ip(peer, &xff("garbage, 10.2.2.2, 10.1.1.1")),
            ip("10.2.2.2")
        );
        // Empty entries say nothing.
        assert_eq!(
            id.client_ip(peer, &xff("3.3.3.3,, 10.1.1.1, ")),
            ip("3.3.3.3")
        );
    }

    #[test]
    fn only_the_configured_header_is_read() {
        let peer = ip("127.0.0.1");
        let mut h = xff("6.6.6.6");
        h.insert("forwarded", "for=7.7.7.7".parse().unwrap());
        h.insert("x-real-ip", "8.8.8.8".parse().unwrap());
        let with = |header| identity().with_header(header).client_ip(peer, &h);
        assert_eq!(with(ClientIpHeader::XForwardedFor), ip("6.6.6.6"));
        assert_eq!(with(ClientIpHeader::Forwarded), ip("7.7.7.7"));
        assert_eq!(with(ClientIpHeader::XRealIp), ip("8.8.8.8"));
        // Forwarded configured, only X-Forwarded-For sent: the peer.
        let only_xff = xff("6.6.6.6");
        let fwd = identity().with_header(ClientIpHeader::Forwarded);
        assert_eq!(fwd.client_ip(peer, &only_xff), peer);
        assert_eq!("Forwarded".parse(), Ok(ClientIpHeader::Forwarded));
        assert!("x-client-ip".parse::<ClientIpHeader>().is_err());
    }

    #[test]
    fn forwarded_header() {
        let id = identity().with_header(ClientIpHeader::Forwarded);
        let mut h = HeaderMap::new();
        h.insert(
            "forwarded",
            r#"for=1.1.1.1, for="[2001:db8:cafe::17]:4711";proto=https, for=10.0.0.3"#
                .parse()
                .unwrap(),
        );
        assert_eq!(id.client_ip(ip("127.0.0.1"), &h), ip("2001:db8:cafe::"));
        h.insert("forwarded", "for=unknown".parse().unwrap());
        assert_eq!(id.client_ip(ip("127.0.0.1"), &h), ip("127.0.0.1"));
    }

    #[test]
    fn ipv6_masking_and_mapped() {
        let id = identity();
        let a = id.client_ip(ip("2001:db8:1:2:aaaa::1"), &HeaderMap::new());
        let b = id.client_ip(ip("2001:db8:1:2:bbbb::2"), &HeaderMap::new());
        let c = id.client_ip(ip("2001:db8:1:3::1"), &HeaderMap::new());
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(id.ip_key(a), "ip:2001:db8:1:2::/64");
        assert_eq!(
            id.client_ip(ip("::ffff:127.0.0.1"), &xff("4.4.4.4")),
            ip("4.4.4.4")
        );
        let exact = ClientIdentity::new(vec![], 128);
        assert_eq!(exact.ip_key(ip("2001:db8::1")), "ip:2001:db8::1");
        assert_eq!(exact.ip_key(ip("0.10.100.255")), "ip:0.10.100.255");
    }

    #[test]
    fn keys() {
        let id = identity();
        let mut headers = HeaderMap::new();
        let ctx = |headers: &HeaderMap| {
            route_key(
                &KeySpec::Header(HeaderName::from_static("x-api-key")),
                &KeyContext {
                    method: &Method::GET,
                    path: "/",
                    query: Some("api_key=q%2B1&x=2"),
                    headers,
                    peer: ip("192.0.2.1"),
                    client_ip: ip("192.0.2.1"),
                    identity: &id,
                },
            )
        };
        assert_eq!(ctx(&headers), "ip:192.0.2.1");
        headers.insert("x-api-key", "abc".parse().unwrap());
        assert_eq!(ctx(&headers), "header:x-api-key:abc");
        headers.insert("x-api-key", "x".repeat(2000).parse().unwrap());
        assert_eq!(ctx(&headers), "ip:192.0.2.1");
    }

    #[test]
    fn query_cookie_and_composite_keys() {
        let id = identity();
        let mut headers = HeaderMap::new();
        headers.insert("cookie", "sid=s1; theme=dark".parse().unwrap());
        headers.insert("x-api-key", "k+1".parse().unwrap());
        let key = |spec: &str, query: Option<&str>, headers: &HeaderMap| {
            route_key(
                &spec.parse().unwrap(),
                &KeyContext {
                    method: &Method::GET,
                    path: "/",
                    query,
                    headers,
                    peer: ip("192.0.2.1"),
                    client_ip: ip("192.0.2.1"),
                    identity: &id,
                },
            )
        };
        assert_eq!(
            key("query:api_key", Some("api_key=%61b"), &headers),
            "query:api_key:ab"
        );
        assert_eq!(key("query:api_key", None, &headers), "ip:192.0.2.1");
        assert_eq!(key("cookie:sid", None, &headers), "cookie:sid:s1");
        assert_eq!(key("cookie:nope", None, &headers), "ip:192.0.2.1");
        assert_eq!(
            key("ip+header:x-api-key", None, &headers),
            "ip:192.0.2.1+header:x-api-key:k%2B1"
        );
        assert_eq!(
            key("cookie:sid+query:t", Some("t=a%2Bb"), &headers),
            "cookie:sid:s1+query:t:a%2Bb"
        );
        // Any part missing: keyed by IP.
        assert_eq!(key("ip+query:t", None, &headers), "ip:192.0.2.1");
        // Bounded: a composite over 1024 bytes falls back to the IP key.
        let long = format!("t={}", "x".repeat(1020));
        assert_eq!(
            key("cookie:sid+query:t", Some(&long), &headers),
            "ip:192.0.2.1"
        );
    }
}
