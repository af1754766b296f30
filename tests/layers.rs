//! The layer rule of ARCHITECTURE.md, checked on the source: every `crate::X`
//! path in a module of `src/` must name a module of the same or a lower layer.
//! (Module privacy makes the volume's stages unreachable from outside the volume;
//! this test catches the rest, e.g. `format` importing `map` or `recovery`
//! importing `volume`.) The scan skips `#[cfg(test)]` modules: tests may reach
//! anywhere.

use std::collections::BTreeMap;
use std::path::Path;

/// Layer of each top-level module: a module may import only modules of a
/// layer <= its own (and itself).
fn layers() -> BTreeMap<&'static str, u32> {
    let mut m = BTreeMap::new();
    for (layer, mods) in [
        (0, &["error", "size", "format", "media"][..]),
        (1, &["geometry", "stats", "stripe", "store"][..]),
        (
            2,
            &[
                "parity",
                "stripe_set",
                "compress",
                "lease",
                "objseg",
                "map",
                "log",
                "segments",
                "gc",
                "checkpoint",
                "crc_index",
                "recovery",
                "check",
            ][..],
        ),
        (3, &["volume"][..]),
        (
            4,
            &[
                "bench", "nbd", "trace", "sim", "metrics", "cli", "main", "lib",
            ][..],
        ),
    ] {
        for &name in mods {
            m.insert(name, layer);
        }
    }
    m
}

/// Parts of layer 2 that may use each other only downward, in this order.
fn part_rank(name: &str) -> Option<u32> {
    [
        "parity",
        "stripe_set",
        "compress",
        "lease",
        "map",
        "log",
        "segments",
        "gc",
        "crc_index",
        "checkpoint",
        "recovery",
        "check",
        "objseg",
    ]
    .iter()
    .position(|n| *n == name)
    .map(|p| p as u32)
}

/// `crate::NAME` paths outside `#[cfg(test)]` modules, with their line numbers.
fn crate_paths(src: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut skip_depth: Option<i32> = None;
    let mut depth = 0i32;
    let mut cfg_test = false;
    for (n, line) in src.lines().enumerate() {
        let t = line.trim_start();
        if t.starts_with("//") {
            continue;
        }
        if t.starts_with("#[cfg(test)]") {
            cfg_test = true;
        }
        let opens = line.matches('{').count() as i32;
        let closes = line.matches('}').count() as i32;
        if cfg_test && opens > 0 && skip_depth.is_none() {
            skip_depth = Some(depth);
            cfg_test = false;
        }
        if skip_depth.is_none() {
            let mut rest = line;
            while let Some(i) = rest.find("crate::") {
                let tail = &rest[i + 7..];
                let name: String = tail
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if name.chars().next().is_some_and(|c| c.is_ascii_lowercase()) {
                    out.push((n + 1, name));
                }
                rest = tail;
            }
        }
        depth += opens - closes;
        if let Some(d) = skip_depth {
            if depth <= d {
                skip_depth = None;
            }
        }
    }
    out
}

fn visit(dir: &Path, files: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).expect("read src") {
        let p = e.expect("entry").path();
        if p.is_dir() {
            visit(&p, files);
        } else if p.extension().is_some_and(|x| x == "rs") {
            files.push(p);
        }
    }
}

/// Upward imports in the source tree rooted at `src`.
fn violations(src: &Path) -> Vec<String> {
    let layers = layers();
    let mut files = Vec::new();
    visit(src, &mut files);
    let mut bad = Vec::new();
    for f in files {
        let rel = f.strip_prefix(src).expect("under src");
        let top = rel
            .components()
            .next()
            .expect("component")
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        let Some(&mine) = layers.get(top.as_str()) else {
            bad.push(format!("{}: module {top} has no layer", rel.display()));
            continue;
        };
        let text = std::fs::read_to_string(&f).expect("read");
        for (line, name) in crate_paths(&text) {
            if name == top {
                continue;
            }
            let Some(&theirs) = layers.get(name.as_str()) else {
                continue; // re-exported items (crate::Volume, crate::Result...)
            };
            let upward = theirs > mine
                || (theirs == mine
                    && matches!((part_rank(&top), part_rank(&name)), (Some(a), Some(b)) if b > a));
            if upward {
                bad.push(format!(
                    "{}:{line}: {top} (layer {mine}) imports crate::{name} (layer {theirs})",
                    rel.display()
                ));
            }
        }
    }
    bad
}

#[test]
fn imports_only_go_downward() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let bad = violations(&src);
    assert!(bad.is_empty(), "upward imports:\n{}", bad.join("\n"));
}

#[test]
fn the_scan_sees_an_upward_import() {
    // The checker itself must be able to fail: a format module importing the map
    // and a recovery module importing the volume, plus a test module that may.
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::create_dir_all(src.join("format")).unwrap();
    std::fs::write(
        src.join("format/chunk.rs"),
        "use crate::format::BLOCK_BYTES;\nuse crate::map::MAX_PHYS_BLOCKS;\n",
    )
    .unwrap();
    std::fs::write(
        src.join("recovery.rs"),
        "use crate::map::Map;\nuse crate::volume::MountReport;\n#[cfg(test)]\nmod tests {\n    use crate::volume::Volume;\n}\n",
    )
    .unwrap();
    let bad = violations(src);
    assert_eq!(bad.len(), 2, "{bad:?}");
    assert!(bad[0].contains("crate::map") || bad[1].contains("crate::map"));
    assert!(bad.iter().any(|b| b.contains("crate::volume")));
}
