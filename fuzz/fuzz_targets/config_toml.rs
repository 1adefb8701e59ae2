#![no_main]
//! Fuzz target `config_toml`: see `sluicegate_fuzz::config_toml`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluicegate_fuzz::config_toml(data));
