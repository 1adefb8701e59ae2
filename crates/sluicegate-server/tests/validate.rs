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

/// A policy the configured store cannot decide exactly, and a period beyond the maximum,
/// are refused by `validate` and by `serve` (which does not start), with the reason.
#[test]
fn what_the_store_cannot_decide_exactly_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let redis = r#"[store]
backend = "redis"
url = "redis://127.0.0.1:1/0"

[[policies]]
name = "monthly"
algorithm = "token_bucket"
limit = 7
period = "30d"
burst = 1000

[[policies]]
name = "fine"
algorithm = "token_bucket"
limit = 1000000
period = "1d"
"#;
    let path = write(dir.path(), "redis.toml", redis);
    let out = Command::new(sluicegate_bin!())
        .args(["validate", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains(&format!("{}:6:8: error: ", path.display()))
            && stderr.contains("\"monthly\" is outside the Redis store's exact range"),
        "{stderr}"
    );
    assert!(!stderr.contains("\"fine\""), "{stderr}");
    let serve = Command::new(sluicegate_bin!())
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(serve.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&serve.stderr).contains("exact range"),
        "{serve:?}"
    );

    // The same policy is exact in memory; `--redis` switches the store and refuses it.
    let memory = redis.replace("backend = \"redis\"\nurl = \"redis://127.0.0.1:1/0\"\n", "");
    let path = write(dir.path(), "memory.toml", &memory);
    let ok = Command::new(sluicegate_bin!())
        .args(["validate", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(ok.status.code(), Some(0), "{ok:?}");
    let serve = Command::new(sluicegate_bin!())
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--redis",
            "redis://127.0.0.1:1/0",
            "--config",
        ])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(serve.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&serve.stderr).contains("exact range"),
        "{serve:?}"
    );

    // Periods: at most 3660 days.
    let long = memory.replace("period = \"30d\"", "period = \"3661d\"");
    let path = write(dir.path(), "long.toml", &long);
    let out = Command::new(sluicegate_bin!())
        .args(["validate", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains(&format!(
            "{}:7:10: error: period must be at most 3660d",
            path.display()
        )),
        "{stderr}"
    );
}

const BROKEN_POOLS: &str = r#"[[policies]]
name = "open"
algorithm = "gcra"
limit = 10
period = "1s"

[[pools]]
name = "backend"
concurrency = 0
queue = 2000000
max_wait = "2h"
levels = { critical = 0, "bad level" = 1, batch = -2 }

[[pools]]
name = "elastic"
concurrency = "adaptive"
min_concurrency = 8
max_concurrency = 4

[[pools]]
name = "noqueue"
concurrency = 4
queue = 0
max_wait = "1s"

[[pools]]
name = "fixed"
concurrency = 4
min_concurrency = 2
levels = {}

[[pools]]
name = "tiers"
concurrency = 8
levels = { critical = 3, batch = 1 }

[[routes]]
path = "/a"
policies = ["open"]
pool = "nope"

[[routes]]
path = "/b"
policies = ["open"]
pool = "elastic"

[[routes]]
path = "/c"
policies = ["open"]
pool = "tiers"
level = "gold"

[[routes]]
path = "/d"
policies = ["open"]
pool = "tiers"

[[routes]]
path = "/e"
policies = ["open"]
pool = "tiers"
level = "batch"
weight = 0
"#;

#[test]
fn every_pool_error_is_reported_at_its_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "pools.toml", BROKEN_POOLS);
    let out = Command::new(sluicegate_bin!())
        .args(["validate", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    let expected = [
        (
            9,
            15,
            "concurrency must be from 1 to 1000000 or \"adaptive\", not 0",
        ),
        (10, 9, "queue must be at most 1000000"),
        (
            11,
            12,
            "max_wait must be above zero and at most 1h, not 7200 s",
        ),
        (12, 23, "level \"critical\" needs 1 to 1000 shares, not 0"),
        (12, 26, "level name \"bad level\" must be"),
        (12, 51, "level \"batch\" shares must be a whole number"),
        (17, 19, "min_concurrency (8) is above max_concurrency (4)"),
        (24, 12, "max_wait has no effect with queue = 0"),
        (29, 19, "min_concurrency and max_concurrency are for"),
        (30, 10, "pool `levels` names no level"),
        (40, 8, "unknown pool \"nope\""),
        (51, 9, "pool \"tiers\" has no level \"gold\""),
        (
            56,
            8,
            "pool \"tiers\" has several levels; name one with `level`",
        ),
        (63, 10, "weight must be from 1 to 1000, not 0"),
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
    // Route /b names a pool that is defined but invalid: reported once, where it is defined.
    assert!(
        stderr.contains(&format!("{}: 14 errors", path.display())),
        "{stderr}"
    );
}

/// A valid file with one policy, whose `limit` line is `limit`.
fn one_policy(limit: &str) -> String {
    format!(
        "[[policies]]\nname = \"api\"\nalgorithm = \"token_bucket\"\n{limit}\nperiod = \"1m\"\n\n[[routes]]\npath = \"/\"\npolicies = [\"api\"]\n"
    )
}

/// One mistake, four ways in (`validate`, `serve`, a reload, `simulate --config`): the same
/// line, column and message, because they all read the file with the same reader and check
/// the policy with the same rules (`PolicySpec::validate`).
#[test]
fn one_mistake_reads_the_same_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "c.toml", &one_policy("limit = 0"));
    let expected = format!("{}:4:9: error: limit must be at least 1", path.display());
    let run = |args: &[&str]| {
        let out = Command::new(sluicegate_bin!())
            .args(args)
            .arg(&path)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}: {out:?}");
        String::from_utf8(out.stderr).unwrap()
    };
    let validate = run(&["validate", "--config"]);
    let serve = run(&["serve", "--listen", "127.0.0.1:0", "--config"]);
    let simulate = run(&["simulate", "--pattern", "steady", "--config"]);
    for (way, stderr) in [
        ("validate", validate),
        ("serve", serve),
        ("simulate", simulate),
    ] {
        assert!(
            stderr.contains(&expected),
            "{way}: missing {expected:?} in:\n{stderr}"
        );
    }

    // A running server given the same mistake keeps its configuration and logs the same line.
    std::fs::write(&path, one_policy("limit = 10")).unwrap();
    let path_text = path.to_str().unwrap();
    let server = sluicegate_testkit::Sluicegate::start(sluicegate_bin!(), &["--config", path_text]);
    std::fs::write(&path, one_policy("limit = 0")).unwrap();
    sluicegate_testkit::wait_until("the reload error is logged", || {
        server.log().contains("configuration not reloaded")
    });
    let log = server.log();
    assert!(
        log.contains(&expected),
        "reload: missing {expected:?} in:\n{log}"
    );
}

