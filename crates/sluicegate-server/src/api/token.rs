//! The signed tokens the decision API hands out: reservations (`/v1/check` with
//! `"reserve": true`, settled by `POST /v1/settle`) and leases (freed by
//! `POST /v1/release`).
//!
//! They are stateless: a token is its claims (JSON) and an HMAC-SHA256 of them under the
//! server's secret (`server.reservation_secret`, or a random key of this process), both
//! base64url, joined by a dot. Anything a client changes breaks the signature, so a token
//! says exactly what this server (or another instance with the same secret) decided. The
//! kind is part of what is signed: a lease cannot pass for a reservation. A reservation
//! is settled once: its nonce is marked settled in the store, atomically with the settle,
//! until it expires (see `Store::settle`).

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// What a reservation says: the decision it settles.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReservationClaims {
    /// The policies consumed from, by name.
    pub p: Vec<String>,
    /// Each policy's `remaining` right after admission.
    pub r: Vec<u64>,
    /// The client key.
    pub k: String,
    /// The cost charged at admission (the estimate).
    pub e: u64,
    /// When it was admitted (the store's clock, µs).
    pub a: u64,
    /// Until when it can be settled (the store's clock, µs).
    pub x: u64,
    /// A random nonce: names the reservation for the one-time marker.
    pub n: String,
}

/// What a lease says: the concurrency slots one admitted decision holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseClaims {
    /// Per concurrency policy: its name and when its lease expires (µs).
    pub p: Vec<(String, u64)>,
    /// The client key.
    pub k: String,
    /// The slots held.
    pub c: u64,
}

/// Which kind of token; signed with the claims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A reservation.
    Reservation,
    /// A lease.
    Lease,
}

impl Kind {
    fn domain(self) -> &'static [u8] {
        match self {
            Kind::Reservation => b"sluicegate reservation v1\0",
            Kind::Lease => b"sluicegate lease v1\0",
        }
    }
}

/// Why a token was refused: it is not one this server (or its secret) issued.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a genuine {0}: {1}")]
pub struct TokenError(pub &'static str, pub &'static str);

/// Signs and verifies tokens with one key.
pub struct Signer {
    key: hmac::Key,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Signer(..)")
    }
}

impl Signer {
    /// A signer with `secret` as its key.
    pub fn new(secret: &[u8]) -> Self {
        Signer {
            key: hmac::Key::new(hmac::HMAC_SHA256, secret),
        }
    }

    /// A signer with a random key (tokens are then valid only in this process).
    pub fn random() -> Self {
        Self::new(&random_bytes::<32>())
    }

    /// The token of `claims`.
    pub fn sign<T: Serialize>(&self, kind: Kind, claims: &T) -> String {
        // Serialising plain structs of strings and integers cannot fail.
        let json = serde_json::to_vec(claims).unwrap_or_default();
        let tag = hmac::sign(&self.key, &[kind.domain(), &json].concat());
        format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(&json),
            URL_SAFE_NO_PAD.encode(tag.as_ref())
        )
    }

    /// The claims of a genuine token of `kind`; an error for anything else.
    pub fn verify<T: DeserializeOwned>(&self, kind: Kind, token: &str) -> Result<T, TokenError> {
        let what = match kind {
            Kind::Reservation => "reservation",
            Kind::Lease => "lease",
        };
        let (body, tag) = token.split_once('.').ok_or(TokenError(what, "malformed"))?;
        let json = URL_SAFE_NO_PAD
            .decode(body)
            .map_err(|_| TokenError(what, "malformed"))?;
        let tag = URL_SAFE_NO_PAD
            .decode(tag)
            .map_err(|_| TokenError(what, "malformed"))?;
        hmac::verify(&self.key, &[kind.domain(), &json].concat(), &tag)
            .map_err(|_| TokenError(what, "bad signature"))?;
        serde_json::from_slice(&json).map_err(|_| TokenError(what, "malformed claims"))
    }
}

/// `N` random bytes from the operating system.
fn random_bytes<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    // The OS generator only fails where no program could run safely; then the process
    // must not hand out guessable tokens.
    SystemRandom::new()
        .fill(&mut bytes)
        .expect("the operating system's random generator failed");
    bytes
}

/// A fresh random nonce (128 bits, hex).
pub fn nonce() -> String {
    random_bytes::<16>()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease() -> LeaseClaims {
        LeaseClaims {
            p: vec![("inflight".into(), 1_700_000_000_000_000)],
            k: "user-1".into(),
            c: 1,
        }
    }

    #[test]
    fn a_token_verifies_only_unchanged_under_its_key_and_kind() {
        let signer = Signer::new(b"0123456789abcdef");
        let token = signer.sign(Kind::Lease, &lease());
        assert_eq!(
            signer.verify::<LeaseClaims>(Kind::Lease, &token),
            Ok(lease())
        );
        // Another kind, another key, a changed body or tag: refused.
        assert!(
            signer
                .verify::<LeaseClaims>(Kind::Reservation, &token)
                .is_err()
        );
        let other = Signer::new(b"fedcba9876543210");
        assert!(other.verify::<LeaseClaims>(Kind::Lease, &token).is_err());
        let (body, tag) = token.split_once('.').unwrap();
        let mut claims = lease();
        claims.c = 5;
        let forged = format!(
            "{}.{tag}",
            URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims).unwrap())
        );
        assert!(signer.verify::<LeaseClaims>(Kind::Lease, &forged).is_err());
        assert!(signer.verify::<LeaseClaims>(Kind::Lease, body).is_err());
        assert!(signer.verify::<LeaseClaims>(Kind::Lease, "").is_err());
        assert!(signer.verify::<LeaseClaims>(Kind::Lease, "a.b.c").is_err());
        assert_ne!(nonce(), nonce());
    }
}
