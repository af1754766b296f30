//! sluice-fuzz: the cargo-fuzz harness crate. The properties live in `checks`
//! (shared verbatim with tests/format_fuzz_smoke.rs); each fuzz target is a
//! one-line wrapper around `checks::run`.

pub mod checks;
