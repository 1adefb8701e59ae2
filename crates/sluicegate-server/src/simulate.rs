//! `sluicegate simulate`: runs [`sluicegate_sim`] and prints its summary table.

use std::process::ExitCode;

use crate::cli::SimulateArgs;

/// Runs a simulation, prints its table (and writes the chart with `--out`); exit 1 with
/// one line on stderr when the flags, the trace or the config are wrong.
pub fn run(args: &SimulateArgs) -> ExitCode {
    match args.run() {
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
