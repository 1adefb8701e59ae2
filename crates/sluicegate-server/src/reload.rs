//! Hot reload: the config file is re-read when it changes, also when it is replaced by a
//! rename or when a symlink on its path is swapped (Kubernetes ConfigMaps swap a `..data`
//! symlink in the file's directory). The watcher listens to the whole parent directory and
//! every event leads to a re-read that compares the content hash; a periodic re-read covers
//! file systems where notifications do not arrive.
//!
//! A valid new file is applied atomically; limits whose policy is unchanged keep their state.
//! An invalid one is logged with every error and the running configuration stays.
//!
//! The same watcher serves the `[envoy]` YAML files: their directories are watched too, and
//! when the TOML did not change, every event and poll asks
//! [`AppState::reload_envoy`], which recompiles only when a file's content changed.
//!
//! The files `[gateway]` reads (`tls_cert`, `tls_key`, `upstream_ca`) are watched the same
//! way: when their bytes change under an unchanged TOML, the configuration is reloaded, so
//! a renewed certificate is served to the next connection. An attempt is made once per
//! change of their bytes: a bad certificate is logged once, and the running one stays.
//!
//! `SIGHUP` re-reads everything now (as `nginx -s reload` does), changed or not.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use tokio::sync::{mpsc, watch};

use crate::config::{Config, Overrides};
use crate::state::AppState;

/// How often the file is re-read even without a notification.
pub const POLL_INTERVAL: Duration = Duration::from_secs(2);

/// Events within this window are handled as one (editors write in several steps).
const DEBOUNCE: Duration = Duration::from_millis(100);

/// A file is applied only once two reads this far apart agree (same content hash, same
/// modification time) and it was last modified at least this long ago: a writer still at
/// work changes one of them. A half-written file is often valid TOML (it ends after a
/// complete table) and would silently drop the policies not yet written.
pub const STABLE_AFTER: Duration = Duration::from_millis(150);

/// Attempts at a stable read per wake-up; a file still changing after these waits for the
/// next event or poll.
const STABLE_TRIES: usize = 20;

/// Starts watching `path`; runs until `stop` turns true.
/// `loaded` is the hash of the text the running configuration came from.
pub fn spawn(
    path: PathBuf,
    loaded: Option<u64>,
    overrides: Overrides,
    state: AppState,
    stop: watch::Receiver<bool>,
) {
    // The watch is set up before returning, so no change after start-up is missed.
    let (tx, rx) = mpsc::channel::<()>(1);
    let mut watcher = watch_dir(&path, tx);
    if let Some(watcher) = &mut watcher {
        watch_envoy_files(watcher, &state);
        watch_gateway_files(watcher, &state);
    }
    tokio::spawn(watch_loop(
        path, loaded, watcher, rx, overrides, state, stop,
    ));
}

async fn watch_loop(
    path: PathBuf,
    loaded: Option<u64>,
    watcher: Option<notify::RecommendedWatcher>,
    mut rx: mpsc::Receiver<()>,
    overrides: Overrides,
    state: AppState,
    stop: watch::Receiver<bool>,
) {
    let stopped = crate::serve::stopped(stop);
    tokio::pin!(stopped);
    if watcher.is_none() {
        tracing::warn!(path = %path.display(), "file notifications unavailable; polling every {:?}", POLL_INTERVAL);
    }
    let mut last = loaded;
    let mut files = gateway_files_print(&state);
    let mut poll = tokio::time::interval(POLL_INTERVAL);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut hangup = hangup();
    loop {
        tokio::select! {
            () = &mut stopped => break,
            Some(()) = rx.recv() => {
                tokio::time::sleep(DEBOUNCE).await;
                while rx.try_recv().is_ok() {}
            }
            _ = poll.tick() => {}
            () = next_hangup(&mut hangup) => {
                tracing::info!(path = %path.display(), "SIGHUP: re-reading the configuration");
                (last, files) = (None, None);
            }
        }
        let Some(text) = read_stable(&path).await else {
            // Mid-swap, deleted, or still being written: keep running on the current config.
            continue;
        };
        let h = hash(&text);
        let files_now = gateway_files_print(&state);
        if last == Some(h) && files == files_now {
            match state.reload_envoy() {
                Ok(true) => tracing::info!("[envoy] rules reloaded"),
                Ok(false) => {}
                Err(errors) => crate::state::log_envoy_errors(&errors),
            }
            continue;
        }
        last = Some(h);
        reload(&path, &text, &overrides, &state);
        // Remembered even when the reload failed: a bad certificate is reported once.
        files = files_now.or(gateway_files_print(&state));
    }
    drop(watcher);
}

