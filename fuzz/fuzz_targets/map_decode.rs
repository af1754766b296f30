//! cargo-fuzz target `map_decode`: see `check_map_decode` in fuzz/src/checks.rs for the input
//! layout and the properties checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_fuzz::checks::run("map_decode", data));
