#![no_main]
//! Fuzz target `client_ip`: see `sluicegate_fuzz::client_ip`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluicegate_fuzz::client_ip(data));