/// The hash of the bytes of the files the running `[gateway]` reads, if it reads any.
fn gateway_files_print(state: &AppState) -> Option<u64> {
    let runtime = state.runtime();
    let files = runtime.config.gateway.as_ref()?.files();
    (!files.is_empty()).then(|| crate::tls::files_print(&files))
}

#[cfg(unix)]
type Hangup = Option<tokio::signal::unix::Signal>;
#[cfg(not(unix))]
type Hangup = ();

/// SIGHUP, installed once (its default action would end the process).
fn hangup() -> Hangup {
    #[cfg(unix)]
    {
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok()
    }
}

/// The next SIGHUP; never where there is none.
async fn next_hangup(hangup: &mut Hangup) {
    #[cfg(unix)]
    if let Some(signal) = hangup
        && signal.recv().await.is_some()
    {
        return;
    }
    let _ = hangup;
    std::future::pending::<()>().await
}

/// Validates and applies a new file's text; logs and keeps the old config on error.
pub fn reload(path: &Path, text: &str, overrides: &Overrides, state: &AppState) -> bool {
    let mut config = match crate::config::load(text, path) {
        Ok(config) => config,
        Err(diags) => {
            for line in diags.to_string().lines() {
                tracing::error!("{line}");
            }
            tracing::error!(path = %path.display(), "configuration not reloaded: {} error(s); the running configuration stays", diags.errors.len());
            return false;
        }
    };
    if let Err(e) = config.apply(overrides) {
        tracing::error!(path = %path.display(), "configuration not reloaded: {e}; the running configuration stays");
        return false;
    }
    let running = state.runtime();
    keep_restart_only(&running.config, &mut config);
    log_counting_changes(&running.config, &config);
    let policies = config.policies.len();
    let routes = config.routes.len();
    if let Err(e) = state.apply(config) {
        tracing::error!(path = %path.display(), "configuration not reloaded: {e}; the running configuration stays");
        return false;
    }
    tracing::info!(path = %path.display(), policies, routes, "configuration reloaded");
    true
}

/// Says what a reload does to each edited policy's state: new numbers keep what every key
/// has used; a new algorithm starts every key afresh (a warning, naming the policy).
fn log_counting_changes(running: &Config, new: &Config) {
    for change in counting_changes(running, new) {
        if change.starts_afresh {
            tracing::warn!(policy = %change.policy, "{change}");
        } else {
            tracing::info!(policy = %change.policy, "{change}");
        }
    }
}

/// What replacing `running` by `new` does to one policy's counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CountingChange {
    /// The policy's name.
    pub policy: String,
    /// Its algorithm changed: every key of it starts afresh. Otherwise only its numbers
    /// (limit, burst, period, calendar) changed, and every key keeps what it has used.
    pub starts_afresh: bool,
    /// `algorithm changed from X to Y`, when it did.
    pub algorithms: Option<(String, String)>,
}

impl std::fmt::Display for CountingChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.algorithms {
            Some((from, to)) => write!(
                f,
                "policy {:?}: algorithm changed from {from} to {to}; every key of it starts afresh",
                self.policy
            ),
            None => write!(
                f,
                "policy {:?}: limit, burst, period or calendar changed; every key keeps what it has used",
                self.policy
            ),
        }
    }
}

/// The policies of both configurations whose counting differs, in `running`'s order: one
/// rule for the reload log and for `sluicegate validate --against`.
pub fn counting_changes(running: &Config, new: &Config) -> Vec<CountingChange> {
    running
        .policies
        .iter()
        .filter_map(|old| {
            let now = new.policy(old.name())?;
            let policy = old.name().to_owned();
            if now.algorithm() != old.algorithm() {
                let algorithms = Some((old.algorithm().to_string(), now.algorithm().to_string()));
                Some(CountingChange {
                    policy,
                    starts_afresh: true,
                    algorithms,
                })
            } else if now.counting_key() != old.counting_key() {
                Some(CountingChange {
                    policy,
                    starts_afresh: false,
                    algorithms: None,
                })
            } else {
                None
            }
        })
        .collect()
}

