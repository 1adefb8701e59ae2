//! The matching rules of envoyproxy/ratelimit's configuration format, on the situations its
//! README walks through (re-expressed here with our own domains, keys and numbers).

use sluicegate_envoy::EnvoyConfig;
use sluicegate_envoy::tree::RuleKind;
use sluicegate_envoy::yaml::Unit;

fn load(yaml: &str) -> EnvoyConfig {
    EnvoyConfig::from_yaml_str(yaml, None).unwrap()
}

/// The limit `(requests_per_unit, unit)` that applies, `Some((0, _))` for a block, or the
/// kind's name for the others; `None` when nothing matches.
fn limit(config: &EnvoyConfig, domain: &str, entries: &[(&str, &str)]) -> Option<String> {
    let found = config.find(domain, entries)?;
    Some(match &found.rule.kind {
        RuleKind::Limit(policies) => format!(
            "{}/{}s",
            policies[0].limit(),
            policies[0].period_duration().as_secs()
        ),
        RuleKind::Block(unit) => format!("0/{}s", unit.seconds()),
        RuleKind::Unlimited => "unlimited".into(),
    })
}

#[test]
fn one_key_with_two_listed_values() {
    let config = load(
        "domain: db_ops
descriptors:
  - key: table
    value: accounts
    rate_limit: {unit: second, requests_per_unit: 300}
  - key: table
    value: audit
    rate_limit: {unit: second, requests_per_unit: 40}
",
    );
    assert_eq!(
        limit(&config, "db_ops", &[("table", "accounts")]).as_deref(),
        Some("300/1s")
    );
    assert_eq!(
        limit(&config, "db_ops", &[("table", "audit")]).as_deref(),
        Some("40/1s")
    );
    assert_eq!(limit(&config, "db_ops", &[("table", "orders")]), None);
    assert_eq!(limit(&config, "other_domain", &[("table", "audit")]), None);
}

const SMS: &str = "domain: sms
descriptors:
  # a placeholder level: no limit of its own
  - key: campaign
    value: promo
    descriptors:
      - key: phone
        rate_limit: {unit: day, requests_per_unit: 3}
  - key: phone
    rate_limit: {unit: day, requests_per_unit: 50}
";

#[test]
fn nested_levels_and_a_key_without_value() {
    let config = load(SMS);
    // The nested rule, for any phone number under the promo campaign.
    assert_eq!(
        limit(
            &config,
            "sms",
            &[("campaign", "promo"), ("phone", "5550001")]
        )
        .as_deref(),
        Some("3/86400s")
    );
    // The top-level rule, for a phone number alone.
    assert_eq!(
        limit(&config, "sms", &[("phone", "5550001")]).as_deref(),
        Some("50/86400s")
    );
    // The placeholder has no limit of its own.
    assert_eq!(limit(&config, "sms", &[("campaign", "promo")]), None);
    // Another campaign has no node at all: nothing matches (no fallback to another branch).
    assert_eq!(
        limit(
            &config,
            "sms",
            &[("campaign", "news"), ("phone", "5550001")]
        ),
        None
    );
}

#[test]
fn a_value_specific_entry_beats_a_key_only_one() {
    let config = load(
        "domain: edge
descriptors:
  - key: client_ip
    rate_limit: {unit: second, requests_per_unit: 20}
  # one address is refused outright
  - key: client_ip
    value: 198.51.100.9
    rate_limit: {unit: second, requests_per_unit: 0}
",
    );
    assert_eq!(
        limit(&config, "edge", &[("client_ip", "198.51.100.1")]).as_deref(),
        Some("20/1s")
    );
    assert_eq!(
        limit(&config, "edge", &[("client_ip", "198.51.100.9")]).as_deref(),
        Some("0/1s")
    );
}

