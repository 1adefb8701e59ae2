//! The rule compiler: parsed YAML files and native rules in, one [`EnvoyConfig`] out. Pure:
//! it reads no file (the caller hands it texts, see [`crate::files`]) and keeps no state
//! beyond the configuration it builds.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sluicegate_core::{AlgorithmKind, Mode, Policy};

use crate::config::{ConfigError, ConfigErrors, EnvoyConfig, EnvoySection, RuleSpec};
use crate::tree::{DomainTree, Rule, RuleKind, Step};
use crate::yaml::{self, Window, YamlDescriptor, YamlRateLimit};

/// The global switches of the `[envoy]` section that shape compiled rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// The algorithm of the policies made from YAML limits.
    pub algorithm: AlgorithmKind,
    /// Files naming one domain merge (upstream's `MERGE_DOMAIN_CONFIG`).
    pub merge_domains: bool,
    /// Every YAML limit in shadow mode, every answer OK (upstream's `SHADOW_MODE`).
    pub shadow: bool,
    /// Every rule in quota mode.
    pub quota: bool,
    /// Rules' `metadata` go into the response's dynamic metadata.
    pub dynamic_metadata: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            algorithm: AlgorithmKind::FixedWindow,
            merge_domains: false,
            shadow: false,
            quota: false,
            dynamic_metadata: false,
        }
    }
}

impl Options {
    /// The switches of `section`.
    pub fn of(section: &EnvoySection) -> Options {
        Options {
            algorithm: section.algorithm.unwrap_or(AlgorithmKind::FixedWindow),
            merge_domains: section.merge_domains,
            shadow: section.shadow,
            quota: section.quota,
            dynamic_metadata: section.dynamic_metadata,
        }
    }
}

/// Builds an [`EnvoyConfig`] from texts and rules, collecting every error.
#[derive(Debug)]
pub struct Compiler {
    options: Options,
    domains: HashMap<String, DomainTree>,
    yaml_domains: HashMap<String, PathBuf>,
    policies: Vec<Arc<Policy>>,
    names: HashSet<String>,
    files: Vec<PathBuf>,
    errors: Vec<ConfigError>,
}

/// Where in a file a descriptor sits, for errors that are found after parsing.
struct Place<'a> {
    file: &'a Path,
    at: Option<(usize, usize)>,
}

impl Compiler {
    /// An empty compiler.
    pub fn new(options: Options) -> Compiler {
        Compiler {
            options,
            domains: HashMap::new(),
            yaml_domains: HashMap::new(),
            policies: Vec::new(),
            names: HashSet::new(),
            files: Vec::new(),
            errors: Vec::new(),
        }
    }

    /// Records an error found outside the compiler (a file that cannot be read).
    pub fn error(&mut self, error: ConfigError) {
        self.errors.push(error);
    }

    /// Adds one envoyproxy/ratelimit file's text; `file` names it in errors and in
    /// [`EnvoyConfig::files`].
    pub fn add_yaml(&mut self, text: &str, file: &Path) {
        self.files.push(file.to_owned());
        let parsed = match yaml::parse(text) {
            Ok(parsed) => parsed,
            Err(e) => {
                self.errors
                    .push(ConfigError::file(file, e.location, e.message));
                return;
            }
        };
        let domain = parsed.domain.clone().unwrap_or_default();
        let place = Place {
            file,
            at: parsed.domain_at,
        };
        match self.yaml_domains.get(&domain) {
            Some(first) if !self.options.merge_domains => {
                let message = format!(
                    "duplicate domain {domain:?} (also in {}); set [envoy] merge_domains = true to merge them",
                    first.display()
                );
                self.errors.push(ConfigError::file(file, place.at, message));
                return;
            }
            Some(_) => {}
            None => {
                self.yaml_domains.insert(domain.clone(), file.to_owned());
            }
        }
        self.domains.entry(domain.clone()).or_default();
        let mut path = Vec::new();
        self.add_descriptors(&domain, &parsed.descriptors, &mut path, &place);
    }

    fn add_descriptors(
        &mut self,
        domain: &str,
        descriptors: &[YamlDescriptor],
        path: &mut Vec<Step>,
        place: &Place<'_>,
    ) {
        for descriptor in descriptors {
            let mut step = Step::new(&descriptor.key, descriptor.value.as_deref());
            step.shared = descriptor.share_threshold;
            step.value_to_metric = descriptor.value_to_metric;
            path.push(step);
            self.domains
                .entry(domain.to_owned())
                .or_default()
                .touch(path);
            if let Some(limit) = &descriptor.rate_limit {
                self.add_yaml_rule(domain, descriptor, limit, path, place);
            }
            self.add_descriptors(domain, &descriptor.descriptors, path, place);
            path.pop();
        }
    }

    fn add_yaml_rule(
        &mut self,
        domain: &str,
        descriptor: &YamlDescriptor,
        limit: &YamlRateLimit,
        path: &[Step],
        place: &Place<'_>,
    ) {
        let label = path_label(path);
        let shadow = descriptor.shadow_mode || self.options.shadow;
        let kind = match (limit.unlimited, limit.unit) {
            (true, _) => Ok(RuleKind::Unlimited),
            (false, Some(window)) if limit.requests_per_unit == 0 => Ok(RuleKind::Block(window)),
            (false, Some(window)) => self
                .yaml_policy(domain, &label, limit.requests_per_unit, window, shadow)
                .map(|p| RuleKind::Limit(vec![p])),
            (false, None) => Err("rate_limit needs a unit".to_owned()),
        };
        let rule = kind.map(|kind| Rule {
            path: label.clone(),
            kind,
            name: limit.name.clone(),
            replaces: limit.replaces.clone(),
            shadow,
            quota: descriptor.quota_mode || self.options.quota,
            detailed_metric: descriptor.detailed_metric,
            metadata: descriptor.metadata.clone().map(Arc::new),
        });
        let inserted = rule.and_then(|rule| {
            self.domains
                .entry(domain.to_owned())
                .or_default()
                .insert(path, rule)
        });
        if let Err(message) = inserted {
            self.errors.push(ConfigError::file(
                place.file,
                place.at,
                format!("domain {domain:?}, descriptor {label:?}: {message}"),
            ));
        }
    }

