//! cargo-fuzz target `intent_record`: see `check_intent_record` in fuzz/src/checks.rs for the
//! input layout and the properties checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_fuzz::checks::run("intent_record", data));
