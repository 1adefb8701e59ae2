//! The `[envoy]` section of the Sluicegate TOML, the compiled [`EnvoyConfig`] (native rules
//! and envoyproxy/ratelimit YAML files merged into one tree per domain), and the
//! [`SharedConfig`] handle a running service reads and a reload swaps.
//!
//! ```toml
//! [envoy]
//! listen = "127.0.0.1:8081"
//! config = "ratelimit.yaml"          # a file or a directory of *.yaml / *.yml files
//! algorithm = "fixed_window"         # for the YAML limits; fixed_window matches upstream
//!
//! [[envoy.rules]]                    # native rules: any policy, any algorithm
//! domain = "api"
//! entries = [{ key = "remote_address" }]
//! policies = ["per_ip_burst", "per_ip_daily"]
//! ```

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::RwLock;
use serde::{Deserialize, Serialize};
use sluicegate_core::{AlgorithmKind, Mode, Policy};

use crate::tree::{DomainTree, Rule, RuleKind, Step};
use crate::yaml::{self, YamlDescriptor};

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
    fn rule(index: usize, message: impl Into<String>) -> Self {
        ConfigError {
            file: None,
            location: None,
            context: Some(format!("envoy.rules[{index}]")),
            message: message.into(),
        }
    }

    fn file(path: &Path, location: Option<(usize, usize)>, message: impl Into<String>) -> Self {
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
}

impl EnvoyConfig {
    /// Compiles the `[envoy]` section: its native rules (naming `policies`, the TOML's
    /// `[[policies]]`) and its YAML file or directory (relative to `base_dir`).
    pub fn load(
        section: &EnvoySection,
        policies: &[Arc<Policy>],
        base_dir: &Path,
    ) -> Result<EnvoyConfig, ConfigErrors> {
        let mut builder = Builder::new(section.algorithm.unwrap_or(AlgorithmKind::FixedWindow));
        if let Some(config) = &section.config {
            let path = if config.is_absolute() {
                config.clone()
            } else {
                base_dir.join(config)
            };
            for file in yaml_files(&path, &mut builder.errors) {
                match std::fs::read_to_string(&file) {
                    Ok(text) => builder.add_yaml(&text, &file),
                    Err(e) => builder.errors.push(ConfigError::file(
                        &file,
                        None,
                        format!("cannot read: {e}"),
                    )),
                }
                builder.files.push(file);
            }
        }
        for (index, spec) in section.rules.iter().enumerate() {
            builder.add_rule(index, spec, policies);
        }
        builder.finish()
    }

    /// Compiles one YAML text (for tests and tools); `file` names it in errors.
    pub fn from_yaml_str(text: &str, file: Option<&Path>) -> Result<EnvoyConfig, ConfigErrors> {
        let mut builder = Builder::new(AlgorithmKind::FixedWindow);
        builder.add_yaml(text, file.unwrap_or(Path::new("<yaml>")));
        builder.finish()
    }

    /// The rule for a descriptor of `domain`, if any.
    pub fn find<'a>(
        &'a self,
        domain: &str,
        entries: &[(&str, &str)],
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

/// A fingerprint of everything [`EnvoyConfig::load`] reads: the section, the policies and
/// the YAML files' names and contents. A reload watcher recompiles when it changes.
pub fn fingerprint(section: &EnvoySection, policies: &[Arc<Policy>], base_dir: &Path) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    format!("{section:?}").hash(&mut h);
    for policy in policies {
        policy.hash(&mut h);
    }
    if let Some(config) = &section.config {
        let path = base_dir.join(config);
        for file in yaml_files(&path, &mut Vec::new()) {
            file.hash(&mut h);
            std::fs::read(&file).ok().hash(&mut h);
        }
    }
    h.finish()
}

