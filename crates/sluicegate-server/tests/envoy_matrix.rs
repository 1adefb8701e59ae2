//! Every envoyproxy/ratelimit case of issue 12 through a real Envoy 1.40 in front of the
//! `sluicegate` binary, on each store: memory, a standalone redis-server and a 3-master Redis
//! Cluster. One Envoy and one set of Sluicegate processes per store; each case has its own
//! route (descriptor keys) so the cases do not share counters.
//!
//! Cases: a plain limit; nested descriptors; a wildcard in the middle of a value;
//! `share_threshold`; `unlimited`; `replaces`; `shadow_mode` on a descriptor and `[envoy]
//! shadow`; `quota_mode`; Envoy's per-descriptor `limit` override (route `limit` action from
//! dynamic metadata) with its own counter; `metadata` coming back as the ratelimit filter's
//! dynamic metadata (read by Envoy into a response header); all-or-nothing (a denial consumes
//! nothing), on the Cluster with descriptors whose own keys sit in different slots;
//! `detailed_metric` and `value_to_metric` labels; `[envoy] merge_domains` (two files of one
//! domain) and `[envoy] quota`.
//!
//! Also every `server.headers` setting through Envoy: the exact headers a client sees on an
//! admitted and a refused request.
//!
//! Envoy fails closed here (`failure_mode_deny: true`), so a store error or UNAVAILABLE shows
//! as a 500 and fails the test instead of passing as an admission.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sluicegate_testkit::{
    Envoy, RedisCluster, RedisServer, Sluicegate, envoy_binary, free_port, sluicegate_bin,
    start_upstream, wait_for_port, write,
};

mod bootstrap {
    //! Envoy bootstraps: listeners, each with routes and one rate limit service.

    use std::net::SocketAddr;

    /// One route: an exact path, its `rate_limits` (YAML flow list) and extra route fields.
    pub struct Route {
        pub path: &'static str,
        pub rate_limits: String,
        pub extra: &'static str,
    }

    /// A `request_headers` action: header `header` becomes descriptor entry `key`.
    pub fn header(header: &str, key: &str) -> String {
        format!("{{request_headers: {{header_name: {header}, descriptor_key: {key}}}}}")
    }

    /// One `rate_limits` entry (one descriptor) of `actions`.
    pub fn descriptor(actions: &[String]) -> String {
        format!("{{actions: [{}]}}", actions.join(", "))
    }

    /// A route whose descriptors are `descriptors` (one `rate_limits` entry each).
    pub fn route(path: &'static str, descriptors: &[String]) -> Route {
        Route {
            path,
            rate_limits: format!("[{}]", descriptors.join(", ")),
            extra: "",
        }
    }

    /// A listener on `port`, rate limited for `domain` by the service `service`.
    pub struct Listener {
        pub port: u16,
        pub domain: &'static str,
        pub service: SocketAddr,
        pub routes: Vec<Route>,
    }

    fn routes_yaml(routes: &[Route]) -> String {
        routes
            .iter()
            .map(|r| {
                format!(
                    "
              - match: {{ path: \"{path}\" }}{extra}
                route:
                  cluster: upstream
                  rate_limits: {limits}",
                    path = r.path,
                    extra = r.extra,
                    limits = r.rate_limits,
                )
            })
            .collect()
    }

    fn listener_yaml(i: usize, l: &Listener) -> String {
        format!(
            r#"
  - name: l{i}
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: l{i}
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:{routes}
          http_filters:
          - name: envoy.filters.http.set_metadata
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.set_metadata.v3.Config
              metadata:
              - metadata_namespace: sluicegate.test
                value: {{ limit: {{ requests_per_unit: 2, unit: DAY }} }}
          - name: envoy.filters.http.ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
              domain: {domain}
              failure_mode_deny: true
              timeout: 5s
              rate_limit_service:
                transport_api_version: V3
                grpc_service: {{ envoy_grpc: {{ cluster_name: rl{i} }} }}
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"#,
            port = l.port,
            routes = routes_yaml(&l.routes),
            domain = l.domain,
        )
    }

    fn cluster_yaml(name: &str, addr: SocketAddr, http2: bool) -> String {
        let options = if http2 {
            r#"
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config:
          http2_protocol_options: {}"#
        } else {
            ""
        };
        format!(
            r#"
  - name: {name}
    type: STATIC
    connect_timeout: 1s{options}
    load_assignment:
      cluster_name: {name}
      endpoints:
      - lb_endpoints:
        - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }} }}"#,
            port = addr.port(),
        )
    }

    /// The whole bootstrap: admin on `admin`, `listeners`, all proxying to `upstream`.
    /// A `set_metadata` filter puts `{limit: {requests_per_unit: 2, unit: DAY}}` under
    /// `sluicegate.test` in every request's dynamic metadata, for routes whose `limit`
    /// override reads it.
    pub fn render(admin: u16, upstream: SocketAddr, listeners: &[Listener]) -> String {
        let listeners_yaml: String = listeners
            .iter()
            .enumerate()
            .map(|(i, l)| listener_yaml(i, l))
            .collect();
        let mut clusters = cluster_yaml("upstream", upstream, false);
        for (i, l) in listeners.iter().enumerate() {
            clusters.push_str(&cluster_yaml(&format!("rl{i}"), l.service, true));
        }
        format!(
            "admin:\n  address: {{ socket_address: {{ address: 127.0.0.1, port_value: {admin} }} }}\nstatic_resources:\n  listeners:{listeners_yaml}\n  clusters:{clusters}\n"
        )
    }
}

