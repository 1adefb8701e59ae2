//! The `sluicegate` binary; everything lives in the library so tests and peers can reuse it.

fn main() -> std::process::ExitCode {
    sluicegate_server::cli::main()
}
