//! `sluicegate simulate`: runs [`sluicegate_sim`] and prints its summary table.

use std::path::Path;
use std::process::ExitCode;

use sluicegate_core::PolicySpec;

use crate::cli::SimulateArgs;

/// Runs a simulation, prints its table (and writes the chart with `--out`); exit 1 with
/// one line on stderr when the flags, the trace or the config are wrong.
pub fn run(args: &SimulateArgs) -> ExitCode {
    match with_config_reader(args.clone()).run() {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("sluicegate simulate: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `args` reading `--config` through the server's configuration reader, so a mistake in the
/// file reads as it does in `sluicegate validate`, at start and on reload.
pub fn with_config_reader(mut args: SimulateArgs) -> SimulateArgs {
    args.policy_reader = Some(read_policies);
    args
}

fn read_policies(path: &Path) -> Result<Vec<PolicySpec>, String> {
    crate::config::policy_specs(path).map_err(|diagnostics| diagnostics.to_string())
}
