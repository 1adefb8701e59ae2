#![no_main]
//! Fuzz target `h1_head`: see `sluicegate_fuzz::h1_head`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluicegate_fuzz::h1_head(data));
