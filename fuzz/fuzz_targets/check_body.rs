#![no_main]
//! Fuzz target `check_body`: see `sluicegate_fuzz::check_body`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluicegate_fuzz::check_body(data));
