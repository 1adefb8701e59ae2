//! The `[envoy]` section of the Sluicegate TOML (the serde model), the compiled
//! [`EnvoyConfig`] (native rules and envoyproxy/ratelimit YAML files merged into one tree
//! per domain; built by [`crate::compile`], read from disk by [`crate::files`]), and the
//! [`SharedConfig`] handle a running service reads and a reload swaps.
//!
//! ```toml
//! [envoy]
//! listen = "127.0.0.1:8081"
//! config = "ratelimit.yaml"          # a file or a directory of *.yaml / *.yml files
//! algorithm = "fixed_window"         # for the YAML limits; fixed_window matches upstream
//! merge_domains = false              # MERGE_DOMAIN_CONFIG
//! shadow = false                     # SHADOW_MODE
//! quota = false                      # every rule in quota_mode
//! dynamic_metadata = false           # rules' metadata in the response's dynamic metadata
//!
//! [[envoy.rules]]                    # native rules: any policy, any algorithm
//! domain = "api"
//! entries = [{ key = "remote_address" }]
//! policies = ["per_ip_burst", "per_ip_daily"]
//! ```

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};
use sluicegate_core::{AlgorithmKind, Policy};

use crate::compile::{Compiler, Options};
use crate::tree::DomainTree;
use crate::yaml::Window;

/// The `[envoy]` section as written in the Sluicegate TOML. The server's config model
/// embeds it as is.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvoySection {
    /// Where the gRPC rate limit service listens (`--envoy-listen` overrides it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listen: Option<SocketAddr>,
    /// An envoyproxy/ratelimit YAML file, or a directory of them, read as they are;
    /// relative to the TOML file's directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<PathBuf>,
    /// The algorithm of the policies made from YAML limits; `fixed_window` by default,
    /// as envoyproxy/ratelimit counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub algorithm: Option<AlgorithmKind>,
    /// Files naming one domain merge into one tree, like upstream's `MERGE_DOMAIN_CONFIG`;
    /// otherwise a domain in two files is an error.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub merge_domains: bool,
    /// Every limit in shadow mode and every answer OK, like upstream's `SHADOW_MODE`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shadow: bool,
    /// Every rule in `quota_mode`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub quota: bool,
    /// Rules' `metadata` go into the response's dynamic metadata, like upstream's
    /// `RESPONSE_DYNAMIC_METADATA`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dynamic_metadata: bool,
    /// Native rules.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<RuleSpec>,
}

/// A native rule: a domain and a descriptor path mapped to Sluicegate policies.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleSpec {
    /// The domain Envoy sends.
    pub domain: String,
    /// The descriptor's entries, outermost first; a value ending in `*` matches a prefix.
    pub entries: Vec<EntrySpec>,
    /// Names from `[[policies]]`; all must admit (all-or-nothing).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policies: Vec<String>,
    /// No limit: OK without touching the store (instead of `policies`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unlimited: bool,
    /// A name other rules can replace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Names of rules this one replaces when both match one request.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replaces: Vec<String>,
    /// Put the request's value into the metric label (unbounded label cardinality).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub detailed_metric: bool,
    /// A soft limit, as YAML's `quota_mode`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub quota_mode: bool,
}

/// One descriptor entry of a native rule.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EntrySpec {
    /// The entry key, e.g. `remote_address`, `generic_key`, a header's descriptor key.
    pub key: String,
    /// The value to match; none matches any value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

