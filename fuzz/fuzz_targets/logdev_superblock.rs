//! cargo-fuzz target `logdev_superblock`: see `check_logdev_superblock` in
//! fuzz/src/checks.rs for the input layout and the properties checked.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sluice_fuzz::checks::run("logdev_superblock", data));
