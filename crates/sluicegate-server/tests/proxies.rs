//! Issue 11 behind real proxies from Debian: nginx (`auth_request`), Caddy (`forward_auth`)
//! and HAProxy (writing `Forwarded`), each with a client that forges the headers the proxy
//! does not own: the other forward-auth pair, its own `X-Forwarded-For`, odd path spellings.

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use sluicegate_testkit::{
    Sluicegate as Server, free_port, program, sluicegate_bin, wait_for_port, write,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A child process stopped with SIGTERM (then SIGKILL) on drop.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// GET `path` exactly as written, from the local address `from`; the status code.
async fn get_from(from: &str, to: SocketAddr, path: &str, headers: &[&str]) -> u16 {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(format!("{from}:0").parse().unwrap()).unwrap();
    let mut stream = socket.connect(to).await.unwrap();
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n");
    for h in headers {
        request.push_str(h);
        request.push_str("\r\n");
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut answer))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&answer);
    text.split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {text:?}"))
}

async fn remaining(server: &Server, key: &str) -> u64 {
    let body: serde_json::Value = reqwest::get(server.url(&format!("/v1/limits/auth/{key}")))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    body["remaining"].as_u64().unwrap()
}

fn sluicegate(dir: &Path, server_extra: &str, gateway: Option<SocketAddr>) -> Server {
    let gateway = gateway.map_or(String::new(), |up| {
        format!("[gateway]\nlisten = \"127.0.0.1:0\"\nupstream = \"http://{up}\"\n")
    });
    let toml = format!(
        r#"
[server]
listen = "127.0.0.1:0"
trusted_proxies = ["127.0.0.1/32"]
{server_extra}

[[policies]]
name = "auth"
algorithm = "fixed_window"
limit = 3
period = "1h"

[[routes]]
path = "/api/auth"
policies = ["auth"]

{gateway}
"#
    );
    let path = write(dir, "sluicegate.toml", &toml);
    Server::start_with(
        sluicegate_bin!(),
        &["--config", path.to_str().unwrap()],
        false,
    )
}

