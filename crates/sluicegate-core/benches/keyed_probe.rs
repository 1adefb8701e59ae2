//! Instructions per decision of the keyed limiters of `keyed.rs` (same subjects, same keys,
//! same clock: `common/mod.rs`), for `valgrind --tool=callgrind`: instruction counts do not
//! depend on what else the machine runs, where wall and CPU time swing by 2× here.
//!
//! Usage: `keyed_probe SUBJECT KEYS [CHECKS]` (e.g. `sluicegate_gcra 1000`; `keyed_probe list` names
//! the subjects). It builds the subject, checks each of `KEYS` keys once, then makes
//! [`CHECKS`] checks of the shared random sequence in `probe_run`, which callgrind counts
//! alone (`--toggle-collect='*probe_run*'`). `scripts/bench-core.sh` drives it.
//! Instructions are not time: at a million keys a check waits on a cache miss, which the
//! count does not see (read the interleaved CPU times of `keyed.rs` for that).

mod common;

use std::hint::black_box;

use common::{Keys, LIKE_FOR_LIKE, PROBE_ONLY, SUBJECTS, Subject, build};

/// Checks counted.
const CHECKS: usize = 100_000;

#[inline(never)]
fn probe_run(subject: &dyn Subject, keys: &Keys, checks: usize) {
    for i in 0..checks {
        black_box(subject.check(keys, i));
    }
}

fn main() {
    common::check_key_text();
    // `cargo bench` passes `--bench`: only the positional arguments count.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    match args.as_slice() {
        [list] if list == "list" => {
            for (name, _) in SUBJECTS
                .iter()
                .chain(&LIKE_FOR_LIKE[1..])
                .chain(&PROBE_ONLY)
            {
                println!("{name}");
            }
        }
        [name, keys, rest @ ..] if rest.len() <= 1 => {
            // A third argument runs more checks (for a sampling profiler).
            let checks = rest
                .first()
                .map_or(CHECKS, |c| c.parse().expect("CHECKS is a number"));
            let (_, make) = SUBJECTS
                .iter()
                .chain(&LIKE_FOR_LIKE)
                .chain(&PROBE_ONLY)
                .find(|(n, _)| n == name)
                .unwrap_or_else(|| panic!("no subject {name:?} (try `list`)"));
            let n: usize = keys.parse().expect("KEYS is a number");
            let keys = Keys::new(n);
            let subject = build(*make, &keys);
            probe_run(subject.as_ref(), &keys, checks);
            println!("{name} {n} {checks}");
        }
        _ => {
            eprintln!("usage: keyed_probe SUBJECT KEYS [CHECKS] | keyed_probe list");
            std::process::exit(2);
        }
    }
}