#[test]
fn the_depth_of_the_request_must_match_the_depth_of_the_rule() {
    let shallow = load(
        "domain: depth
descriptors:
  - key: tenant
    value: acme
    rate_limit: {unit: second, requests_per_unit: 7}
",
    );
    assert_eq!(
        limit(&shallow, "depth", &[("tenant", "acme")]).as_deref(),
        Some("7/1s")
    );
    assert_eq!(
        limit(&shallow, "depth", &[("tenant", "acme"), ("user", "u1")]),
        None
    );

    let deep = load(
        "domain: depth
descriptors:
  - key: tenant
    value: acme
    descriptors:
      - key: user
        rate_limit: {unit: second, requests_per_unit: 7}
",
    );
    assert_eq!(
        limit(&deep, "depth", &[("tenant", "acme"), ("user", "u1")]).as_deref(),
        Some("7/1s")
    );
    assert_eq!(limit(&deep, "depth", &[("tenant", "acme")]), None);
}

#[test]
fn unlimited_rules_match_but_carry_no_limit() {
    let config = load(
        "domain: internal
descriptors:
  - key: backup_job
    rate_limit:
      unlimited: true
  - key: batch_job
    rate_limit: {unit: minute, requests_per_unit: 60}
",
    );
    assert_eq!(
        limit(&config, "internal", &[("backup_job", "nightly")]).as_deref(),
        Some("unlimited")
    );
    assert_eq!(
        limit(&config, "internal", &[("batch_job", "x")]).as_deref(),
        Some("60/60s")
    );
}

#[test]
fn shadow_mode_makes_a_shadow_policy_on_one_branch_only() {
    let config = load(
        "domain: auth
descriptors:
  - key: service
    descriptors:
      - key: account
        value: trial
        shadow_mode: true
        rate_limit: {unit: second, requests_per_unit: 5}
      - key: account
        value: paid
        rate_limit: {unit: second, requests_per_unit: 50}
",
    );
    let trial = config
        .find("auth", &[("service", "login"), ("account", "trial")])
        .unwrap();
    let paid = config
        .find("auth", &[("service", "login"), ("account", "paid")])
        .unwrap();
    assert!(trial.rule.shadow);
    assert!(!paid.rule.shadow);
    let mode = |kind: &RuleKind| match kind {
        RuleKind::Limit(p) => p[0].mode(),
        other => panic!("{other:?}"),
    };
    assert_eq!(mode(&trial.rule.kind), sluicegate_core::Mode::Shadow);
    assert_eq!(mode(&paid.rule.kind), sluicegate_core::Mode::Reject);
}

#[test]
fn names_and_replaces_are_kept_on_the_rules() {
    let config = load(
        "domain: repl
descriptors:
  - key: plan
    value: basic
    descriptors:
      - key: user
        value: alice
        rate_limit: {name: alice_basic, unit: second, requests_per_unit: 5}
  - key: region
    value: eu
    descriptors:
      - key: user
        value: alice
        rate_limit:
          unit: second
          requests_per_unit: 12
          replaces:
            - name: alice_basic
",
    );
    let basic = config
        .find("repl", &[("plan", "basic"), ("user", "alice")])
        .unwrap();
    let eu = config
        .find("repl", &[("region", "eu"), ("user", "alice")])
        .unwrap();
    assert_eq!(basic.rule.name.as_deref(), Some("alice_basic"));
    assert_eq!(eu.rule.replaces, vec!["alice_basic".to_owned()]);
}

#[test]
fn detailed_metric_puts_the_value_into_the_label() {
    let config = load(
        "domain: labels
descriptors:
  - key: api_key
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: api_key
    value: partner
    rate_limit: {unit: minute, requests_per_unit: 100}
",
    );
    let any = config.find("labels", &[("api_key", "k-123")]).unwrap();
    let listed = config.find("labels", &[("api_key", "partner")]).unwrap();
    assert_eq!(any.label, "api_key_k-123");
    assert_eq!(listed.label, "api_key_partner");
    let plain = load(
        "domain: labels
descriptors:
  - key: api_key
    rate_limit: {unit: minute, requests_per_unit: 10}
",
    );
    assert_eq!(
        plain.find("labels", &[("api_key", "k-123")]).unwrap().label,
        "api_key"
    );
}

