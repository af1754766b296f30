//! cargo-fuzz target `stripe_identity`: see `check_stripe_identity` in
//! fuzz/src/checks.rs for the input layout and the properties checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_fuzz::checks::run("stripe_identity", data));
