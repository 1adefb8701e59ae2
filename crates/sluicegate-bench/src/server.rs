//! The server's API app in process: the same wiring as `sluicegate serve` (the Prometheus
//! recorder, the timed store, the metrics and dashboard observers, the API guard), without
//! the listener, so one request can be driven through it (`Front::serve`, or `oneshot` on
//! its router).

use std::path::Path;

use sluicegate_server::front::Front;

/// The benchmarks' policy and routes: `bench`, a token bucket of 10^9 a second (every
/// request is admitted, so the full path runs), keyed by client IP; `routes` routes, all
/// but the catch-all `/` named `/api/v1/resource{i}/items` (one per endpoint of a large API).
/// The load-test scripts write the same TOML.
pub fn config(listen: &str, routes: usize) -> String {
    let mut text = format!(
        "[server]\nlisten = \"{listen}\"\ntrusted_proxies = [\"127.0.0.1/32\"]\n\n\
         [[policies]]\nname = \"bench\"\nalgorithm = \"token_bucket\"\n\
         limit = 1_000_000_000\nperiod = \"1s\"\n"
    );
    for i in 0..routes.saturating_sub(1) {
        text.push_str(&format!(
            "\n[[routes]]\npath = \"/api/v1/resource{i}/items\"\npolicies = [\"bench\"]\nkey = \"ip\"\n"
        ));
    }
    text.push_str("\n[[routes]]\npath = \"/\"\npolicies = [\"bench\"]\nkey = \"ip\"\n");
    text
}

/// The API listener's app for the configuration `text`, wired as `sluicegate serve` wires it.
pub async fn api_app(text: &str) -> Result<Front, Box<dyn std::error::Error>> {
    sluicegate_server::metrics::install();
    let config = sluicegate_server::config::load(text, Path::new("<bench>"))?;
    let (state, dashboard, _synced) = sluicegate_server::serve::open_state(&config).await?;
    Ok(sluicegate_server::serve::api_app(&state, dashboard))
}
