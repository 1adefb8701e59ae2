//! The gateway's TLS: its own certificate (`tls_cert`/`tls_key`), the roots an `https://`
//! upstream is checked against (`upstream_ca`, else the system's), and the rustls
//! configurations made of them.
//!
//! The files are read and checked by the configuration reader, so `validate`, start-up and
//! a reload report a bad path or PEM at its field, and a reload with a bad certificate keeps
//! the running one. The listener's rustls configuration never changes: its certificate
//! resolver reads the running configuration at each handshake, so a reload (a new
//! certificate) applies to the next connection, and open ones keep theirs.
//!
//! rustls is built with the `ring` provider only (the workspace's choice for `rediss://`);
//! it is also installed as the process's default before any configuration is built (as the
//! Redis store does), so `ServerConfig::builder()` and `ClientConfig::builder()` cannot find
//! two providers and refuse should another dependency ever compile in aws-lc-rs.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

use crate::state::AppState;

/// Why a certificate, key or CA file cannot be used (reported at its field).
#[derive(Debug, thiserror::Error)]
pub enum TlsFileError {
    /// The file cannot be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// No `CERTIFICATE` block in the file.
    #[error("{path}: no PEM certificate (-----BEGIN CERTIFICATE-----) found")]
    NoCertificate {
        /// The file.
        path: PathBuf,
    },
    /// No private key block in the file.
    #[error("{path}: no PEM private key (PKCS#8, PKCS#1 or SEC1) found")]
    NoKey {
        /// The file.
        path: PathBuf,
    },
    /// The PEM text is malformed.
    #[error("{path}: invalid PEM: {reason}")]
    Pem {
        /// The file.
        path: PathBuf,
        /// The parser's words.
        reason: String,
    },
    /// The key is not one rustls can sign with, or does not belong to the certificate.
    #[error("{path}: {reason}")]
    Key {
        /// The key file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

/// Which field a [`TlsFileError`] belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsField {
    /// `tls_cert`.
    Cert,
    /// `tls_key`.
    Key,
}

/// `tls_cert` + `tls_key`: the gateway's certificate chain and key, read and checked.
#[derive(Debug, Clone)]
pub struct GatewayTls {
    /// The certificate chain file (PEM, leaf first).
    pub cert: PathBuf,
    /// The private key file (PEM).
    pub key: PathBuf,
    /// What the listener presents.
    pub certified: Arc<CertifiedKey>,
    /// A hash of both files' bytes as read.
    print: u64,
}

impl PartialEq for GatewayTls {
    fn eq(&self, other: &Self) -> bool {
        self.cert == other.cert && self.key == other.key && self.print == other.print
    }
}

impl Eq for GatewayTls {}

impl GatewayTls {
    /// Reads and checks both files: a chain, a key rustls can sign with, and the key
    /// belonging to the chain's first certificate.
    pub fn load(cert: PathBuf, key: PathBuf) -> Result<GatewayTls, (TlsField, TlsFileError)> {
        let cert_pem = read(&cert).map_err(|e| (TlsField::Cert, e))?;
        let key_pem = read(&key).map_err(|e| (TlsField::Key, e))?;
        let chain = certificates(&cert, &cert_pem).map_err(|e| (TlsField::Cert, e))?;
        let der = private_key(&key, &key_pem).map_err(|e| (TlsField::Key, e))?;
        let provider = rustls::crypto::ring::default_provider();
        let certified = CertifiedKey::from_der(chain, der, &provider).map_err(|e| {
            let reason = match e {
                rustls::Error::InconsistentKeys(_) => {
                    "this key does not belong to the certificate in tls_cert".to_owned()
                }
                other => format!("unusable private key: {other}"),
            };
            (
                TlsField::Key,
                TlsFileError::Key {
                    path: key.clone(),
                    reason,
                },
            )
        })?;
        let print = hash_bytes(&[&cert_pem, &key_pem]);
        Ok(GatewayTls {
            cert,
            key,
            certified: Arc::new(certified),
            print,
        })
    }
}

/// `upstream_ca`: the certificates an `https://` upstream's chain must end at.
#[derive(Debug, Clone)]
pub struct UpstreamCa {
    /// The file (PEM, one or more certificates).
    pub path: PathBuf,
    /// The roots made of it.
    pub roots: Arc<RootCertStore>,
    /// A hash of the file's bytes as read: the upstream client is rebuilt when it changes.
    pub print: u64,
}

impl PartialEq for UpstreamCa {
    fn eq(&self, other: &Self) -> bool {
        self.path == other.path && self.print == other.print
    }
}

impl Eq for UpstreamCa {}

impl UpstreamCa {
    /// Reads the file; every certificate in it becomes a root.
    pub fn load(path: PathBuf) -> Result<UpstreamCa, TlsFileError> {
        let pem = read(&path)?;
        let mut roots = RootCertStore::empty();
        for cert in certificates(&path, &pem)? {
            roots.add(cert).map_err(|e| TlsFileError::Pem {
                path: path.clone(),
                reason: format!("not a usable CA certificate: {e}"),
            })?;
        }
        Ok(UpstreamCa {
            print: hash_bytes(&[&pem]),
            path,
            roots: Arc::new(roots),
        })
    }
}

/// A hash of the bytes of `paths` as they are now (an unreadable file hashes as such): the
/// reload watcher compares it to notice a certificate replaced under an unchanged config.
pub fn files_print(paths: &[&Path]) -> u64 {
    let mut h = DefaultHasher::new();
    for path in paths {
        path.hash(&mut h);
        std::fs::read(path).ok().hash(&mut h);
    }
    h.finish()
}

fn hash_bytes(parts: &[&[u8]]) -> u64 {
    let mut h = DefaultHasher::new();
    parts.hash(&mut h);
    h.finish()
}

fn read(path: &Path) -> Result<Vec<u8>, TlsFileError> {
    std::fs::read(path).map_err(|source| TlsFileError::Read {
        path: path.to_owned(),
        source,
    })
}

fn certificates(path: &Path, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsFileError> {
    let chain = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsFileError::Pem {
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
    if chain.is_empty() {
        return Err(TlsFileError::NoCertificate {
            path: path.to_owned(),
        });
    }
    Ok(chain)
}

fn private_key(path: &Path, pem: &[u8]) -> Result<PrivateKeyDer<'static>, TlsFileError> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => TlsFileError::NoKey {
            path: path.to_owned(),
        },
        other => TlsFileError::Pem {
            path: path.to_owned(),
            reason: other.to_string(),
        },
    })
}

