//! cargo-fuzz target `mount`: see `check_mount` in fuzz/src/checks.rs for the input
//! layout and the properties checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_fuzz::checks::run("mount", data));
