#![no_main]
//! Fuzz target `envoy_yaml`: see `sluicegate_fuzz::envoy_yaml`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluicegate_fuzz::envoy_yaml(data));