/// The listener's rustls configuration: HTTP/2 and HTTP/1.1 offered by ALPN (h2 first, as
/// browsers and curl expect), the certificate of the running configuration.
pub fn server_config(state: AppState) -> Arc<rustls::ServerConfig> {
    ring_by_default();
    let mut config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(RunningCert(state)));
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Arc::new(config)
}

/// Makes *ring* the process's crypto provider unless one is installed already.
fn ring_by_default() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Resolves every handshake to the running configuration's certificate.
struct RunningCert(AppState);

impl std::fmt::Debug for RunningCert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RunningCert")
    }
}

impl rustls::server::ResolvesServerCert for RunningCert {
    fn resolve(&self, _hello: rustls::server::ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let runtime = self.0.runtime();
        let tls = runtime.config.gateway.as_ref()?.tls.as_ref()?;
        Some(Arc::clone(&tls.certified))
    }
}

/// The client configuration for `https://` upstreams: `upstream_ca` when set, else the
/// system's roots (read only when `https` says the upstream needs them: an `http://`
/// gateway on a system without any must not warn). No ALPN here: the connector offers
/// HTTP/1.1 itself.
pub fn upstream_client_config(ca: Option<&UpstreamCa>, https: bool) -> rustls::ClientConfig {
    ring_by_default();
    let roots = match ca {
        Some(ca) => Arc::clone(&ca.roots),
        None if https => system_roots(),
        None => Arc::new(RootCertStore::empty()),
    };
    rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth()
}

/// The system's trusted roots, read once, when first needed (`SSL_CERT_FILE`/`SSL_CERT_DIR`
/// are honoured). A system without any is logged, and an `https://` upstream then
/// answers 502.
fn system_roots() -> Arc<RootCertStore> {
    static ROOTS: OnceLock<Arc<RootCertStore>> = OnceLock::new();
    Arc::clone(ROOTS.get_or_init(|| {
        let found = rustls_native_certs::load_native_certs();
        for error in &found.errors {
            tracing::warn!(%error, "reading the system's trusted certificates");
        }
        let mut roots = RootCertStore::empty();
        let (added, _) = roots.add_parsable_certificates(found.certs);
        if added == 0 {
            tracing::warn!(
                "no trusted certificates found on this system: https:// upstreams will fail; set [gateway] upstream_ca"
            );
        }
        Arc::new(roots)
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_is_reported_not_panicked_on() {
        let dir = std::env::temp_dir().join(format!("sg-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let junk = dir.join("junk.pem");
        std::fs::write(&junk, b"hello\n").unwrap();
        let (field, e) = GatewayTls::load(junk.clone(), junk.clone()).unwrap_err();
        assert_eq!(field, TlsField::Cert);
        assert!(e.to_string().contains("no PEM certificate"), "{e}");
        let broken = dir.join("broken.pem");
        std::fs::write(&broken, b"-----BEGIN CERTIFICATE-----\n!!!!\n").unwrap();
        let e = UpstreamCa::load(broken).unwrap_err();
        assert!(e.to_string().contains("invalid PEM"), "{e}");
        let e = UpstreamCa::load(dir.join("missing.pem")).unwrap_err();
        assert!(e.to_string().contains("cannot read"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
