//! Prints the benchmarks' sluicegate configuration (`sluicegate_bench::server::config`):
//! `bench_config LISTEN ROUTES`, for `scripts/bench-http.sh`, so the load tests and the
//! callgrind probe run the same configuration.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(listen), Some(routes)) = (args.next(), args.next()) else {
        return Err("usage: bench_config LISTEN ROUTES".into());
    };
    print!(
        "{}",
        sluicegate_bench::server::config(&listen, routes.parse()?)
    );
    Ok(())
}
