//! The file side of the Envoy configuration: which YAML files `[envoy] config` names, reading
//! them, and a fingerprint of everything read so a watcher can tell a real change.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sluicegate_core::Policy;

use crate::compile::{Compiler, Options};
use crate::config::{ConfigError, ConfigErrors, EnvoyConfig, EnvoySection};

/// Reads and compiles the `[envoy]` section: its YAML file or directory (relative to
/// `base_dir`) and its native rules (naming `policies`).
pub fn load(
    section: &EnvoySection,
    policies: &[Arc<Policy>],
    base_dir: &Path,
) -> Result<EnvoyConfig, ConfigErrors> {
    let mut compiler = Compiler::new(Options::of(section));
    if let Some(path) = config_path(section, base_dir) {
        match yaml_files(&path) {
            Ok(files) => {
                for file in files {
                    match std::fs::read_to_string(&file) {
                        Ok(text) => compiler.add_yaml(&text, &file),
                        Err(e) => compiler.error(ConfigError::file(
                            &file,
                            None,
                            format!("cannot read: {e}"),
                        )),
                    }
                }
            }
            Err(error) => compiler.error(error),
        }
    }
    for (index, spec) in section.rules.iter().enumerate() {
        compiler.add_rule(index, spec, policies);
    }
    compiler.finish()
}

/// `[envoy] config`, resolved against `base_dir`.
pub fn config_path(section: &EnvoySection, base_dir: &Path) -> Option<PathBuf> {
    section.config.as_ref().map(|config| {
        if config.is_absolute() {
            config.clone()
        } else {
            base_dir.join(config)
        }
    })
}

/// A fingerprint of everything [`load`] reads: the section, the policies and the YAML files'
/// names and contents. A reload recompiles when it changes.
pub fn fingerprint(section: &EnvoySection, policies: &[Arc<Policy>], base_dir: &Path) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    format!("{section:?}").hash(&mut h);
    for policy in policies {
        policy.hash(&mut h);
    }
    if let Some(path) = config_path(section, base_dir) {
        for file in yaml_files(&path).unwrap_or_default() {
            file.hash(&mut h);
            std::fs::read(&file).ok().hash(&mut h);
        }
    }
    h.finish()
}

/// The YAML files at `path`: the file itself, or a directory's `*.yaml`/`*.yml`, sorted
/// (upstream loads a directory's files in name order too).
pub fn yaml_files(path: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    if !path.is_dir() {
        return Ok(vec![path.to_owned()]);
    }
    let entries = std::fs::read_dir(path)
        .map_err(|e| ConfigError::file(path, None, format!("cannot read directory: {e}")))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_file() && matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"))
        })
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(ConfigError::file(
            path,
            None,
            "no *.yaml or *.yml file in this directory",
        ));
    }
    Ok(files)
}