/// One problem in the Envoy configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file, for YAML errors.
    pub file: Option<PathBuf>,
    /// 1-based line and column, where known.
    pub location: Option<(usize, usize)>,
    /// Where in the TOML, e.g. `envoy.rules[2]`, for native rule errors.
    pub context: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl ConfigError {
    /// An error in the native rule `envoy.rules[index]`.
    pub fn rule(index: usize, message: impl Into<String>) -> Self {
        ConfigError {
            file: None,
            location: None,
            context: Some(format!("envoy.rules[{index}]")),
            message: message.into(),
        }
    }

    /// An error in a YAML file, at `location` when known.
    pub fn file(path: &Path, location: Option<(usize, usize)>, message: impl Into<String>) -> Self {
        ConfigError {
            file: Some(path.to_owned()),
            location,
            context: None,
            message: message.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(file) = &self.file {
            write!(f, "{}", file.display())?;
            if let Some((line, column)) = self.location {
                write!(f, ":{line}:{column}")?;
            }
            f.write_str(": ")?;
        }
        if let Some(context) = &self.context {
            write!(f, "{context}: ")?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for ConfigError {}

/// Every problem found, so `sluicegate validate` can print them all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, error) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// The compiled Envoy configuration: one descriptor tree per domain.
///
/// ```
/// use sluicegate_envoy::EnvoyConfig;
/// let config = EnvoyConfig::from_yaml_str(
///     "domain: api\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 10}\n",
///     None,
/// ).unwrap();
/// assert!(config.find("api", &[("remote_address", "10.0.0.1")]).is_some());
/// assert_eq!(config.policies()[0].limit(), 10);
/// ```
#[derive(Debug, Default, Clone)]
pub struct EnvoyConfig {
    domains: HashMap<String, DomainTree>,
    policies: Vec<Arc<Policy>>,
    files: Vec<PathBuf>,
    options: Options,
}

impl EnvoyConfig {
    pub(crate) fn new(
        domains: HashMap<String, DomainTree>,
        policies: Vec<Arc<Policy>>,
        files: Vec<PathBuf>,
        options: Options,
    ) -> EnvoyConfig {
        EnvoyConfig {
            domains,
            policies,
            files,
            options,
        }
    }

    /// Compiles the `[envoy]` section: its native rules (naming `policies`, the TOML's
    /// `[[policies]]`) and its YAML file or directory (relative to `base_dir`).
    pub fn load(
        section: &EnvoySection,
        policies: &[Arc<Policy>],
        base_dir: &Path,
    ) -> Result<EnvoyConfig, ConfigErrors> {
        crate::files::load(section, policies, base_dir)
    }

    /// Compiles one YAML text (for tests and tools); `file` names it in errors.
    pub fn from_yaml_str(text: &str, file: Option<&Path>) -> Result<EnvoyConfig, ConfigErrors> {
        let mut compiler = Compiler::new(Options::default());
        compiler.add_yaml(text, file.unwrap_or(Path::new("<yaml>")));
        compiler.finish()
    }

    /// The rule for a descriptor of `domain`, if any.
    pub fn find<'a>(
        &'a self,
        domain: &str,
        entries: &[(&'a str, &'a str)],
    ) -> Option<crate::tree::Match<'a>> {
        self.domains.get(domain)?.find(entries)
    }

    /// Whether `domain` has rules.
    pub fn has_domain(&self, domain: &str) -> bool {
        self.domains.contains_key(domain)
    }

    /// The policies made from YAML limits, so a reload can keep their state
    /// (`MemoryStore::retain_policies` must be given these too).
    pub fn policies(&self) -> &[Arc<Policy>] {
        &self.policies
    }

    /// The YAML files read, for the reload watcher.
    pub fn files(&self) -> &[PathBuf] {
        &self.files
    }

    /// The global switches it was compiled with.
    pub fn options(&self) -> Options {
        self.options
    }

    /// `(domain, rule count)`, sorted, for the start-up summary.
    pub fn summary(&self) -> Vec<(String, usize)> {
        let mut out: Vec<(String, usize)> = self
            .domains
            .iter()
            .map(|(d, t)| (d.clone(), t.len()))
            .collect();
        out.sort();
        out
    }
}

/// The configuration a running service reads; a reload swaps it whole. Cloning the handle
/// shares it; reading is one uncontended lock and an `Arc` clone.
///
/// ```
/// use sluicegate_envoy::{EnvoyConfig, SharedConfig};
/// let shared = SharedConfig::new(EnvoyConfig::default());
/// assert!(!shared.get().has_domain("api"));
/// shared.replace(EnvoyConfig::from_yaml_str("domain: api\n", None).unwrap());
/// assert!(shared.get().has_domain("api"));
/// ```
#[derive(Debug, Clone, Default)]
pub struct SharedConfig {
    config: Arc<RwLock<Arc<EnvoyConfig>>>,
    overrides: Arc<Mutex<HashMap<OverrideKey, Arc<Policy>>>>,
}

/// An override's identity: domain, requests per unit, window.
type OverrideKey = (String, u32, Window);

/// Most distinct `limit` overrides remembered; past it an override policy is made per
/// request (same state, since stores key state by the policy's definition).
pub const MAX_OVERRIDES: usize = 1024;

impl SharedConfig {
    /// A handle holding `config`.
    pub fn new(config: EnvoyConfig) -> Self {
        SharedConfig {
            config: Arc::new(RwLock::new(Arc::new(config))),
            overrides: Arc::default(),
        }
    }

    /// The current configuration.
    pub fn get(&self) -> Arc<EnvoyConfig> {
        Arc::clone(&self.config.read())
    }

    /// Swaps in a new configuration; requests in flight finish on the old one.
    pub fn replace(&self, config: EnvoyConfig) {
        *self.config.write() = Arc::new(config);
    }

    /// The policy of a descriptor's own `limit` (Envoy's override) in `domain`: its own
    /// counter, never in shadow mode (as upstream), of the configured algorithm.
    /// `None` when no policy can be made of it (the service then ignores the override).
    pub fn override_policy(
        &self,
        domain: &str,
        requests_per_unit: u32,
        window: Window,
    ) -> Option<Arc<Policy>> {
        let key = (domain.to_owned(), requests_per_unit, window);
        if let Some(policy) = self.overrides.lock().get(&key) {
            return Some(Arc::clone(policy));
        }
        let algorithm = self.get().options().algorithm;
        let name: String = format!(
            "envoy.override.{domain}.{requests_per_unit}_per_{}_{}",
            window.multiplier, window.unit
        )
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(120)
        .collect();
        let policy = Arc::new(
            Policy::builder(
                name,
                algorithm,
                u64::from(requests_per_unit),
                window.duration(),
            )
            .build()
            .ok()?,
        );
        let mut overrides = self.overrides.lock();
        if overrides.len() < MAX_OVERRIDES {
            overrides.insert(key, Arc::clone(&policy));
        }
        Some(policy)
    }

    /// Every policy whose state a reload must keep: the YAML limits and the overrides seen.
    pub fn policies(&self) -> Vec<Arc<Policy>> {
        let mut all = self.get().policies().to_vec();
        all.extend(self.overrides.lock().values().cloned());
        all
    }
}
