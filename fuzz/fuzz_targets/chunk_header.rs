//! cargo-fuzz target `chunk_header`: see `check_chunk_header` in fuzz/src/checks.rs for the input
//! layout and the properties checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_fuzz::checks::run("chunk_header", data));
