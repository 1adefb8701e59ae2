//! `cargo run -p sluicegate-sim --example simulate -- --algorithm all ...`: the simulator
//! without the server binary.
use clap::Parser;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    simulate: sluicegate_sim::SimulateArgs,
}

fn main() {
    match Cli::parse().simulate.run() {
        Ok(text) => print!("{text}"),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
