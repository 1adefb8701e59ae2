//! Debian's nginx in front, `auth_request` to /v1/forward-auth, rate-limits a location.

use reqwest::Client;
use sluicegate_testkit::{Nginx, Sluicegate, sluicegate_bin, write};

const CONFIG: &str = r#"
[server]
trusted_proxies = ["127.0.0.1/32"]
forward_auth_deny_status = 403   # nginx auth_request understands 2xx, 401 and 403

[[policies]]
name = "limited"
algorithm = "fixed_window"
limit = 3
period = "1h"

[[routes]]
path = "/limited"
policies = ["limited"]
key = "ip"
"#;

/// The `server` block: /limited/ asks Sluicegate first (`auth_request`), /open/ does not.
fn nginx_server(dir: &str, port: u16, sluicegate: &str) -> String {
    format!(
        r#"
    server {{
        listen 127.0.0.1:{port};
        root {dir}/www;

        location /limited/ {{
            auth_request /_sluicegate;
            auth_request_set $rl_remaining $upstream_http_ratelimit_remaining;
            auth_request_set $rl_retry $upstream_http_retry_after;
            add_header RateLimit-Remaining $rl_remaining always;
            error_page 403 = @too_many;
        }}

        location = /_sluicegate {{
            internal;
            proxy_pass http://{sluicegate}/v1/forward-auth;
            proxy_pass_request_body off;
            proxy_set_header Content-Length "";
            proxy_set_header X-Original-URI $request_uri;
            proxy_set_header X-Original-Method $request_method;
            proxy_set_header X-Forwarded-For $remote_addr;
        }}

        location @too_many {{
            default_type application/json;
            add_header Retry-After $rl_retry always;
            return 429 '{{"error":"rate_limit_exceeded"}}';
        }}
    }}
"#
    )
}

#[tokio::test]
async fn nginx_auth_request_rate_limits_a_location() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(dir.path(), "sluicegate.toml", CONFIG);
    let server = Sluicegate::start(sluicegate_bin!(), &["--config", config.to_str().unwrap()]);
    let api = server.api.to_string();
    let Some(nginx) = Nginx::start(|d, port| nginx_server(d.to_str().unwrap(), port, &api)) else {
        return;
    };
    let www = nginx.dir().join("www");
    for sub in ["limited", "open"] {
        std::fs::create_dir_all(www.join(sub)).unwrap();
    }
    write(&www.join("limited"), "page.txt", "limited content\n");
    write(&www.join("open"), "page.txt", "open content\n");

    let client = Client::new();
    let url = |p: &str| nginx.url(p);
    for i in 1..=3 {
        let r = client.get(url("/limited/page.txt")).send().await.unwrap();
        assert_eq!(r.status(), 200, "request {i}");
        assert_eq!(
            r.headers()["ratelimit-remaining"],
            (3 - i).to_string().as_str()
        );
        assert_eq!(r.text().await.unwrap(), "limited content\n");
    }
    let r = client.get(url("/limited/page.txt")).send().await.unwrap();
    assert_eq!(r.status(), 429);
    let retry: u64 = r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(retry >= 1);
    assert!(r.text().await.unwrap().contains("rate_limit_exceeded"));

    for _ in 0..5 {
        let r = client.get(url("/open/page.txt")).send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.text().await.unwrap(), "open content\n");
    }

    let metrics = client
        .get(server.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(r#"sluicegate_decisions_total{policy="limited",outcome="denied"} 1"#),
        "{metrics}"
    );
}
