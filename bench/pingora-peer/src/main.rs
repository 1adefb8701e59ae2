//! `pingora-peer LISTEN UPSTREAM [THREADS]`: Cloudflare's Pingora proxying every request to
//! UPSTREAM over pooled HTTP/1.1 connections, limited per client IP with `pingora-limits`
//! (the rate estimator of Pingora's own rate-limiting example), adding the five rate-limit
//! headers the gateway adds (`draft-6` and `ietf`), so it does the gateway's work: parse,
//! decide, forward with `X-Forwarded-For`, copy the answer back with headers.
//!
//! One single-threaded runtime per thread (`work_stealing: false`), like the gateway's
//! workers and nginx's.

use std::net::IpAddr;
use std::sync::LazyLock;
use std::time::Duration;

use async_trait::async_trait;
use pingora_core::prelude::*;
use pingora_core::server::configuration::ServerConf;
use pingora_http::{RequestHeader, ResponseHeader};
use pingora_limits::rate::Rate;
use pingora_proxy::{http_proxy_service, ProxyHttp, Session};

/// A limit high enough that every request of the benchmark is admitted (the full path runs).
const LIMIT: isize = 1_000_000_000;

static RATE: LazyLock<Rate> = LazyLock::new(|| Rate::new(Duration::from_secs(1)));

struct Peer {
    upstream: std::net::SocketAddr,
}

/// What a request's decision said, for its response headers.
#[derive(Default)]
struct Ctx {
    remaining: isize,
}

fn client_ip(session: &Session) -> Option<IpAddr> {
    session
        .client_addr()
        .and_then(|a| a.as_inet())
        .map(|a| a.ip())
}

#[async_trait]
impl ProxyHttp for Peer {
    type CTX = Ctx;

    fn new_ctx(&self) -> Ctx {
        Ctx::default()
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut Ctx) -> Result<bool> {
        let ip = client_ip(session);
        let seen = RATE.observe(&ip, 1);
        if seen > LIMIT {
            let mut header = ResponseHeader::build(429, None)?;
            header.insert_header("Retry-After", "1")?;
            header.insert_header("Content-Length", "0")?;
            session.write_response_header(Box::new(header), true).await?;
            return Ok(true);
        }
        ctx.remaining = LIMIT - seen;
        Ok(false)
    }

    async fn upstream_peer(&self, _session: &mut Session, _ctx: &mut Ctx) -> Result<Box<HttpPeer>> {
        Ok(Box::new(HttpPeer::new(self.upstream, false, String::new())))
    }

    async fn upstream_request_filter(
        &self,
        session: &mut Session,
        request: &mut RequestHeader,
        _ctx: &mut Ctx,
    ) -> Result<()> {
        if let Some(ip) = client_ip(session) {
            request.insert_header("X-Forwarded-For", ip.to_string())?;
        }
        request.insert_header("X-Forwarded-Proto", "http")?;
        Ok(())
    }

    async fn response_filter(
        &self,
        _session: &mut Session,
        response: &mut ResponseHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        response.insert_header("RateLimit-Limit", LIMIT.to_string())?;
        response.insert_header("RateLimit-Remaining", ctx.remaining.to_string())?;
        response.insert_header("RateLimit-Reset", "1")?;
        response.insert_header(
            "RateLimit-Policy",
            format!("\"bench\";q={LIMIT};w=1"),
        )?;
        response.insert_header("RateLimit", format!("\"bench\";r={};t=1", ctx.remaining))?;
        Ok(())
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(listen), Some(upstream)) = (args.next(), args.next()) else {
        eprintln!("usage: pingora-peer LISTEN UPSTREAM [THREADS]");
        std::process::exit(2);
    };
    let Ok(upstream) = upstream.parse() else {
        eprintln!("UPSTREAM must be an address such as 127.0.0.1:3000");
        std::process::exit(2);
    };
    let threads = args.next().and_then(|t| t.parse().ok()).unwrap_or(2);
    let conf = ServerConf {
        threads,
        work_stealing: false,
        upstream_keepalive_pool_size: 128,
        ..ServerConf::default()
    };
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();
    let mut proxy = http_proxy_service(&server.configuration, Peer { upstream });
    proxy.add_tcp(&listen);
    server.add_service(proxy);
    println!("pingora listening on {listen}");
    server.run_forever();
}
