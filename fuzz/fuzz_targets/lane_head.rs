#![no_main]
//! Fuzz target `lane_head`: see `sluicegate_fuzz::lane_head`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluicegate_fuzz::lane_head(data));
