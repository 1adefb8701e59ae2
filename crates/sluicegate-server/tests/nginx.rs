//! Debian's nginx in front, `auth_request` to /v1/forward-auth, rate-limits a location.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::process::{Child, Command, Stdio};

use common::{Server, free_port, program, wait_for_port, write};
use reqwest::Client;

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

struct Nginx(Child);

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGTERM lets the master stop its workers; SIGKILL would orphan them.
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn nginx_conf(dir: &str, port: u16, sluicegate: &str) -> String {
    format!(
        r#"
worker_processes 1;
daemon off;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {dir}/tmp/body;
    proxy_temp_path {dir}/tmp/proxy;
    fastcgi_temp_path {dir}/tmp/fastcgi;
    uwsgi_temp_path {dir}/tmp/uwsgi;
    scgi_temp_path {dir}/tmp/scgi;
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
}}
"#
    )
}

#[tokio::test]
async fn nginx_auth_request_rate_limits_a_location() {
    let Some(nginx) = program("nginx") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // nginx workers may run as another user: let them read the tree.
    std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).unwrap();
    for sub in ["www/limited", "www/open", "tmp"] {
        std::fs::create_dir_all(d.join(sub)).unwrap();
    }
    write(&d.join("www/limited"), "page.txt", "limited content\n");
    write(&d.join("www/open"), "page.txt", "open content\n");
    let config = write(d, "sluicegate.toml", CONFIG);
    let server = Server::start(&["--config", config.to_str().unwrap()]);

    let port = free_port();
    let conf = write(
        d,
        "nginx.conf",
        &nginx_conf(d.to_str().unwrap(), port, &server.api.to_string()),
    );
    let child = Command::new(nginx)
        .arg("-p")
        .arg(d)
        .arg("-c")
        .arg(&conf)
        .arg("-e")
        .arg(d.join("error.log"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let _nginx = Nginx(child);
    wait_for_port(([127, 0, 0, 1], port).into());

    let client = Client::new();
    let url = |p: &str| format!("http://127.0.0.1:{port}{p}");
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
