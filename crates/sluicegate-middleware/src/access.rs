//! Allow and deny lists: clients by CIDR that are never limited, or always refused.
//!
//! The lists are matched against the client's address as [`ClientIdentity`] finds it
//! (behind trusted proxies), before IPv6 addresses are cut to `ipv6_prefix`. The server's
//! lists hold for every request; a route's lists add to them for that route.
//! A client on both a deny and an allow list is refused: deny wins, as in Kong's
//! ip-restriction and nginx's usual `deny` before `allow`.
//!
//! [`ClientIdentity`]: crate::ClientIdentity

use std::net::IpAddr;

use ipnet::IpNet;

/// Counter of requests decided by an allow or deny list, labelled `list` = `allow` | `deny`.
pub const ACCESS_TOTAL: &str = "sluicegate_access_list_total";

/// What the lists say about one client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// On no list: limited as usual.
    Limited,
    /// On an allow list (and no deny list): never limited.
    Allowed,
    /// On a deny list: refused with 403.
    Denied,
}

/// A pair of CIDR lists.
///
/// ```
/// use sluicegate_middleware::access::{Access, AccessList};
/// let lists = AccessList::new(vec!["10.0.0.0/8".parse()?], vec!["10.6.6.0/24".parse()?]);
/// assert_eq!(lists.judge("10.1.2.3".parse()?, None), Access::Allowed);
/// assert_eq!(lists.judge("10.6.6.6".parse()?, None), Access::Denied);
/// assert_eq!(lists.judge("192.0.2.1".parse()?, None), Access::Limited);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccessList {
    allow: Vec<IpNet>,
    deny: Vec<IpNet>,
}

impl AccessList {
    /// Clients in `allow` are never limited; clients in `deny` are always refused.
    pub fn new(allow: Vec<IpNet>, deny: Vec<IpNet>) -> Self {
        AccessList { allow, deny }
    }

    /// Whether both lists are empty.
    pub fn is_empty(&self) -> bool {
        self.allow.is_empty() && self.deny.is_empty()
    }

    /// The clients never limited.
    pub fn allow(&self) -> &[IpNet] {
        &self.allow
    }

    /// The clients always refused.
    pub fn deny(&self) -> &[IpNet] {
        &self.deny
    }

    /// What these lists, together with a route's own (`route`), say about `ip`.
    pub fn judge(&self, ip: IpAddr, route: Option<&AccessList>) -> Access {
        let on = |list: &[IpNet]| list.iter().any(|net| net.contains(&ip));
        let lists = [Some(self), route];
        let lists = lists.iter().flatten();
        if lists.clone().any(|l| on(&l.deny)) {
            Access::Denied
        } else if lists.clone().any(|l| on(&l.allow)) {
            Access::Allowed
        } else {
            Access::Limited
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(allow: &[&str], deny: &[&str]) -> AccessList {
        let nets = |v: &[&str]| v.iter().map(|s| s.parse().unwrap()).collect();
        AccessList::new(nets(allow), nets(deny))
    }

    #[test]
    fn route_lists_add_to_the_server_lists_and_deny_wins() {
        let server = list(&["10.0.0.0/8"], &["203.0.113.0/24"]);
        let route = list(&["198.51.100.7/32"], &["10.9.0.0/16"]);
        let ip = |s: &str| s.parse().unwrap();
        assert_eq!(server.judge(ip("198.51.100.7"), None), Access::Limited);
        assert_eq!(
            server.judge(ip("198.51.100.7"), Some(&route)),
            Access::Allowed
        );
        assert_eq!(server.judge(ip("10.9.1.1"), None), Access::Allowed);
        assert_eq!(server.judge(ip("10.9.1.1"), Some(&route)), Access::Denied);
        assert_eq!(
            server.judge(ip("203.0.113.9"), Some(&route)),
            Access::Denied
        );
        assert_eq!(
            list(&[], &["2001:db8::/32"]).judge(ip("2001:db8:1::5"), None),
            Access::Denied
        );
    }
}