/// `simulate --config` takes the file's policies as written and lays its flags over them.
#[test]
fn simulate_reads_policies_from_the_config_file_with_flags_laid_over() {
    use clap::Parser;
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: sluicegate_server::cli::SimulateArgs,
    }
    let dir = tempfile::tempdir().unwrap();
    let config = write(
        dir.path(),
        "sluicegate.toml",
        r#"
[server]
listen = "127.0.0.1:8080"

[[policies]]
name = "auth"
algorithm = "token_bucket"
limit = 10
period = "1m"
burst = 3

[[policies]]
name = "search"
algorithm = "fixed_window"
limit = 100
period = "1s"
"#,
    );
    let path = config.to_str().unwrap();
    let args = |flags: &[&str]| {
        let words = ["simulate", "--config", path]
            .into_iter()
            .chain(flags.iter().copied());
        sluicegate_server::simulate::with_config_reader(Cli::try_parse_from(words).unwrap().args)
    };
    let from_file = args(&["--pattern", "steady"]).policies().unwrap();
    let names: Vec<&str> = from_file.iter().map(|p| p.name()).collect();
    assert_eq!(names, ["auth", "search"]);
    assert_eq!(from_file[0].burst(), 3);

    let overridden = args(&["--policy", "auth", "--limit", "20", "--pattern", "steady"])
        .policies()
        .unwrap();
    assert_eq!(overridden.len(), 1);
    assert_eq!((overridden[0].limit(), overridden[0].burst()), (20, 3));

    let all = args(&[
        "--policy",
        "search",
        "--algorithm",
        "all",
        "--pattern",
        "steady",
    ])
    .policies()
    .unwrap();
    assert_eq!(all[0].name(), "search.fixed_window");
    assert_eq!(all.len(), 6);

    let err = args(&["--policy", "nope", "--pattern", "steady"])
        .policies()
        .unwrap_err();
    assert!(
        err.to_string().contains("no policy named \"nope\""),
        "{err}"
    );

    // Flags break the same rules with the same words.
    let err = args(&["--policy", "auth", "--burst", "0", "--pattern", "steady"])
        .policies()
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "policy \"auth\": burst: burst must be at least 1"
    );

    std::fs::write(
        &config,
        "[[policies]]\nname = \"x\"\nalgorithm = \"gcra\"\nlimit = 1\nperiod = \"1s\"\nbrust = 2\n",
    )
    .unwrap();
    let err = args(&["--pattern", "steady"]).policies().unwrap_err();
    assert!(
        err.to_string()
            .contains(&format!("{path}:6:1: error: unknown field `brust`")),
        "{err}"
    );
}

/// `validate --against RUNNING` says what a reload would do to each edited policy's counts:
/// new numbers keep usage, a new algorithm starts afresh (a warning naming the policy).
#[test]
fn against_the_running_file_it_says_which_policies_start_afresh() {
    let policy = |name: &str, algorithm: &str, limit: u32| {
        format!(
            "[[policies]]\nname = \"{name}\"\nalgorithm = \"{algorithm}\"\nlimit = {limit}\nperiod = \"1d\"\n\n"
        )
    };
    let dir = tempfile::tempdir().unwrap();
    let running = [
        policy("daily", "fixed_window", 100),
        policy("burst", "token_bucket", 10),
        policy("same", "gcra", 5),
    ]
    .concat();
    let new = [
        policy("daily", "fixed_window", 1000),
        policy("burst", "gcra", 10),
        policy("same", "gcra", 5),
    ]
    .concat();
    let running = write(dir.path(), "running.toml", &running);
    let new = write(dir.path(), "new.toml", &new);
    let out = Command::new(sluicegate_bin!())
        .args(["validate", "--config"])
        .arg(&new)
        .arg("--against")
        .arg(&running)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().skip(1).collect();
    assert_eq!(
        lines,
        [
            "note: policy \"daily\": limit, burst, period or calendar changed; every key keeps what it has used",
            "warning: policy \"burst\": algorithm changed from token_bucket to gcra; every key of it starts afresh",
        ],
        "{stdout}"
    );
}
