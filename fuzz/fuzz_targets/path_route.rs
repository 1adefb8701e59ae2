#![no_main]
//! Fuzz target `path_route`: see `sluicegate_fuzz::path_route`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluicegate_fuzz::path_route(data));
