//! `sluicegate serve`: opens the store, binds the listeners, prints what runs where, serves
//! until SIGTERM/SIGINT, then drains in-flight requests and exits 0.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::cli::ServeArgs;
use crate::config::{Config, Overrides};
use crate::error::ServerError;
use crate::state::AppState;

/// How long in-flight requests get to finish after a shutdown signal.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs the server; the exit code is 0 after a clean shutdown.
pub async fn run(args: ServeArgs) -> ExitCode {
    let overrides = args.overrides();
    let (config, loaded_hash) = match load(args.config.as_deref(), &overrides) {
        Ok(loaded) => loaded,
        Err(message) => {
            eprintln!("{message}");
            eprintln!("sluicegate: refusing to start");
            return ExitCode::FAILURE;
        }
    };
    match serve(config, loaded_hash, args, overrides).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("sluicegate: {message}");
            ExitCode::FAILURE
        }
    }
}

/// The file (or the embedded default) with the flags applied, and the hash of the text
/// that was loaded (the reload watcher's starting point).
pub fn load(
    path: Option<&std::path::Path>,
    overrides: &Overrides,
) -> Result<(Config, Option<u64>), ServerError> {
    let (mut config, hash) = match path {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|source| ServerError::Read {
                path: path.to_owned(),
                source,
            })?;
            let config = crate::config::load(&text, path)?;
            (config, Some(crate::reload::hash(&text)))
        }
        None => (Config::embedded(), None),
    };
    config.apply(overrides)?;
    Ok((config, hash))
}

async fn serve(
    config: Config,
    loaded_hash: Option<u64>,
    args: ServeArgs,
    overrides: Overrides,
) -> Result<(), ServerError> {
    crate::metrics::install();
    crate::metrics::spawn_upkeep();
    let (state, dashboard, synced) = open_state(&config).await?;
    let api = bind(config.server.listen, "API").await?;
    let envoy = bind_envoy(&config).await?;
    let gateway = match &config.gateway {
        Some(g) => Some((crate::gateway::Listeners::bind(g.listen)?, g.clone())),
        None => None,
    };

    let signal = shutdown_signal();
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks = tokio::task::JoinSet::new();

    let api_addr = local(&api);
    println!("sluicegate {} listening:", env!("CARGO_PKG_VERSION"));
    println!("  api http://{api_addr}");
    println!("  dashboard http://{api_addr}/dashboard");
    let limits = config.server.connections;
    tasks.spawn(crate::conn::serve_with(
        api,
        crate::conn::Handlers::both(api_app(&state, dashboard)),
        limits,
        crate::conn::permits(&limits),
        None,
        stop_rx.clone(),
    ));
    if let Some((listeners, gateway)) = gateway {
        let (scheme, addr) = (gateway.scheme(), listeners.local_addr());
        println!("  gateway {scheme}://{addr} -> {}", gateway.upstream);
        let running = crate::gateway::start(listeners, state.clone(), stop_rx.clone()).await?;
        tasks.spawn(running);
    }
    if let Some(listener) = envoy {
        println!("  envoy grpc://{}", local(&listener));
        tasks.spawn(crate::envoy::run(
            listener,
            state.clone(),
            stopped(stop_rx.clone()),
        ));
    }
    if let Some(path) = args.config.clone() {
        crate::reload::spawn(path, loaded_hash, overrides, state.clone(), stop_rx.clone());
    }
    print!("{}", config.summary());
    if let Some(path) = &args.config {
        println!("watching {} for changes", path.display());
    }
    let snapshot = state.memory().zip(config.store.snapshot.clone());
    if let Some((memory, path)) = &snapshot {
        crate::snapshot::spawn(
            Arc::clone(memory),
            path.clone(),
            config.store.snapshot_interval,
            stop_rx.clone(),
        );
    }
    println!("ready");
    use std::io::Write;
    let _ = std::io::stdout().flush();

    let served = wait_then_drain(signal, tasks, stop_tx).await;
    // After the drain, so the requests that were in flight are counted too.
    if let Some((memory, path)) = snapshot {
        crate::snapshot::write_logged(memory, path, true).await;
    }
    // store.sync: what this instance admitted since the last exchange reaches Redis.
    if let Some(synced) = synced
        && let Err(e) = synced.sync_now().await
    {
        tracing::warn!(error = %e, "store.sync: the last exchange with Redis failed; this instance's latest admissions are not counted there");
    }
    served
}

