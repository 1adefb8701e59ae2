//! `--pin` for the Redis benchmarks (2+ CPUs): redis-server on CPU 0, every client (the
//! benchmark's own process, redis-benchmark) on CPU 1, with `taskset`. The server then has a
//! core that no client of either side competes for, and each side's client has the same
//! one core: a round measures the server's work per decision rather than which process the
//! scheduler favoured. Other processes on the machine still share both cores.

use std::process::{Command, Stdio};

/// The CPUs of `--pin`: redis-server's, and every client's.
pub const SERVER_CPU: &str = "0";
pub const CLIENT_CPU: &str = "1";

/// `program`, on `cpu` when pinning (`taskset -c`).
pub fn command(program: &str, cpu: Option<&str>) -> Command {
    match cpu {
        Some(cpu) => {
            let mut command = Command::new("taskset");
            command.args(["-c", cpu, program]);
            command
        }
        None => Command::new(program),
    }
}

/// Moves this process (every thread so far; later ones inherit it) to `cpu`.
pub fn pin_self(cpu: &str) {
    let status = Command::new("taskset")
        .args(["-a", "-p", "-c", cpu, &std::process::id().to_string()])
        .stdout(Stdio::null())
        .status()
        .expect("taskset (util-linux) must be installed for --pin");
    assert!(status.success(), "taskset -p failed");
}
