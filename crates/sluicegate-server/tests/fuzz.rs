//! Random bodies, headers, methods and paths at the API: never a 5xx, never a crash.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{Value, json};
use sluicegate_testkit::{Sluicegate, sluicegate_bin, write};

const CONFIG: &str = r#"
[server]
admin_token = "tok"
trusted_proxies = ["127.0.0.1/32"]

[[policies]]
name = "p"
algorithm = "sliding_log"
limit = 5
period = "1s"

[[policies]]
name = "q"
algorithm = "leaky_bucket"
limit = 5
period = "1s"
mode = "delay"
max_delay = "10ms"

[[routes]]
path = "/"
policies = ["p"]
key = "header:x-key"
"#;

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        prop_oneof![
            Just("p".to_owned()),
            Just("q".to_owned()),
            ".{0,40}",
            "k{1000,1100}"
        ]
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map(".{0,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..200),
        (json_value(), json_value(), json_value()).prop_map(|(p, k, c)| {
            json!({"policy": p, "key": k, "cost": c})
                .to_string()
                .into_bytes()
        }),
        (
            prop_oneof![Just(json!("p")), Just(json!(["p", "q"]))],
            ".{0,20}",
            0u64..8
        )
            .prop_map(|(p, k, c)| json!({"policy": p, "key": k, "cost": c})
                .to_string()
                .into_bytes()),
        prop::collection::vec(json_value(), 0..5)
            .prop_map(|r| json!({"requests": r}).to_string().into_bytes()),
        json_value().prop_map(|v| v.to_string().into_bytes()),
    ]
}

fn path() -> impl Strategy<Value = String> {
    (
        prop_oneof![
            Just("/v1/check"),
            Just("/v1/limits/p/"),
            Just("/v1/limits/"),
            Just("/v1/forward-auth"),
            Just("/v1/policies"),
            Just("/openapi.json"),
            Just("/readyz"),
            Just("/"),
        ],
        "[a-zA-Z0-9%/._~ é?#&=-]{0,30}",
    )
        .prop_map(|(a, b)| format!("{a}{b}"))
}

fn headers() -> impl Strategy<Value = Vec<(String, String)>> {
    let name = prop_oneof![
        Just("content-type"),
        Just("x-original-uri"),
        Just("x-forwarded-uri"),
        Just("x-original-method"),
        Just("x-forwarded-method"),
        Just("x-forwarded-for"),
        Just("forwarded"),
        Just("authorization"),
        Just("x-key"),
    ];
    let value = prop_oneof![
        Just("application/json".to_owned()),
        "[ -~]{0,60}",
        "(([0-9]{1,3}\\.){3}[0-9]{1,3}, ?){0,3}",
        "Bearer [ -~]{0,10}",
        "/[ -~]{0,30}",
    ];
    prop::collection::vec((name.prop_map(str::to_owned), value), 0..5)
}

#[test]
fn random_requests_never_get_a_5xx() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(dir.path(), "fuzz.toml", CONFIG);
    let mut server = Sluicegate::start(sluicegate_bin!(), &["--config", config.to_str().unwrap()]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = reqwest::Client::new();
    let base = format!("http://{}", server.api);
    let methods = ["GET", "POST", "DELETE", "PUT", "PATCH", "OPTIONS", "HEAD"];

    let mut runner = TestRunner::new(Config {
        cases: 400,
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = (0..methods.len(), path(), headers(), body());
    let result = runner.run(&strategy, |(m, path, headers, body)| {
        let url = match reqwest::Url::parse(&format!("{base}{path}")) {
            Ok(url) => url,
            Err(_) => return Ok(()),
        };
        let method = reqwest::Method::from_bytes(methods[m].as_bytes()).unwrap();
        let mut request = client.request(method, url).body(body);
        for (name, value) in &headers {
            if let Ok(v) = reqwest::header::HeaderValue::from_str(value) {
                request = request.header(name.as_str(), v);
            }
        }
        let status = rt
            .block_on(request.send())
            .map_err(|e| TestCaseError::fail(format!("request failed: {e}")))?
            .status();
        prop_assert!(status.as_u16() < 500, "{status} for {path} {headers:?}");
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}\nserver log:\n{}", server.log());
    }
    assert!(server.alive(), "the server died: {}", server.log());
    let health = rt
        .block_on(client.get(format!("{base}/healthz")).send())
        .unwrap();
    assert_eq!(health.status(), 200);
    assert!(!server.log().contains("panicked"), "{}", server.log());
}
