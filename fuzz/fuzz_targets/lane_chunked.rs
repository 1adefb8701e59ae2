#![no_main]
//! Fuzz target `lane_chunked`: see `sluicegate_fuzz::lane_chunked`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluicegate_fuzz::lane_chunked(data));