fn tempdir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    // Proxy workers may run as another user: let them read the tree.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// nginx `auth_request` with `forward_auth_source = "x-original"` (the default): a client
/// that sends `X-Forwarded-Uri: /public`, rotates its own `X-Forwarded-For` and spells the
/// path differently each time is still limited, under its own address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nginx_auth_request_ignores_what_the_client_forges() {
    let Some(nginx) = program("nginx") else {
        return;
    };
    let dir = tempdir();
    let d = dir.path();
    for sub in ["www", "tmp"] {
        std::fs::create_dir_all(d.join(sub)).unwrap();
    }
    let server = sluicegate(d, "forward_auth_deny_status = 403", None);
    let port = free_port();
    let conf = format!(
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
    merge_slashes off;
    server {{
        listen 127.0.0.1:{port};
        root {dir}/www;
        location / {{
            auth_request /_sluicegate;
            error_page 403 = @too_many;
        }}
        location = /_sluicegate {{
            internal;
            proxy_pass http://{api}/v1/forward-auth;
            proxy_pass_request_body off;
            proxy_set_header Content-Length "";
            proxy_set_header X-Original-URI $request_uri;
            proxy_set_header X-Original-Method $request_method;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
        }}
        location @too_many {{
            return 429;
        }}
    }}
}}
"#,
        dir = d.display(),
        api = server.api
    );
    let conf = write(d, "nginx.conf", &conf);
    let child = Command::new(nginx)
        .arg("-p")
        .arg(d)
        .arg("-c")
        .arg(&conf)
        .arg("-e")
        .arg(d.join("error.log"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _nginx = Proc(child);
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    wait_for_port(addr);

    // Admitted requests reach the (empty) document root: 404. Refused ones: 429.
    let paths = [
        "/api/auth/a",
        "/api/%61uth/b",
        "/api//auth/c",
        "/api/./auth/d",
    ];
    let mut statuses = Vec::new();
    for (i, path) in paths.iter().enumerate() {
        let forged_xff = format!("X-Forwarded-For: 203.0.113.{i}");
        let status = get_from(
            "127.0.0.2",
            addr,
            path,
            &["X-Forwarded-Uri: /public", &forged_xff],
        )
        .await;
        statuses.push(status);
    }
    assert_eq!(statuses, [404, 404, 404, 429]);
    assert_eq!(remaining(&server, "ip:127.0.0.2").await, 0);
    assert_eq!(remaining(&server, "ip:203.0.113.0").await, 3);
}

/// Caddy `forward_auth` with `forward_auth_source = "x-forwarded"`: Caddy copies every
/// client header into the auth call, so a client sending `X-Original-URI: /public` (and
/// `X-Original-Method`) puts the other pair in front of Sluicegate; it must not choose what is
/// decided. Caddy writes `X-Forwarded-Uri` as the client wrote the target, so the spellings
/// of `/api/auth` meet its limit too, under the client's address.
///
/// (The first version of this test failed twice over: Debian's Caddy is 2.6, which has no
/// `persist_config` global option, so Caddy exited before listening; and its site address
/// `http://127.0.0.1:PORT` matches only that Host, while the client sends `Host: test`, which
/// Caddy answers with an empty 200 without asking anyone. The site now matches any host on
/// a loopback bind, and Caddy's output is shown if it exits.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caddy_forward_auth_ignores_the_other_pair() {
    let Some(caddy) = program("caddy") else {
        return;
    };
    let dir = tempdir();
    let d = dir.path();
    let server = sluicegate(d, r#"forward_auth_source = "x-forwarded""#, None);
    let port = free_port();
    let caddyfile = format!(
        r#"{{
    admin off
    auto_https off
}}
http://:{port} {{
    bind 127.0.0.1
    forward_auth {api} {{
        uri /v1/forward-auth
    }}
    respond "upstream" 200
}}
"#,
        api = server.api
    );
    let file = write(d, "Caddyfile", &caddyfile);
    let log = std::fs::File::create(d.join("caddy.log")).unwrap();
    let child = Command::new(caddy)
        .args(["run", "--adapter", "caddyfile", "--config"])
        .arg(&file)
        .env("HOME", d)
        .env("XDG_DATA_HOME", d.join("data"))
        .env("XDG_CONFIG_HOME", d.join("config"))
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let mut caddy = Proc(child);
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    sluicegate_testkit::wait_until("caddy listening or exited", || {
        std::net::TcpStream::connect(addr).is_ok() || matches!(caddy.0.try_wait(), Ok(Some(_)))
    });
    assert!(
        matches!(caddy.0.try_wait(), Ok(None)),
        "caddy exited: {}",
        std::fs::read_to_string(d.join("caddy.log")).unwrap_or_default()
    );

    let forged = ["X-Original-URI: /public", "X-Original-Method: OPTIONS"];
    let mut statuses = Vec::new();
    for path in [
        "/api/auth/a",
        "/api/%61uth/b",
        "/api//auth/c",
        "/api/./auth/d",
    ] {
        statuses.push(get_from("127.0.0.2", addr, path, &forged).await);
    }
    // Caddy copies the auth response to the client when it is not a 2xx: 429.
    assert_eq!(statuses, [200, 200, 200, 429]);
    assert_eq!(remaining(&server, "ip:127.0.0.2").await, 0);
    // Another client is not touched by the first one's spending.
    assert_eq!(
        get_from("127.0.0.3", addr, "/api/auth/e", &forged).await,
        200
    );
    assert_eq!(remaining(&server, "ip:127.0.0.3").await, 2);
}

/// HAProxy writes `Forwarded: for=<client>` (`http-request add-header`, as Debian's 2.6 has
/// no `option forwarded`) in front of the gateway with `client_ip_header = "forwarded"`;
/// the client rotates its own `X-Forwarded-For` and is limited all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn haproxy_forwarded_in_front_of_the_gateway() {
    let Some(haproxy) = program("haproxy") else {
        return;
    };
    let upstream = {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let app = axum::Router::new().fallback(|| async { "upstream" });
            axum::serve(listener, app).await.unwrap();
        });
        addr
    };
    let dir = tempdir();
    let d = dir.path();
    let server = sluicegate(d, r#"client_ip_header = "forwarded""#, Some(upstream));
    let gateway = server.gateway.unwrap();
    let port = free_port();
    let cfg = format!(
        r#"
global
    maxconn 256
defaults
    mode http
    timeout connect 5s
    timeout client 30s
    timeout server 30s
frontend fe
    bind 127.0.0.1:{port}
    http-request add-header Forwarded for=%[src]
    default_backend gw
backend gw
    server sluicegate {gateway}
"#
    );
    let file = write(d, "haproxy.cfg", &cfg);
    let child = Command::new(haproxy)
        .arg("-db")
        .arg("-f")
        .arg(&file)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _haproxy = Proc(child);
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    wait_for_port(addr);

    let mut statuses = Vec::new();
    for i in 0..4 {
        let forged = format!("X-Forwarded-For: 198.51.100.{i}");
        statuses.push(get_from("127.0.0.2", addr, "/api/auth/x", &[&forged]).await);
    }
    assert_eq!(statuses, [200, 200, 200, 429]);
    assert_eq!(remaining(&server, "ip:127.0.0.2").await, 0);
    assert_eq!(remaining(&server, "ip:198.51.100.0").await, 3);
    // Through HAProxy, a spelling is no way around the limit either.
    assert_eq!(get_from("127.0.0.2", addr, "/api/%61uth/y", &[]).await, 429);
}