/// The API listener's app: the decision API and the dashboard (which probes the same store,
/// lists the pools and reads the slots leases hold), behind the API's guard, with
/// `POST /v1/check` answered by the front door. Public so that the benchmarks' in-process
/// probe (crates/sluicegate-bench) measures the app this listener serves.
pub fn api_app(
    state: &AppState,
    dashboard: Arc<sluicegate_dashboard::DashboardObserver>,
) -> crate::front::Front {
    let pools_of = state.clone();
    let app = crate::app::router(state.clone()).merge(sluicegate_dashboard::router(
        sluicegate_dashboard::Dashboard::new(dashboard)
            .with_probe(Arc::clone(&state.store))
            .with_pools(move || crate::dashboard::pool_rows(&pools_of))
            .with_leases(crate::dashboard::LeaseReads(state.clone())),
    ));
    crate::front::Front::new(crate::app::guard(app, state.clone()), state.clone())
}

/// The store, the observers (metrics and the dashboard, which sees every verdict next to
/// the metrics and probes the same store) and the state every listener shares.
#[allow(clippy::type_complexity)]
pub async fn open_state(
    config: &Config,
) -> Result<
    (
        AppState,
        Arc<sluicegate_dashboard::DashboardObserver>,
        Option<Arc<sluicegate_redis::SyncedStore>>,
    ),
    ServerError,
> {
    let opened = crate::store::open(&config.store).await?;
    let dashboard = Arc::new(sluicegate_dashboard::DashboardObserver::default());
    let observer = crate::metrics::observers_with(vec![
        Arc::clone(&dashboard) as Arc<dyn sluicegate_core::VerdictObserver>
    ]);
    // Every settle and release goes through this store: the dashboard counts them here.
    let store: Arc<dyn sluicegate_core::Store> = Arc::new(sluicegate_dashboard::Tallied::new(
        opened.store,
        Arc::clone(&dashboard),
    ));
    let state = AppState::new(config.clone(), store, opened.memory, observer)?;
    // The config's [[overrides]] are in the store before the first decision.
    state.sync_overrides().await;
    Ok((state, dashboard, opened.synced))
}

/// Serves until the shutdown signal or until a listener ends on its own (a failure), then
/// tells every listener to stop and gives in-flight requests [`DRAIN_TIMEOUT`] to finish.
async fn wait_then_drain(
    signal: impl std::future::Future<Output = ()>,
    mut tasks: tokio::task::JoinSet<Result<(), ServerError>>,
    stop_tx: watch::Sender<bool>,
) -> Result<(), ServerError> {
    let mut failure = None;
    tokio::select! {
        () = signal => {
            tracing::info!("shutting down: draining in-flight requests");
        }
        Some(done) = tasks.join_next() => {
            // A listener ended on its own: that is a failure, stop the rest.
            failure = Some(match done {
                Ok(Ok(())) => ServerError::ListenerStopped,
                Ok(Err(e)) => e,
                Err(e) => ServerError::ListenerPanicked(e.to_string()),
            });
        }
    }
    let _ = stop_tx.send(true);
    let drain = async {
        while let Some(done) = tasks.join_next().await {
            if let Ok(Err(e)) = done {
                tracing::warn!(error = %e, "listener ended with an error");
            }
        }
    };
    if tokio::time::timeout(DRAIN_TIMEOUT, drain).await.is_err() {
        tracing::warn!("drain timed out; exiting with requests in flight");
    }
    match failure {
        Some(e) => Err(e),
        None => {
            tracing::info!("stopped");
            Ok(())
        }
    }
}

async fn bind(addr: SocketAddr, what: &'static str) -> Result<TcpListener, ServerError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ServerError::Listen { addr, what, source })
}

/// The Envoy gRPC listener, when the config has one: bound before `ready` is printed, like
/// the API's, so that a client connecting on `ready` is never refused.
async fn bind_envoy(config: &Config) -> Result<Option<TcpListener>, ServerError> {
    match config.envoy.as_ref().and_then(|envoy| envoy.listen) {
        Some(addr) => Ok(Some(bind(addr, "envoy").await?)),
        None => Ok(None),
    }
}

fn local(listener: &TcpListener) -> String {
    listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| "?".to_owned())
}

/// Resolves once `stop` turns true (or its sender is gone).
pub async fn stopped(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// SIGINT (Ctrl-C) or SIGTERM. The handlers are installed at once (before the banner
/// says the server is ready), so an early signal is not lost to the default action.
fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    let term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    #[cfg(unix)]
    let int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt()).ok();
    async move {
        #[cfg(unix)]
        {
            let wait = |s: Option<tokio::signal::unix::Signal>| async move {
                match s {
                    Some(mut s) => {
                        s.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                () = wait(term) => {}
                () = wait(int) => {}
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