    fn yaml_policy(
        &mut self,
        domain: &str,
        label: &str,
        requests_per_unit: u32,
        window: Window,
        shadow: bool,
    ) -> Result<Arc<Policy>, String> {
        let name = self.unique_name(&format!("envoy.{domain}.{label}"));
        let mode = if shadow { Mode::Shadow } else { Mode::Reject };
        let policy = Policy::builder(
            name,
            self.options.algorithm,
            u64::from(requests_per_unit),
            window.duration(),
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

    /// Adds the native rule `envoy.rules[index]`, naming policies of `policies`.
    pub fn add_rule(&mut self, index: usize, spec: &RuleSpec, policies: &[Arc<Policy>]) {
        let problems = rule_problems(spec, policies);
        if !problems.is_empty() {
            self.errors.extend(
                problems
                    .into_iter()
                    .map(|message| ConfigError::rule(index, message)),
            );
            return;
        }
        let found: Vec<Arc<Policy>> = spec
            .policies
            .iter()
            .filter_map(|name| policies.iter().find(|p| p.name() == name).cloned())
            .collect();
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
            quota: spec.quota_mode || self.options.quota,
            detailed_metric: spec.detailed_metric,
            metadata: None,
        };
        let tree = self.domains.entry(spec.domain.clone()).or_default();
        if let Err(message) = tree.insert(&path, rule) {
            self.errors.push(ConfigError::rule(index, message));
        }
    }

    /// The configuration, or every error found.
    pub fn finish(self) -> Result<EnvoyConfig, ConfigErrors> {
        if self.errors.is_empty() {
            Ok(EnvoyConfig::new(
                self.domains,
                self.policies,
                self.files,
                self.options,
            ))
        } else {
            Err(ConfigErrors(self.errors))
        }
    }
}

/// What is wrong with a native rule, each problem once.
fn rule_problems(spec: &RuleSpec, policies: &[Arc<Policy>]) -> Vec<String> {
    let mut problems = Vec::new();
    if spec.domain.is_empty() {
        problems.push("domain must not be empty".to_owned());
    }
    if spec.entries.is_empty() {
        problems.push("entries must list at least one descriptor entry".to_owned());
    }
    if spec.entries.iter().any(|e| e.key.is_empty()) {
        problems.push("every entry needs a non-empty key".to_owned());
    }
    if spec.unlimited != spec.policies.is_empty() {
        problems.push("a rule needs either policies = [...] or unlimited = true".to_owned());
    }
    for (i, name) in spec.policies.iter().enumerate() {
        if !policies.iter().any(|p| p.name() == name) {
            problems.push(format!("unknown policy {name:?}"));
        } else if spec.policies[..i].contains(name) {
            problems.push(format!("policy {name:?} is listed twice"));
        }
    }
    problems
}

fn path_label(path: &[Step]) -> String {
    path.iter().map(Step::label).collect::<Vec<_>>().join(".")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compile(options: Options, files: &[(&str, &str)]) -> Result<EnvoyConfig, ConfigErrors> {
        let mut compiler = Compiler::new(options);
        for (name, text) in files {
            compiler.add_yaml(text, Path::new(name));
        }
        compiler.finish()
    }

    const A: &str = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
    const B: &str = "domain: d\ndescriptors:\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 2}\n";

    #[test]
    fn one_domain_in_two_files_merges_only_when_asked() {
        let error = compile(Options::default(), &[("a.yaml", A), ("b.yaml", B)]).unwrap_err();
        assert_eq!(error.0.len(), 1);
        assert_eq!(error.0[0].file.as_deref(), Some(Path::new("b.yaml")));
        assert_eq!(error.0[0].location, Some((1, 1)));
        assert!(error.0[0].message.contains("duplicate domain"));
        let merged = Options {
            merge_domains: true,
            ..Options::default()
        };
        let config = compile(merged, &[("a.yaml", A), ("b.yaml", B)]).unwrap();
        assert!(config.find("d", &[("a", "x")]).is_some());
        assert!(config.find("d", &[("b", "x")]).is_some());
        // The same limit twice across merged files is still an error.
        assert!(compile(merged, &[("a.yaml", A), ("c.yaml", A)]).is_err());
    }

    #[test]
    fn global_shadow_and_quota_apply_to_every_yaml_rule() {
        let options = Options {
            shadow: true,
            quota: true,
            ..Options::default()
        };
        let config = compile(options, &[("a.yaml", A)]).unwrap();
        let found = config.find("d", &[("a", "x")]).unwrap();
        assert!(found.rule.shadow && found.rule.quota);
        assert_eq!(config.policies()[0].mode(), Mode::Shadow);
    }

    #[test]
    fn unit_multiplier_stretches_the_window() {
        let text = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 20, unit_multiplier: 5}\n";
        let config = compile(Options::default(), &[("a.yaml", text)]).unwrap();
        assert_eq!(
            config.policies()[0].period_duration(),
            std::time::Duration::from_secs(300)
        );
    }
}