/// Listeners and the store cannot change without a restart: keep the running ones, say so.
fn keep_restart_only(running: &Config, new: &mut Config) {
    if new.server.listen != running.server.listen {
        tracing::warn!("server.listen changed; it applies after a restart");
        new.server.listen = running.server.listen;
    }
    if new.store != running.store {
        tracing::warn!("[store] changed; it applies after a restart");
        new.store = running.store.clone();
    }
    // Whether the gateway serves TLS is its listener's; the certificate itself reloads.
    if let (Some(n), Some(r)) = (&mut new.gateway, &running.gateway)
        && n.tls.is_some() != r.tls.is_some()
    {
        tracing::warn!("[gateway] tls_cert/tls_key added or removed; it applies after a restart");
        if n.tls.is_some() {
            n.tls = None;
        } else {
            n.tls = r.tls.clone();
        }
    }
    let listen = |c: &Config| c.gateway.as_ref().map(|g| g.listen);
    if listen(new) != listen(running) {
        tracing::warn!("[gateway] listen changed; it applies after a restart");
        match (&mut new.gateway, &running.gateway) {
            (Some(n), Some(r)) => n.listen = r.listen,
            (n, r) => *n = r.clone(),
        }
    }
    // [envoy] rules, config and algorithm reload (crate::envoy picks them up); the
    // listener itself needs a restart.
    let envoy_listen = |c: &Config| c.envoy.as_ref().and_then(|e| e.listen);
    if envoy_listen(new) != envoy_listen(running) {
        tracing::warn!("[envoy] listen changed; it applies after a restart");
        if let Some(envoy) = &mut new.envoy {
            envoy.listen = envoy_listen(running);
        }
    }
}

fn watch_dir(path: &Path, tx: mpsc::Sender<()>) -> Option<notify::RecommendedWatcher> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
        _ => PathBuf::from("."),
    };
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if event.is_ok() {
            // A full channel means a re-read is already pending.
            let _ = tx.try_send(());
        }
    })
    .ok()?;
    watcher.watch(&dir, RecursiveMode::NonRecursive).ok()?;
    // A symlinked file may point into another directory (ConfigMaps: `..data/…`); watching
    // the link's own directory sees the swap, watching the target's sees in-place edits.
    if let Ok(target) = std::fs::canonicalize(path)
        && let Some(target_dir) = target.parent()
        && target_dir != dir
    {
        let _ = watcher.watch(target_dir, RecursiveMode::NonRecursive);
    }
    Some(watcher)
}

/// Adds the directories of the `[envoy]` YAML files (and the configured directory itself)
/// to `watcher`. A path configured later by a reload is seen by the periodic re-read.
fn watch_envoy_files(watcher: &mut notify::RecommendedWatcher, state: &AppState) {
    let runtime = state.runtime();
    let Some(section) = &runtime.config.envoy else {
        return;
    };
    let Some(path) = sluicegate_envoy::files::config_path(section, Path::new("")) else {
        return;
    };
    let dir = if path.is_dir() {
        path.clone()
    } else {
        path.parent().map(Path::to_owned).unwrap_or_default()
    };
    if !dir.as_os_str().is_empty() {
        let _ = watcher.watch(&dir, RecursiveMode::NonRecursive);
    }
    for file in state.envoy.get().files() {
        if let Ok(target) = std::fs::canonicalize(file)
            && let Some(target_dir) = target.parent()
        {
            let _ = watcher.watch(target_dir, RecursiveMode::NonRecursive);
        }
    }
}

/// Adds the directories of the `[gateway]` certificate, key and CA files to `watcher`
/// (also their targets', for symlinked files as Kubernetes Secrets mount them).
fn watch_gateway_files(watcher: &mut notify::RecommendedWatcher, state: &AppState) {
    let runtime = state.runtime();
    let Some(gateway) = &runtime.config.gateway else {
        return;
    };
    for file in gateway.files() {
        let target = std::fs::canonicalize(file).ok();
        for path in [Some(file.to_owned()), target].into_iter().flatten() {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                let _ = watcher.watch(dir, RecursiveMode::NonRecursive);
            }
        }
    }
}

/// The file's text and modification time.
fn read(path: &Path) -> Option<(String, Option<std::time::SystemTime>)> {
    let text = std::fs::read_to_string(path).ok()?;
    let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok();
    Some((text, modified))
}

/// The file's text once it has stopped changing (see [`STABLE_AFTER`]), or `None` if it
/// cannot be read or is still changing after [`STABLE_TRIES`] attempts.
async fn read_stable(path: &Path) -> Option<String> {
    let mut first = read(path)?;
    for _ in 0..STABLE_TRIES {
        tokio::time::sleep(STABLE_AFTER).await;
        let second = read(path)?;
        let settled = |m: Option<std::time::SystemTime>| {
            m.and_then(|m| m.elapsed().ok())
                .is_none_or(|age| age >= STABLE_AFTER)
        };
        if hash(&first.0) == hash(&second.0) && first.1 == second.1 && settled(second.1) {
            return Some(second.0);
        }
        first = second;
    }
    tracing::warn!(path = %path.display(), "configuration file still changing; not reloaded yet");
    None
}

/// The content hash that tells a real change from a touch.
pub fn hash(text: &str) -> u64 {
    let mut h = DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}