/// The YAML files at `path`: the file itself, or a directory's `*.yaml`/`*.yml`, sorted.
fn yaml_files(path: &Path, errors: &mut Vec<ConfigError>) -> Vec<PathBuf> {
    if !path.is_dir() {
        return vec![path.to_owned()];
    }
    match std::fs::read_dir(path) {
        Ok(entries) => {
            let mut files: Vec<PathBuf> = entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.is_file()
                        && matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"))
                })
                .collect();
            files.sort();
            if files.is_empty() {
                errors.push(ConfigError::file(
                    path,
                    None,
                    "no *.yaml or *.yml file in this directory",
                ));
            }
            files
        }
        Err(e) => {
            errors.push(ConfigError::file(
                path,
                None,
                format!("cannot read directory: {e}"),
            ));
            Vec::new()
        }
    }
}

struct Builder {
    algorithm: AlgorithmKind,
    domains: HashMap<String, DomainTree>,
    yaml_domains: HashMap<String, PathBuf>,
    policies: Vec<Arc<Policy>>,
    names: HashSet<String>,
    files: Vec<PathBuf>,
    errors: Vec<ConfigError>,
}

impl Builder {
    fn new(algorithm: AlgorithmKind) -> Self {
        Builder {
            algorithm,
            domains: HashMap::new(),
            yaml_domains: HashMap::new(),
            policies: Vec::new(),
            names: HashSet::new(),
            files: Vec::new(),
            errors: Vec::new(),
        }
    }

    fn finish(self) -> Result<EnvoyConfig, ConfigErrors> {
        if self.errors.is_empty() {
            Ok(EnvoyConfig {
                domains: self.domains,
                policies: self.policies,
                files: self.files,
            })
        } else {
            Err(ConfigErrors(self.errors))
        }
    }

    fn add_yaml(&mut self, text: &str, file: &Path) {
        let parsed = match yaml::parse(text) {
            Ok(parsed) => parsed,
            Err(e) => {
                self.errors
                    .push(ConfigError::file(file, e.location, e.message));
                return;
            }
        };
        if let Some(first) = self.yaml_domains.get(&parsed.domain) {
            let message = format!(
                "duplicate domain {:?} (also in {})",
                parsed.domain,
                first.display()
            );
            self.errors.push(ConfigError::file(file, None, message));
            return;
        }
        self.yaml_domains
            .insert(parsed.domain.clone(), file.to_owned());
        self.domains.entry(parsed.domain.clone()).or_default();
        let mut path = Vec::new();
        self.add_descriptors(&parsed.domain, &parsed.descriptors, &mut path, file);
    }

    fn add_descriptors(
        &mut self,
        domain: &str,
        descriptors: &[YamlDescriptor],
        path: &mut Vec<Step>,
        file: &Path,
    ) {
        for descriptor in descriptors {
            path.push(Step::new(&descriptor.key, descriptor.value.as_deref()));
            let tree = self.domains.entry(domain.to_owned()).or_default();
            tree.touch(path);
            if let Some(limit) = &descriptor.rate_limit {
                let label = path_label(path);
                let kind = if limit.unlimited {
                    Ok(RuleKind::Unlimited)
                } else {
                    match limit.unit {
                        Some(unit) if limit.requests_per_unit == 0 => Ok(RuleKind::Block(unit)),
                        Some(unit) => self
                            .yaml_policy(
                                domain,
                                &label,
                                limit.requests_per_unit,
                                unit,
                                descriptor.shadow_mode,
                            )
                            .map(|p| RuleKind::Limit(vec![p])),
                        None => Err("rate_limit needs a unit".to_owned()),
                    }
                };
                match kind {
                    Ok(kind) => {
                        let rule = Rule {
                            path: label,
                            kind,
                            name: limit.name.clone(),
                            replaces: limit.replaces.clone(),
                            shadow: descriptor.shadow_mode,
                            detailed_metric: descriptor.detailed_metric,
                        };
                        let tree = self.domains.entry(domain.to_owned()).or_default();
                        if let Err(message) = tree.insert(path, rule) {
                            self.errors.push(ConfigError::file(file, None, message));
                        }
                    }
                    Err(message) => self.errors.push(ConfigError::file(
                        file,
                        None,
                        format!("descriptor {:?}: {message}", path_label(path)),
                    )),
                }
            }
            self.add_descriptors(domain, &descriptor.descriptors, path, file);
            path.pop();
        }
    }

