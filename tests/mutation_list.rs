//! The mutation list (`scripts/mutants.sh`) still describes the code: every
//! mutation applies to the source and changes it, no two `apply_` functions
//! share a name (bash would run only the last), and every `// MUTANT:` marker
//! in `src/` is reached by one. Running the mutations (a build and tests each)
//! takes hours and is done by hand; this check takes seconds, so a refactor
//! that moves a mutated line, or a marker whose texts hold a `|`, fails here
//! instead of turning the mutation into "did not apply" or a silent
//! "not applicable" the next time someone runs the list.

use std::path::Path;
use std::process::Command;

#[test]
fn every_mutation_of_the_list_applies_to_the_source() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let script = root.join("scripts/mutants.sh");
    let text = std::fs::read_to_string(&script).unwrap();
    let listed = text.lines().filter(|l| l.starts_with("run ")).count();
    assert!(listed > 100, "the list shrank to {listed} mutations");
    let work = tempfile::tempdir().unwrap();
    let out = Command::new("bash")
        .arg(&script)
        .arg("--check")
        .env("MUTANTS_DIR", work.path())
        .current_dir(root)
        .output()
        .expect("bash runs scripts/mutants.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let bad: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains(" | ") && !l.contains("| applies") && !l.starts_with("mutation "))
        .collect();
    assert!(
        out.status.success() && bad.is_empty(),
        "mutants.sh --check failed ({}):\n{}\n{stderr}",
        out.status,
        bad.join("\n")
    );
    let applied = stdout.lines().filter(|l| l.contains("| applies")).count();
    assert_eq!(
        applied, listed,
        "every `run` line of the list must be checked:\n{stdout}"
    );
}