use bootstrap::{Listener, Route, descriptor, header, route};

/// The limits of every case (domain `m`), in envoyproxy/ratelimit's format, unchanged.
const MATRIX_YAML: &str = "domain: m
descriptors:
  - key: plain
    rate_limit: {unit: day, requests_per_unit: 3}
  - key: tenant
    value: acme
    descriptors:
      - key: user
        rate_limit: {unit: day, requests_per_unit: 2}
  - key: path
    value: /api/*/action
    rate_limit: {unit: day, requests_per_unit: 2}
  - key: shared
    value: team-*
    share_threshold: true
    rate_limit: {unit: day, requests_per_unit: 3}
  - key: free
    value: vip
    rate_limit: {unlimited: true}
  - key: free
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: general_key
    rate_limit: {name: general, unit: day, requests_per_unit: 2}
  - key: special_key
    rate_limit: {unit: day, requests_per_unit: 4, replaces: [{name: general}]}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: q1
    quota_mode: true
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: q2
    quota_mode: true
    rate_limit: {unit: day, requests_per_unit: 2}
  - key: qn
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: ov
    rate_limit: {unit: day, requests_per_unit: 5}
  - key: meta
    metadata: {tier: gold, team: payments}
    rate_limit: {unit: day, requests_per_unit: 10}
  - key: aon_a
    rate_limit: {unit: day, requests_per_unit: 2}
  - key: aon_b
    rate_limit: {unit: day, requests_per_unit: 100}
  - key: dm
    detailed_metric: true
    rate_limit: {unit: day, requests_per_unit: 10}
  - key: vm
    value_to_metric: true
    descriptors:
      - key: sub
        rate_limit: {unit: day, requests_per_unit: 10}
";

/// A second file of domain `m`, merged into it by `[envoy] merge_domains = true`.
const MERGED_YAML: &str = "domain: m
descriptors:
  - key: merged
    rate_limit: {unit: day, requests_per_unit: 1}
";

/// The instance running with `[envoy] quota = true` (every rule in quota_mode).
const QUOTA_YAML: &str = "domain: gq
descriptors:
  - key: qa
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: qb
    rate_limit: {unit: day, requests_per_unit: 2}
";

/// The instance running with `[envoy] shadow = true` (upstream's SHADOW_MODE).
const SHADOW_YAML: &str = "domain: gs
descriptors:
  - key: plain
    rate_limit: {unit: day, requests_per_unit: 1}
";

/// One route per case (listener for domain `m`).
fn matrix_routes() -> Vec<Route> {
    let one = |h: &str, k: &str| descriptor(&[header(h, k)]);
    let mut routes = vec![
        route("/plain", &[one("x-v", "plain")]),
        route(
            "/nested",
            &[descriptor(&[
                header("x-t", "tenant"),
                header("x-v", "user"),
            ])],
        ),
        route("/wild", &[one("x-v", "path")]),
        route("/share", &[one("x-v", "shared")]),
        route("/free", &[one("x-v", "free")]),
        route(
            "/replaces",
            &[one("x-g", "general_key"), one("x-s", "special_key")],
        ),
        route("/shadow", &[one("x-v", "shadow")]),
        route(
            "/quota",
            &[one("x-q1", "q1"), one("x-q2", "q2"), one("x-n", "qn")],
        ),
        route("/ov-plain", &[one("x-v", "ov")]),
        route("/aon", &[one("x-a", "aon_a"), one("x-b", "aon_b")]),
        route("/dm", &[one("x-v", "dm")]),
        route(
            "/vm",
            &[descriptor(&[header("x-v", "vm"), header("x-w", "sub")])],
        ),
        route("/merged", &[one("x-v", "merged")]),
    ];
    // Envoy's `limit` override: read from the dynamic metadata the set_metadata filter wrote.
    routes.push(Route {
        path: "/override",
        rate_limits: format!(
            "[{{actions: [{}], limit: {{dynamic_metadata: {{metadata_key: {{key: sluicegate.test, path: [{{key: limit}}]}}}}}}}}]",
            header("x-v", "ov")
        ),
        extra: "",
    });
    // The ratelimit filter's dynamic metadata, read back by Envoy into response headers.
    routes.push(Route {
        path: "/meta",
        rate_limits: format!("[{}]", one("x-v", "meta")),
        extra: r#"
                response_headers_to_add:
                - header: { key: x-rl-tier, value: "%DYNAMIC_METADATA(envoy.filters.http.ratelimit:tier)%" }
                - header: { key: x-rl-team, value: "%DYNAMIC_METADATA(envoy.filters.http.ratelimit:team)%" }"#,
    });
    routes
}

/// The store under test, kept alive for the test's length.
enum Store {
    Memory,
    Redis(RedisServer),
    Cluster(RedisCluster),
}

impl Store {
    fn name(&self) -> &'static str {
        match self {
            Store::Memory => "memory",
            Store::Redis(_) => "redis",
            Store::Cluster(_) => "cluster",
        }
    }

    /// The `[store]` section.
    fn toml(&self) -> String {
        let backend = match self {
            Store::Memory => return "[store]\nbackend = \"memory\"\n".to_owned(),
            Store::Redis(server) => format!("url = \"{}\"", server.url()),
            Store::Cluster(cluster) => format!("cluster = {:?}", cluster.seeds()),
        };
        // A generous timeout: these tests are about decisions, not latency, and Envoy fails
        // closed, so a timeout on a loaded machine would show as a 500.
        format!("[store]\nbackend = \"redis\"\n{backend}\ntimeout = \"2s\"\n")
    }
}

/// A `sluicegate serve` with `[envoy]` serving the `yaml` files, on `store`, with `extra` lines in
/// `[envoy]` and `server` lines in `[server]`.
fn start_sluicegate(
    dir: &std::path::Path,
    name: &str,
    store: &str,
    yaml: &[&str],
    envoy_extra: &str,
    server: &str,
) -> Sluicegate {
    // One file, or a directory of them (files of one domain merge with merge_domains).
    let yaml_file = if let [one] = yaml {
        write(dir, &format!("{name}.yaml"), one);
        format!("{name}.yaml")
    } else {
        let folder = dir.join(format!("{name}.d"));
        std::fs::create_dir_all(&folder).unwrap();
        for (i, text) in yaml.iter().enumerate() {
            write(&folder, &format!("{i}.yaml"), text);
        }
        format!("{name}.d")
    };
    let toml = write(
        dir,
        &format!("{name}.toml"),
        &format!(
            "[server]\n{server}\n{store}\n[[policies]]\nname = \"default\"\nalgorithm = \"token_bucket\"\nlimit = 60\nperiod = \"1m\"\n\n[envoy]\nconfig = \"{yaml_file}\"\n{envoy_extra}\n"
        ),
    );
    let grpc = format!("127.0.0.1:{}", free_port());
    let sluicegate = Sluicegate::start(
        sluicegate_bin!(),
        &["--config", toml.to_str().unwrap(), "--envoy-listen", &grpc],
    );
    wait_for_port(
        sluicegate
            .envoy
            .expect("the banner names the Envoy listener"),
    );
    sluicegate
}

/// One Envoy and the Sluicegate processes behind it, for one store.
struct Stack {
    store: Store,
    main: Sluicegate,
    shadow: Sluicegate,
    quota: Sluicegate,
    envoy: Envoy,
    matrix_port: u16,
    shadow_port: u16,
    quota_port: u16,
    client: reqwest::Client,
}

impl Stack {
    async fn start(store: Store, envoy_bin: &std::path::Path, dir: &std::path::Path) -> Stack {
        let toml = store.toml();
        let main = start_sluicegate(
            dir,
            "main",
            &toml,
            &[MATRIX_YAML, MERGED_YAML],
            "dynamic_metadata = true\nmerge_domains = true",
            "",
        );
        let shadow = start_sluicegate(dir, "shadow", &toml, &[SHADOW_YAML], "shadow = true", "");
        let quota = start_sluicegate(dir, "quota", &toml, &[QUOTA_YAML], "quota = true", "");
        let upstream = start_upstream().await;
        let (admin, matrix_port) = (free_port(), free_port());
        let (shadow_port, quota_port) = (free_port(), free_port());
        let listeners = [
            Listener {
                port: matrix_port,
                domain: "m",
                service: main.envoy.unwrap(),
                routes: matrix_routes(),
            },
            Listener {
                port: shadow_port,
                domain: "gs",
                service: shadow.envoy.unwrap(),
                routes: vec![route("/plain", &[descriptor(&[header("x-v", "plain")])])],
            },
            Listener {
                port: quota_port,
                domain: "gq",
                service: quota.envoy.unwrap(),
                routes: vec![route(
                    "/quota",
                    &[
                        descriptor(&[header("x-a", "qa")]),
                        descriptor(&[header("x-b", "qb")]),
                    ],
                )],
            },
        ];
        let envoy = Envoy::start(
            envoy_bin,
            &bootstrap::render(admin, upstream, &listeners),
            admin,
        )
        .await;
        Stack {
            store,
            main,
            shadow,
            quota,
            envoy,
            matrix_port,
            shadow_port,
            quota_port,
            client: reqwest::Client::new(),
        }
    }

    /// GET `path` on `port` with `headers`; the status and the response.
    async fn get_on(&self, port: u16, path: &str, headers: &[(&str, &str)]) -> Reply {
        let mut request = self
            .client
            .get(format!("http://127.0.0.1:{port}{path}"))
            .timeout(Duration::from_secs(20));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = response.text().await.unwrap_or_default();
        Reply {
            status,
            headers,
            body,
        }
    }

    async fn get(&self, path: &str, headers: &[(&str, &str)]) -> Reply {
        self.get_on(self.matrix_port, path, headers).await
    }

    /// The statuses of `n` sequential requests.
    async fn statuses(&self, n: usize, path: &str, headers: &[(&str, &str)]) -> Vec<u16> {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(self.get(path, headers).await.status);
        }
        out
    }

    /// What went wrong, for assertion messages.
    fn context(&self, case: &str) -> String {
        format!(
            "[{} store, case {case}]\nenvoy log:\n{}\nsluicegate log:\n{}",
            self.store.name(),
            self.envoy.log_text(),
            self.main.log()
        )
    }
}

struct Reply {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }
}

/// A counter's value on `sluicegate`'s `/metrics`: the sample of `name` whose labels include
/// every one of `labels` (`domain="m"`); 0 when there is none.
async fn metric(sluicegate: &Sluicegate, name: &str, labels: &[&str]) -> f64 {
    let text = reqwest::get(sluicegate.url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .filter(|l| labels.iter().all(|label| l.contains(label)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

async fn plain(s: &Stack) {
    let h = [("x-v", "p1")];
    for remaining in ["2", "1", "0"] {
        let r = s.get("/plain", &h).await;
        assert_eq!(r.status, 200, "{}", s.context("plain"));
        assert_eq!(r.header("ratelimit-limit"), Some("3"));
        assert_eq!(r.header("ratelimit-remaining"), Some(remaining));
    }
    let r = s.get("/plain", &h).await;
    assert_eq!(r.status, 429, "{}", s.context("plain"));
    assert!(r.body.contains("rate_limit_exceeded"), "{}", r.body);
    // Another value has its own counter.
    assert_eq!(s.get("/plain", &[("x-v", "p2")]).await.status, 200);
}

async fn nested(s: &Stack) {
    let acme = [("x-t", "acme"), ("x-v", "u1")];
    assert_eq!(
        s.statuses(3, "/nested", &acme).await,
        [200, 200, 429],
        "{}",
        s.context("nested")
    );
    // Another user of the tenant: its own counter; another tenant: no rule, never limited.
    assert_eq!(
        s.statuses(1, "/nested", &[("x-t", "acme"), ("x-v", "u2")])
            .await,
        [200]
    );
    assert_eq!(
        s.statuses(4, "/nested", &[("x-t", "other"), ("x-v", "u1")])
            .await,
        [200; 4],
        "{}",
        s.context("nested")
    );
}

async fn wildcard_in_the_middle(s: &Stack) {
    let a = [("x-v", "/api/a/action")];
    assert_eq!(
        s.statuses(3, "/wild", &a).await,
        [200, 200, 429],
        "{}",
        s.context("wildcard")
    );
    // Each matching value is its own counter (no share_threshold); `*` spans slashes too.
    assert_eq!(
        s.statuses(1, "/wild", &[("x-v", "/api/b/action")]).await,
        [200]
    );
    assert_eq!(
        s.statuses(3, "/wild", &[("x-v", "/api/x/y/action")]).await,
        [200, 200, 429]
    );
    // A value the pattern does not match has no limit.
    assert_eq!(
        s.statuses(4, "/wild", &[("x-v", "/api/a/other")]).await,
        [200; 4]
    );
}

async fn share_threshold(s: &Stack) {
    let mut got = Vec::new();
    for team in ["team-a", "team-b", "team-c", "team-a", "team-d"] {
        got.push(s.get("/share", &[("x-v", team)]).await.status);
    }
    // Every value matching `team-*` shares one counter of 3.
    assert_eq!(
        got,
        [200, 200, 200, 429, 429],
        "{}",
        s.context("share_threshold")
    );
}

async fn unlimited(s: &Stack) {
    assert_eq!(
        s.statuses(6, "/free", &[("x-v", "vip")]).await,
        [200; 6],
        "{}",
        s.context("unlimited")
    );
    assert_eq!(s.statuses(2, "/free", &[("x-v", "joe")]).await, [200, 429]);
}

async fn replaces(s: &Stack) {
    // Both descriptors: `general` (2) is replaced by the special limit (4).
    let both = [("x-g", "r"), ("x-s", "r")];
    assert_eq!(
        s.statuses(5, "/replaces", &both).await,
        [200, 200, 200, 200, 429],
        "{}",
        s.context("replaces")
    );
    // The replaced limit was neither checked nor counted: its 2 are all still there.
    assert_eq!(
        s.statuses(3, "/replaces", &[("x-g", "r")]).await,
        [200, 200, 429],
        "{}",
        s.context("replaces")
    );
}

async fn shadow_mode(s: &Stack) {
    let before = metric(
        &s.main,
        "sluicegate_envoy_shadow_mode_total",
        &["domain=\"m\"", "descriptor=\"shadow\""],
    )
    .await;
    assert_eq!(
        s.statuses(3, "/shadow", &[("x-v", "s")]).await,
        [200; 3],
        "{}",
        s.context("shadow_mode")
    );
    let after = metric(
        &s.main,
        "sluicegate_envoy_shadow_mode_total",
        &["domain=\"m\"", "descriptor=\"shadow\""],
    )
    .await;
    assert_eq!(after - before, 2.0, "two would-be refusals counted");

    // `[envoy] shadow = true` on the other instance: every answer OK, refusals counted.
    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(
            s.get_on(s.shadow_port, "/plain", &[("x-v", "g")])
                .await
                .status,
        );
    }
    assert_eq!(got, [200; 3], "{}", s.context("global shadow"));
    let global = metric(
        &s.shadow,
        "sluicegate_envoy_global_shadow_mode_total",
        &["domain=\"gs\""],
    )
    .await;
    assert_eq!(global, 2.0, "{}", s.shadow.log());
}

async fn quota_mode(s: &Stack) {
    let quotas = [("x-q1", "a"), ("x-q2", "a")];
    // q1 (1) and q2 (2) are quotas: over only when both are over.
    assert_eq!(
        s.statuses(3, "/quota", &quotas).await,
        [200, 200, 429],
        "{}",
        s.context("quota_mode")
    );
    // With a normal descriptor (qn: 1) over, the request is over although q2 has room...
    let with_normal = [("x-q2", "b"), ("x-n", "b")];
    assert_eq!(
        s.statuses(2, "/quota", &with_normal).await,
        [200, 429],
        "{}",
        s.context("quota_mode")
    );
    // ...and that refusal took nothing from q2: one left.
    assert_eq!(
        s.statuses(2, "/quota", &[("x-q2", "b")]).await,
        [200, 429],
        "{}",
        s.context("quota_mode")
    );
}

async fn limit_override(s: &Stack) {
    let h = [("x-v", "o1")];
    for remaining in ["1", "0"] {
        let r = s.get("/override", &h).await;
        assert_eq!(r.status, 200, "{}", s.context("override"));
        assert_eq!(
            r.header("ratelimit-limit"),
            Some("2"),
            "Envoy's limit: 2 a day"
        );
        assert_eq!(r.header("ratelimit-remaining"), Some(remaining));
    }
    assert_eq!(s.get("/override", &h).await.status, 429);
    // The configured limit (5) keeps its own counter, untouched by the override's.
    let r = s.get("/ov-plain", &h).await;
    assert_eq!(r.status, 200, "{}", s.context("override"));
    assert_eq!(r.header("ratelimit-limit"), Some("5"));
    assert_eq!(r.header("ratelimit-remaining"), Some("4"));
    assert_eq!(s.get("/override", &h).await.status, 429);
}

async fn metadata(s: &Stack) {
    let r = s.get("/meta", &[("x-v", "m1")]).await;
    assert_eq!(r.status, 200, "{}", s.context("metadata"));
    assert_eq!(r.header("x-rl-tier"), Some("gold"), "{:?}", r.headers);
    assert_eq!(r.header("x-rl-team"), Some("payments"), "{:?}", r.headers);
}

async fn all_or_nothing(s: &Stack) {
    let both = [("x-a", "x"), ("x-b", "y")];
    assert_eq!(
        s.statuses(7, "/aon", &both).await,
        [200, 200, 429, 429, 429, 429, 429],
        "{}",
        s.context("all-or-nothing")
    );
    // The five refusals took nothing from aon_b: 100 - 2 admitted - this one.
    let r = s.get("/aon", &[("x-b", "y")]).await;
    assert_eq!(r.status, 200, "{}", s.context("all-or-nothing"));
    assert_eq!(r.header("ratelimit-limit"), Some("100"));
    assert_eq!(r.header("ratelimit-remaining"), Some("97"));
    if let Store::Cluster(cluster) = &s.store {
        one_slot_on_the_cluster(cluster);
    }
}

/// On the Cluster the two descriptors' own keys hash to different slots, and yet their
/// counters sit in one slot (the domain's), which is what keeps the request one atomic step.
fn one_slot_on_the_cluster(cluster: &RedisCluster) {
    let node = &cluster.nodes[0];
    let slot = |key: &str| node.cli(&["cluster", "keyslot", key]).trim().to_owned();
    assert_ne!(
        slot("m/aon_a=x"),
        slot("m/aon_b=y"),
        "the case needs two slots"
    );
    let mut found = Vec::new();
    for n in &cluster.nodes {
        for key in n.keys("*aon_*") {
            found.push((n.port, slot(&key), key));
        }
    }
    assert!(
        found.iter().any(|(_, _, k)| k.contains("aon_a"))
            && found.iter().any(|(_, _, k)| k.contains("aon_b")),
        "both counters are in the cluster: {found:?}"
    );
    assert!(
        found
            .windows(2)
            .all(|w| w[0].0 == w[1].0 && w[0].1 == w[1].1),
        "one node, one slot: {found:?}"
    );
}

async fn metric_labels(s: &Stack) {
    let hits = |label: &'static str| async move {
        let descriptor = format!("descriptor=\"{label}\"");
        metric(
            &s.main,
            "sluicegate_envoy_hits_total",
            &["domain=\"m\"", &descriptor],
        )
        .await
    };
    // detailed_metric: the request's value in the label; value_to_metric: at its level.
    assert_eq!(s.get("/dm", &[("x-v", "k-1")]).await.status, 200);
    assert_eq!(
        hits("dm_k-1").await,
        1.0,
        "{}",
        s.context("detailed_metric")
    );
    let both = [("x-v", "v1"), ("x-w", "any")];
    assert_eq!(s.get("/vm", &both).await.status, 200);
    assert_eq!(
        hits("vm_v1.sub").await,
        1.0,
        "{}",
        s.context("value_to_metric")
    );
}

async fn merged_domain_and_global_quota(s: &Stack) {
    // A limit from the second file of domain `m` applies (merge_domains).
    assert_eq!(
        s.statuses(2, "/merged", &[("x-v", "m")]).await,
        [200, 429],
        "{}",
        s.context("merge_domains")
    );
    // `[envoy] quota = true`: both limits are soft, so the request goes on while one has room.
    let mut got = Vec::new();
    for _ in 0..3 {
        let h = [("x-a", "z"), ("x-b", "z")];
        got.push(s.get_on(s.quota_port, "/quota", &h).await.status);
    }
    assert_eq!(got, [200, 200, 429], "{}", s.quota.log());
}

async fn run_matrix(store: Option<Store>) {
    let Some(envoy_bin) = envoy_binary() else {
        return;
    };
    let Some(store) = store else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let s = Stack::start(store, &envoy_bin, dir.path()).await;
    plain(&s).await;
    nested(&s).await;
    wildcard_in_the_middle(&s).await;
    share_threshold(&s).await;
    unlimited(&s).await;
    replaces(&s).await;
    shadow_mode(&s).await;
    quota_mode(&s).await;
    limit_override(&s).await;
    metadata(&s).await;
    all_or_nothing(&s).await;
    metric_labels(&s).await;
    merged_domain_and_global_quota(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_case_through_envoy_on_memory() {
    run_matrix(Some(Store::Memory)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_case_through_envoy_on_redis() {
    run_matrix(RedisServer::start().map(Store::Redis)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_case_through_envoy_on_a_redis_cluster() {
    run_matrix(RedisCluster::start().map(Store::Cluster)).await;
}

/// The `server.headers` settings the contract defines, as written in `[server]`.
const HEADER_SETTINGS: [(&str, &str); 6] = [
    ("default", ""),
    ("draft-6", "headers = [\"draft-6\"]"),
    ("ietf", "headers = [\"ietf\"]"),
    ("legacy", "headers = [\"legacy\"]"),
    ("all", "headers = [\"draft-6\", \"ietf\", \"legacy\"]"),
    ("none", "headers = []"),
];

const HEADERS_YAML: &str = "domain: h
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 2}
";

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Seconds left in the day window (what `RateLimit-Reset`, `t` and `Retry-After` say) for a
/// decision made between `before` and `after`: `(least, most)`.
fn reset_range(before: f64, after: f64) -> (u64, u64) {
    let end = ((before / 86_400.0).floor() + 1.0) * 86_400.0;
    ((end - after).ceil() as u64, (end - before).ceil() as u64)
}

/// One setting's headers on one reply: `remaining` left after it, `(before, after)` the
/// wall clock around it.
fn assert_setting(setting: &str, r: &Reply, remaining: u64, clock: (f64, f64)) {
    let ctx = format!("setting {setting}, status {}: {:?}", r.status, r.headers);
    let draft6 = matches!(setting, "default" | "draft-6" | "all");
    let ietf = matches!(setting, "default" | "ietf" | "all");
    let legacy = matches!(setting, "legacy" | "all");
    let (least, most) = reset_range(clock.0, clock.1);
    let reset = |name: &str| -> u64 {
        let value: u64 = r
            .header(name)
            .unwrap_or_else(|| panic!("{name}: {ctx}"))
            .parse()
            .unwrap();
        assert!(
            (least..=most).contains(&value),
            "{name} {value} not in {least}..={most}: {ctx}"
        );
        value
    };
    // Every header exactly once: Envoy adds, it must not duplicate.
    for name in [
        "ratelimit-limit",
        "ratelimit-remaining",
        "ratelimit-reset",
        "ratelimit-policy",
        "ratelimit",
        "x-ratelimit-limit",
        "x-ratelimit-remaining",
        "x-ratelimit-reset",
        "retry-after",
    ] {
        assert!(
            r.headers.get_all(name).iter().count() <= 1,
            "{name} twice: {ctx}"
        );
    }
    if draft6 {
        assert_eq!(r.header("ratelimit-limit"), Some("2"), "{ctx}");
        assert_eq!(
            r.header("ratelimit-remaining"),
            Some(remaining.to_string().as_str()),
            "{ctx}"
        );
        reset("ratelimit-reset");
    } else {
        for name in ["ratelimit-limit", "ratelimit-remaining", "ratelimit-reset"] {
            assert!(r.header(name).is_none(), "{name}: {ctx}");
        }
    }
    if ietf {
        assert_eq!(
            r.header("ratelimit-policy"),
            Some("\"envoy.h.user\";q=2;w=86400"),
            "{ctx}"
        );
        let state = r
            .header("ratelimit")
            .unwrap_or_else(|| panic!("ratelimit: {ctx}"));
        let t: u64 = state
            .strip_prefix(&format!("\"envoy.h.user\";r={remaining};t="))
            .unwrap_or_else(|| panic!("ratelimit {state}: {ctx}"))
            .parse()
            .unwrap();
        assert!((least..=most).contains(&t), "t={t}: {ctx}");
    } else {
        assert!(
            r.header("ratelimit-policy").is_none() && r.header("ratelimit").is_none(),
            "{ctx}"
        );
    }
    if legacy {
        assert_eq!(r.header("x-ratelimit-limit"), Some("2"), "{ctx}");
        assert_eq!(
            r.header("x-ratelimit-remaining"),
            Some(remaining.to_string().as_str()),
            "{ctx}"
        );
        // A Unix time: the window's end (the middleware rounds its µs up: at most 1 s late).
        let end = ((clock.0 / 86_400.0).floor() as u64 + 1) * 86_400;
        let at: u64 = r.header("x-ratelimit-reset").unwrap().parse().unwrap();
        assert!(
            (end..=end + 1).contains(&at),
            "x-ratelimit-reset {at}, window end {end}: {ctx}"
        );
    } else {
        for name in [
            "x-ratelimit-limit",
            "x-ratelimit-remaining",
            "x-ratelimit-reset",
        ] {
            assert!(r.header(name).is_none(), "{name}: {ctx}");
        }
    }
    if r.status == 429 {
        // A refusal: Retry-After (every setting), and the contract's JSON body.
        reset("retry-after");
        assert_eq!(r.header("content-type"), Some("application/json"), "{ctx}");
        assert!(
            r.body.contains("\"error\":\"rate_limit_exceeded\""),
            "{}",
            r.body
        );
    } else {
        assert!(r.header("retry-after").is_none(), "{ctx}");
        assert_eq!(r.body, "upstream ok");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_header_setting_through_envoy() {
    let Some(envoy_bin) = envoy_binary() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let memory = Store::Memory.toml();
    let instances: Vec<(&str, Sluicegate)> = HEADER_SETTINGS
        .iter()
        .map(|(name, server)| {
            let sg = start_sluicegate(dir.path(), name, &memory, &[HEADERS_YAML], "", server);
            (*name, sg)
        })
        .collect();
    let upstream = start_upstream().await;
    let admin = free_port();
    let listeners: Vec<Listener> = instances
        .iter()
        .map(|(_, sg)| Listener {
            port: free_port(),
            domain: "h",
            service: sg.envoy.unwrap(),
            routes: vec![route("/h", &[descriptor(&[header("x-user", "user")])])],
        })
        .collect();
    let envoy = Envoy::start(
        &envoy_bin,
        &bootstrap::render(admin, upstream, &listeners),
        admin,
    )
    .await;
    let client = reqwest::Client::new();
    for ((setting, sg), listener) in instances.iter().zip(&listeners) {
        for (expected_status, remaining) in [(200, 1), (200, 0), (429, 0)] {
            let before = unix_now();
            let response = client
                .get(format!("http://127.0.0.1:{}/h", listener.port))
                .header("x-user", "alice")
                .timeout(Duration::from_secs(20))
                .send()
                .await
                .unwrap();
            let after = unix_now();
            let r = Reply {
                status: response.status().as_u16(),
                headers: response.headers().clone(),
                body: response.text().await.unwrap(),
            };
            assert_eq!(
                r.status,
                expected_status,
                "setting {setting}\nenvoy log:\n{}\nsluicegate log:\n{}",
                envoy.log_text(),
                sg.log()
            );
            assert_setting(setting, &r, remaining, (before, after));
        }
    }
}
