//! [`Key`]: what a [`KeyedLimiter`](super::KeyedLimiter) can be keyed by.
//!
//! A key is known by a byte string: its fingerprint is the keyed SipHash-1-3 of those bytes
//! (see the module `fingerprint`), so a limiter keyed by `u64` hashes 8 bytes where one
//! keyed by the same id written out as text would first format it and then hash three
//! words. Keys of one type are the same key exactly when their bytes are equal; a limiter
//! uses one key type (keys of two types are not compared, whatever their bytes).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A value a [`KeyedLimiter`](super::KeyedLimiter) tells clients apart by.
///
/// ```
/// use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
/// use sluicegate_core::memory::Key;
///
/// assert_eq!(7u64.with_bytes(|b| b.to_vec()), 7u64.to_le_bytes());
/// assert_eq!("alice".with_bytes(|b| b.to_vec()), b"alice");
/// // An IPv4 client seen through an IPv6 socket (`::ffff:a.b.c.d`) is the same client.
/// let v4 = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
/// let mapped = IpAddr::V6(Ipv4Addr::new(192, 0, 2, 1).to_ipv6_mapped());
/// assert_eq!(v4.with_bytes(|b| b.to_vec()), mapped.with_bytes(|b| b.to_vec()));
/// assert_ne!(v4.with_bytes(|b| b.len()), IpAddr::V6(Ipv6Addr::LOCALHOST).with_bytes(|b| b.len()));
/// ```
pub trait Key {
    /// Calls `f` with the bytes this key is known by.
    fn with_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R;
}

impl Key for str {
    #[inline(always)]
    fn with_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        f(self.as_bytes())
    }
}

impl Key for String {
    #[inline(always)]
    fn with_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        f(self.as_bytes())
    }
}

impl Key for [u8] {
    #[inline(always)]
    fn with_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        f(self)
    }
}

/// Integers are known by their little-endian bytes: the hash's input is the same on every
/// platform, so a snapshot's fingerprints name the same keys wherever it is restored.
macro_rules! integer_key {
    ($($t:ty),*) => {$(
        impl Key for $t {
            #[inline(always)]
            fn with_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
                f(&self.to_le_bytes())
            }
        }
    )*};
}

integer_key!(u16, u32, u64, u128);

impl Key for Ipv4Addr {
    #[inline(always)]
    fn with_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        f(&self.octets())
    }
}

impl Key for Ipv6Addr {
    #[inline(always)]
    fn with_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        f(&self.octets())
    }
}

/// In its canonical form: an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`, what a dual-stack
/// socket reports for an IPv4 client) is the IPv4 address, so one client cannot hold two
/// budgets by arriving both ways. Every other address is its own key: an IPv6 client
/// usually holds a whole /64 and can rotate through it, so give the limiter the address
/// cut to its prefix (as the server's `ipv6_prefix` does) unless each address is a client.
impl Key for IpAddr {
    #[inline(always)]
    fn with_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        match self.to_canonical() {
            IpAddr::V4(v4) => v4.with_bytes(f),
            IpAddr::V6(v6) => v6.with_bytes(f),
        }
    }
}
