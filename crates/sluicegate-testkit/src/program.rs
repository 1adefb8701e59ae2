//! Finding external programs, and the rule that CI never skips.

use std::path::{Path, PathBuf};

/// Whether the tests run under CI (`CI=true`): then a missing program fails the test.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// What a test does when `what` is missing: under CI it panics (naming `what`); elsewhere it
/// prints a `SKIPPED:` line and returns, so the caller returns too.
pub fn require(what: &str) {
    if in_ci() {
        panic!("{what} is required under CI=true (scripts/install-test-deps.sh installs it)");
    }
    eprintln!("SKIPPED: {what} is not available (run scripts/install-test-deps.sh)");
}

/// The path of the program `name` on the `PATH` (or in the sbin folders, where Debian puts
/// nginx). `None` when it is missing outside CI (the test skips); under CI it panics.
pub fn program(name: &str) -> Option<PathBuf> {
    let found = find_program(name);
    if found.is_none() {
        require(name);
    }
    found
}

/// The path of `name` on the `PATH` or in the sbin folders, without the CI rule.
pub(crate) fn find_program(name: &str) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.extend(["/usr/sbin", "/usr/local/sbin", "/sbin", "/usr/bin"].map(PathBuf::from));
    dirs.iter().map(|d| d.join(name)).find(|p| p.is_file())
}

/// Writes `text` to `dir/name` and returns the path.
pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    path
}
