//! cargo-fuzz target `obj_log`: see `check_obj_log` in fuzz/src/checks.rs
//! for the input layout and the properties checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_fuzz::checks::run("obj_log", data));
