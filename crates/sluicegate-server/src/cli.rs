//! The command line: `sluicegate serve | validate | simulate`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::config::{Config, Overrides};

/// Sluicegate: an API rate-limiting and throttling service.
#[derive(Debug, Parser)]
#[command(name = "sluicegate", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the server (decision API, forward-auth, gateway, Envoy service).
    Serve(ServeArgs),
    /// Check a configuration file; print every error with line and column.
    Validate(ValidateArgs),
    /// Run an algorithm against a traffic pattern on a virtual clock.
    Simulate(SimulateArgs),
}

/// `sluicegate serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// TOML configuration; without it the embedded default runs.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Address of the decision API (overrides server.listen).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Use the Redis store at this URL (overrides [store]).
    #[arg(long, value_name = "URL")]
    pub redis: Option<String>,
    /// Run the gateway in front of this upstream (overrides gateway.upstream).
    #[arg(long, value_name = "URL", value_parser = crate::config::parse_upstream)]
    pub upstream: Option<http::Uri>,
    /// Address of the gateway (overrides gateway.listen).
    #[arg(long, value_name = "ADDR")]
    pub gateway_listen: Option<SocketAddr>,
    /// Address of the Envoy rate limit service (overrides envoy.listen).
    #[arg(long, value_name = "ADDR")]
    pub envoy_listen: Option<SocketAddr>,
}

impl ServeArgs {
    /// The flags that override the file.
    pub fn overrides(&self) -> Overrides {
        Overrides {
            listen: self.listen,
            redis: self.redis.clone(),
            upstream: self.upstream.clone(),
            gateway_listen: self.gateway_listen,
            envoy_listen: self.envoy_listen,
        }
    }
}

/// `sluicegate validate`.
#[derive(Debug, Clone, Args)]
pub struct ValidateArgs {
    /// The TOML configuration to check.
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    /// The configuration running now: also say what replacing it by `--config` does to each
    /// policy's counts (new numbers keep what keys used; a new algorithm starts afresh).
    #[arg(long, value_name = "FILE")]
    pub against: Option<PathBuf>,
}

/// `sluicegate simulate`: the simulator's own flags (see `docs/simulate.md`).
pub use sluicegate_sim::SimulateArgs;

/// Parses the command line and runs it.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => {
            init_tracing();
            let runtime = match tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("sluicegate: cannot start the async runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            runtime.block_on(crate::serve::run(args))
        }
        Command::Validate(args) => validate(&args),
        Command::Simulate(args) => crate::simulate::run(&args),
    }
}

/// `validate`: exit 0 when valid, else print every error and exit 1.
pub fn validate(args: &ValidateArgs) -> ExitCode {
    match Config::from_file(&args.config) {
        Ok(config) => {
            println!(
                "{}: ok ({} policies, {} routes)",
                args.config.display(),
                config.policies.len(),
                config.routes.len()
            );
            match &args.against {
                Some(running) => say_counting_changes(running, &config),
                None => ExitCode::SUCCESS,
            }
        }
        Err(diags) => {
            eprintln!("{diags}");
            eprintln!(
                "{}: {} error{}",
                args.config.display(),
                diags.errors.len(),
                if diags.errors.len() == 1 { "" } else { "s" }
            );
            ExitCode::FAILURE
        }
    }
}

/// `validate --against RUNNING`: one line per policy whose counting the new file changes.
fn say_counting_changes(running: &std::path::Path, new: &Config) -> ExitCode {
    let running = match Config::from_file(running) {
        Ok(config) => config,
        Err(diags) => {
            eprintln!("{diags}");
            eprintln!(
                "{}: the running configuration is not valid",
                running.display()
            );
            return ExitCode::FAILURE;
        }
    };
    for change in crate::reload::counting_changes(&running, new) {
        let level = if change.starts_afresh {
            "warning"
        } else {
            "note"
        };
        println!("{level}: {change}");
    }
    ExitCode::SUCCESS
}

/// Logs to stderr; the level comes from `RUST_LOG` (default `info`).
fn init_tracing() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}
