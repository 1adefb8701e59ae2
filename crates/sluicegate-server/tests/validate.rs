//! `sluicegate validate` and the same validation at start.

use sluicegate_testkit::{sluicegate_bin, write};
use std::process::Command;

const BROKEN: &str = r#"[server]
listen = "localhost"
trusted_proxies = ["10.0.0.0/40"]
headers = ["draft-7"]

[store]
backend = "memory"
timeout = "fast"
typo = 1

[[policies]]
name = "auth"
algorithm = "fixed_window"
limit = 0
period = "1m"
mode = "delay"

[[policies]]
name = "auth"
algorithm = "token_bucket"
limit = 10
period = "1m"
burst = 0

[[routes]]
path = "/api"
policies = ["auth", "nope"]
"#;

#[test]
fn every_error_is_reported_with_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "broken.toml", BROKEN);
    let out = Command::new(sluicegate_bin!())
        .args(["validate", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    let expected = [
        (2, 10, "invalid listen address"),
        (3, 20, "invalid CIDR"),
        (4, 12, "unknown header set \"draft-7\""),
        (8, 11, "invalid duration \"fast\""),
        (9, 1, "unknown field `typo`"),
        (14, 9, "limit must be at least 1"),
        (16, 8, "mode \"delay\" needs"),
        (19, 8, "duplicate policy name \"auth\""),
        (23, 9, "burst must be at least 1"),
        (27, 21, "unknown policy \"nope\""),
    ];
    for (line, column, reason) in expected {
        let prefix = format!("{}:{line}:{column}: error: ", path.display());
        assert!(
            stderr
                .lines()
                .any(|l| l.starts_with(&prefix) && l.contains(reason)),
            "missing {prefix}{reason} in:\n{stderr}"
        );
    }
    assert!(
        stderr.contains(&format!("{}: 10 errors", path.display())),
        "{stderr}"
    );
}

#[test]
fn burst_below_one_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let text =
        "[[policies]]\nname = \"a\"\nalgorithm = \"gcra\"\nlimit = 1\nperiod = \"1s\"\nburst = 0\n";
    let path = write(dir.path(), "b.toml", text);
    let out = Command::new(sluicegate_bin!())
        .args(["validate", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains(":6:9: error: burst must be at least 1"),
        "{stderr}"
    );
}

#[test]
fn a_syntax_error_has_its_place_too() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "s.toml", "[server]\nlisten = \"127.0.0.1:1\n");
    let out = Command::new(sluicegate_bin!())
        .args(["validate", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains(&format!("{}:2:", path.display())),
        "{stderr}"
    );
}

#[test]
fn valid_files_pass_and_serve_refuses_invalid_ones() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let mut checked = 0;
    for entry in std::fs::read_dir(&root).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let out = Command::new(sluicegate_bin!())
                .args(["validate", "--config"])
                .arg(&path)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}: {}",
                path.display(),
                String::from_utf8_lossy(&out.stderr)
            );
            checked += 1;
        }
    }
    assert!(checked >= 1, "no examples found in {}", root.display());

    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "broken.toml", BROKEN);
    let out = Command::new(sluicegate_bin!())
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("refusing to start"), "{stderr}");
    assert!(
        stderr.contains(":14:9: error: limit must be at least 1"),
        "{stderr}"
    );
}
