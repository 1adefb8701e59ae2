//! Policy validation: every invalid policy is refused with a message that says what to fix.

use std::time::Duration;

use sluicegate_core::{AlgorithmKind, Mode, Policy, PolicyError, PolicySpec};

fn spec(json: &str) -> Result<Policy, PolicyError> {
    serde_json::from_str::<PolicySpec>(json).unwrap().build()
}

fn message(json: &str) -> String {
    spec(json).unwrap_err().to_string()
}

#[test]
fn zero_limit() {
    let msg = message(r#"{"name": "a", "algorithm": "gcra", "limit": 0, "period": "1s"}"#);
    assert_eq!(msg, "limit must be at least 1");
}

#[test]
fn zero_period() {
    let msg = message(r#"{"name": "a", "algorithm": "gcra", "limit": 1, "period": "0s"}"#);
    assert_eq!(msg, "period must be at least 1µs");
    // Under a microsecond rounds to zero and is refused too.
    let msg = message(r#"{"name": "a", "algorithm": "gcra", "limit": 1, "period": "500ns"}"#);
    assert_eq!(msg, "period must be at least 1µs");
}

#[test]
fn zero_burst() {
    let msg = message(
        r#"{"name": "a", "algorithm": "token_bucket", "limit": 5, "period": "1s", "burst": 0}"#,
    );
    assert_eq!(msg, "burst must be at least 1");
}

#[test]
fn delay_on_a_window() {
    for algorithm in ["fixed_window", "sliding_log", "sliding_window"] {
        let msg = message(&format!(
            r#"{{"name": "a", "algorithm": "{algorithm}", "limit": 5, "period": "1s", "mode": "delay"}}"#
        ));
        assert_eq!(
            msg,
            format!(
                "mode \"delay\" needs token_bucket, leaky_bucket or gcra; {algorithm} can only reject or shadow"
            )
        );
    }
    for algorithm in ["token_bucket", "leaky_bucket", "gcra"] {
        let policy = spec(&format!(
            r#"{{"name": "a", "algorithm": "{algorithm}", "limit": 5, "period": "1s", "mode": "delay", "max_delay": "2s"}}"#
        ))
        .unwrap();
        assert_eq!(policy.delay_budget(), Some(2_000_000));
    }
}

#[test]
fn unknown_algorithm() {
    let err = "leaky".parse::<AlgorithmKind>().unwrap_err();
    assert_eq!(
        err.to_string(),
        "unknown algorithm \"leaky\"; expected fixed_window, sliding_log, sliding_window, token_bucket, leaky_bucket, gcra or concurrency"
    );
    // In a spec, serde refuses it and names the valid variants.
    let err = serde_json::from_str::<PolicySpec>(
        r#"{"name": "a", "algorithm": "leaky", "limit": 1, "period": "1s"}"#,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("unknown variant `leaky`") && err.contains("token_bucket"),
        "{err}"
    );
}

#[test]
fn invalid_name_and_duration() {
    let msg = message(r#"{"name": "a b", "algorithm": "gcra", "limit": 1, "period": "1s"}"#);
    assert_eq!(
        msg,
        "policy name \"a b\" must be 1 to 128 characters of A-Z a-z 0-9 _ . -"
    );
    let msg = message(r#"{"name": "", "algorithm": "gcra", "limit": 1, "period": "1s"}"#);
    assert!(msg.starts_with("policy name \"\""), "{msg}");
    let msg = message(r#"{"name": "a", "algorithm": "gcra", "limit": 1, "period": "soon"}"#);
    assert!(
        msg.starts_with("invalid duration \"soon\": ")
            && msg.ends_with("(write e.g. 250ms, 1s, 1m, 1h, 1d)"),
        "{msg}"
    );
}

#[test]
fn too_large_for_buckets_only() {
    // A daily fixed window of 10^9 is fine: windows count in 128-bit arithmetic.
    assert!(
        spec(r#"{"name": "a", "algorithm": "fixed_window", "limit": 1000000000, "period": "1d"}"#)
            .is_ok()
    );
    let msg = message(
        r#"{"name": "a", "algorithm": "token_bucket", "limit": 1000000000, "period": "1d"}"#,
    );
    assert!(msg.starts_with("burst × period is too large"), "{msg}");
    let err = Policy::builder(
        "a",
        AlgorithmKind::Gcra,
        u64::MAX / 2,
        Duration::from_secs(1),
    )
    .burst(1)
    .mode(Mode::Delay)
    .max_delay(Duration::from_secs(10))
    .build()
    .unwrap_err();
    assert_eq!(err, PolicyError::TooLarge("limit × max_delay"));
}

#[test]
fn unknown_fields_are_refused() {
    let err = serde_json::from_str::<PolicySpec>(
        r#"{"name": "a", "algorithm": "gcra", "limit": 1, "period": "1s", "brust": 3}"#,
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("unknown field `brust`"), "{err}");
}

#[test]
fn defaults() {
    let policy =
        spec(r#"{"name": "auth", "algorithm": "token_bucket", "limit": 10, "period": "1m"}"#)
            .unwrap();
    assert_eq!(
        (policy.burst(), policy.mode(), policy.capacity()),
        (10, Mode::Reject, 10)
    );
    assert_eq!(policy.period(), 60_000_000);
}