    fn yaml_policy(
        &mut self,
        domain: &str,
        label: &str,
        requests_per_unit: u32,
        unit: yaml::Unit,
        shadow: bool,
    ) -> Result<Arc<Policy>, String> {
        let name = self.unique_name(&format!("envoy.{domain}.{label}"));
        let mode = if shadow { Mode::Shadow } else { Mode::Reject };
        let policy = Policy::builder(
            name,
            self.algorithm,
            u64::from(requests_per_unit),
            unit.duration(),
        )
        .mode(mode)
        .build()
        .map_err(|e| e.to_string())?;
        let policy = Arc::new(policy);
        self.policies.push(Arc::clone(&policy));
        Ok(policy)
    }

    /// A policy name in `[A-Za-z0-9_.-]`, at most 128 bytes, unique in this config.
    fn unique_name(&mut self, wanted: &str) -> String {
        let clean: String = wanted
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
        let mut name = clean.clone();
        let mut n = 2;
        while !self.names.insert(name.clone()) {
            name = format!("{clean}-{n}");
            n += 1;
        }
        name
    }

    fn add_rule(&mut self, index: usize, spec: &RuleSpec, policies: &[Arc<Policy>]) {
        let mut ok = true;
        let mut fail = |errors: &mut Vec<ConfigError>, message: String| {
            errors.push(ConfigError::rule(index, message));
            ok = false;
        };
        if spec.domain.is_empty() {
            fail(&mut self.errors, "domain must not be empty".into());
        }
        if spec.entries.is_empty() {
            fail(
                &mut self.errors,
                "entries must list at least one descriptor entry".into(),
            );
        }
        if spec.entries.iter().any(|e| e.key.is_empty()) {
            fail(&mut self.errors, "every entry needs a non-empty key".into());
        }
        if spec.unlimited != spec.policies.is_empty() {
            fail(
                &mut self.errors,
                "a rule needs either policies = [...] or unlimited = true".into(),
            );
        }
        let mut found = Vec::new();
        for name in &spec.policies {
            match policies.iter().find(|p| p.name() == name) {
                Some(p) if found.iter().any(|f: &Arc<Policy>| f.name() == name) => fail(
                    &mut self.errors,
                    format!("policy {:?} is listed twice", p.name()),
                ),
                Some(p) => found.push(Arc::clone(p)),
                None => fail(&mut self.errors, format!("unknown policy {name:?}")),
            }
        }
        if !ok {
            return;
        }
        let path: Vec<Step> = spec
            .entries
            .iter()
            .map(|e| Step::new(&e.key, e.value.as_deref()))
            .collect();
        let shadow = !found.is_empty() && found.iter().all(|p| !p.is_enforcing());
        let kind = if spec.unlimited {
            RuleKind::Unlimited
        } else {
            RuleKind::Limit(found)
        };
        let rule = Rule {
            path: path_label(&path),
            kind,
            name: spec.name.clone().filter(|n| !n.is_empty()),
            replaces: spec.replaces.clone(),
            shadow,
            detailed_metric: spec.detailed_metric,
        };
        let tree = self.domains.entry(spec.domain.clone()).or_default();
        if let Err(message) = tree.insert(&path, rule) {
            self.errors.push(ConfigError::rule(index, message));
        }
    }
}

fn path_label(path: &[Step]) -> String {
    path.iter().map(Step::label).collect::<Vec<_>>().join(".")
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
pub struct SharedConfig(Arc<RwLock<Arc<EnvoyConfig>>>);

impl SharedConfig {
    /// A handle holding `config`.
    pub fn new(config: EnvoyConfig) -> Self {
        SharedConfig(Arc::new(RwLock::new(Arc::new(config))))
    }

    /// The current configuration.
    pub fn get(&self) -> Arc<EnvoyConfig> {
        Arc::clone(&self.0.read())
    }

    /// Swaps in a new configuration; requests in flight finish on the old one.
    pub fn replace(&self, config: EnvoyConfig) {
        *self.0.write() = Arc::new(config);
    }
}
