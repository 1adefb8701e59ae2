//! `sluicegate simulate`, wired in by `sluicegate-sim`.

use std::process::ExitCode;

use crate::cli::SimulateArgs;

/// Runs a simulation and prints its summary.
pub fn run(_args: &SimulateArgs) -> ExitCode {
    eprintln!("sluicegate simulate: not yet built");
    ExitCode::from(2)
}