#[test]
fn a_trailing_star_matches_a_prefix_between_exact_and_key_only() {
    let config = load(
        "domain: paths
descriptors:
  - key: path
    value: /v1/*
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: path
    value: /v1/admin
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 1000}
",
    );
    assert_eq!(
        limit(&config, "paths", &[("path", "/v1/users")]).as_deref(),
        Some("20/60s")
    );
    assert_eq!(
        limit(&config, "paths", &[("path", "/v1/")]).as_deref(),
        Some("20/60s")
    );
    assert_eq!(
        limit(&config, "paths", &[("path", "/v1/admin")]).as_deref(),
        Some("2/60s")
    );
    assert_eq!(
        limit(&config, "paths", &[("path", "/v2/users")]).as_deref(),
        Some("1000/60s")
    );
}

#[test]
fn units_are_case_insensitive_and_include_week_month_year() {
    let config = load(
        "domain: units
descriptors:
  - {key: a, rate_limit: {unit: SECOND, requests_per_unit: 1}}
  - {key: b, rate_limit: {unit: Week, requests_per_unit: 1}}
  - {key: c, rate_limit: {unit: month, requests_per_unit: 1}}
  - {key: d, rate_limit: {unit: year, requests_per_unit: 1}}
",
    );
    for (key, unit) in [
        ("a", Unit::Second),
        ("b", Unit::Week),
        ("c", Unit::Month),
        ("d", Unit::Year),
    ] {
        let expected = format!("1/{}s", unit.seconds());
        assert_eq!(limit(&config, "units", &[(key, "x")]), Some(expected));
    }
}

#[test]
fn unquoted_numbers_are_values() {
    let config = load(
        "domain: tiers
descriptors:
  - key: tier
    value: 30
    rate_limit: {unit: second, requests_per_unit: 30}
",
    );
    assert!(config.find("tiers", &[("tier", "30")]).is_some());
}

fn error_of(yaml: &str) -> String {
    EnvoyConfig::from_yaml_str(yaml, Some(std::path::Path::new("rl.yaml")))
        .unwrap_err()
        .to_string()
}

#[test]
fn bad_files_are_refused_with_file_line_and_reason() {
    let e = error_of(
        "domain: x\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
    );
    assert!(e.starts_with("rl.yaml:3:"), "{e}");
    assert!(
        e.contains("descriptors[0]: invalid rate limit unit \"fortnight\""),
        "{e}"
    );

    let e = error_of("domain: x\ndescriptors:\n  - key: a\n    colour: blue\n");
    assert!(e.starts_with("rl.yaml:4:"), "{e}");
    assert!(e.contains("unknown field `colour`"), "{e}");

    let e = error_of(
        "domain: x\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, unit: second}\n",
    );
    assert!(
        e.contains("unlimited rate_limit must not have a unit"),
        "{e}"
    );

    let e = error_of("domain: x\ndescriptors:\n  - key: a\n    rate_limit: {unit: second}\n");
    assert!(e.contains("requests_per_unit"), "{e}");

    let e =
        error_of("domain: x\ndescriptors:\n  - key: a\n    value: b\n  - key: a\n    value: b\n");
    // Reported at the duplicate itself, not at the top of the file.
    assert!(e.starts_with("rl.yaml:5:5:"), "{e}");
    assert!(
        e.contains("duplicate descriptor composite key \"a_b\""),
        "{e}"
    );

    let e = error_of("descriptors: []\n");
    assert!(e.contains("domain must not be empty"), "{e}");

    let e = error_of("domain: x\ndescriptors:\n  - value: b\n");
    assert!(e.contains("missing field `key`"), "{e}");

    let e = error_of(
        "domain: x\ndescriptors:\n  - key: a\n    rate_limit:\n      name: n\n      unit: second\n      requests_per_unit: 1\n      replaces: [{name: n}]\n",
    );
    assert!(e.contains("must not replace itself"), "{e}");

    let e = error_of("domain: x\ndescriptors: [\n");
    assert!(e.starts_with("rl.yaml:"), "{e}");
}
