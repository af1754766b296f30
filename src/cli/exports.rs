//! `sluice serve --config FILE`: the exports file. Owns its format (TOML, one
//! `[[export]]` table per export: `name`, `path`, optional `read_only` and
//! `description`) and its errors, which name the file and the line. Paths that
//! are not absolute are relative to the file's directory. Parsing only: the
//! volumes are opened by `serve`.

use anyhow::bail;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The example shown by `sluice serve --help` and kept in
/// `docs/examples/exports.toml` (a unit test parses both).
pub const EXAMPLE: &str = r#"# sluice serve --config exports.toml
[[export]]
name = "vm1"                       # the export name clients ask for
path = "/var/lib/sluice/vm1.img"   # relative paths start at this file's directory
description = "build VM root disk" # optional, shown by nbdinfo

[[export]]
name = "golden"
path = "golden.img"
read_only = true                   # optional, default false"#;

/// One export from the file.
#[derive(Debug, Clone, PartialEq)]
pub struct ExportSpec {
    pub name: String,
    pub path: PathBuf,
    pub read_only: bool,
    pub description: Option<String>,
    /// "FILE: line N" of the table in an exports file (None on the command
    /// line), so errors about the export name where it was given.
    pub origin: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    export: Vec<toml::Spanned<Entry>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: toml::Spanned<String>,
    path: toml::Spanned<String>,
    #[serde(default)]
    read_only: bool,
    description: Option<String>,
}

/// 1-based line of byte offset `at` in `text`.
fn line_of(text: &str, at: usize) -> usize {
    text.as_bytes()[..at.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// Parse an exports file's text; `file` names it in errors.
pub fn parse(text: &str, file: &Path) -> anyhow::Result<Vec<ExportSpec>> {
    let f = file.display();
    let parsed: File = match toml::from_str(text) {
        Ok(p) => p,
        Err(e) => {
            let line = e
                .span()
                .map(|s| format!("line {}: ", line_of(text, s.start)))
                .unwrap_or_default();
            bail!("{f}: {line}{}", e.message().trim_end());
        }
    };
    if parsed.export.is_empty() {
        bail!("{f}: no [[export]] table (see `sluice serve --help` for an example)");
    }
    let base = file.parent().unwrap_or(Path::new("."));
    let mut out: Vec<ExportSpec> = Vec::new();
    for e in parsed.export {
        let at = line_of(text, e.span().start);
        let e = e.into_inner();
        let name_line = line_of(text, e.name.span().start);
        let name = e.name.into_inner();
        if name.len() > 4096 || name.contains('\0') {
            bail!("{f}: line {name_line}: export names must be at most 4096 bytes without NUL");
        }
        if out.iter().any(|o| o.name == name) {
            bail!("{f}: line {name_line}: export name {name:?} given twice");
        }
        if e.description.as_ref().is_some_and(|d| d.len() > 4096) {
            bail!("{f}: line {name_line}: the description of {name:?} is longer than 4096 bytes");
        }
        let path_line = line_of(text, e.path.span().start);
        let path = e.path.into_inner();
        if path.is_empty() {
            bail!("{f}: line {path_line}: empty path for export {name:?} (the table at line {at})");
        }
        let path = PathBuf::from(path);
        out.push(ExportSpec {
            name,
            path: if path.is_absolute() {
                path
            } else {
                base.join(path)
            },
            read_only: e.read_only,
            description: e.description,
            origin: Some(format!("{f}: line {at}")),
        });
    }
    Ok(out)
}

/// Read and parse an exports file.
pub fn load(file: &Path) -> anyhow::Result<Vec<ExportSpec>> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| anyhow::anyhow!("reading {}: {e}", file.display()))?;
    parse(&text, file)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        parse(text, Path::new("/etc/x.toml"))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn the_example_parses() {
        let v = parse(EXAMPLE, Path::new("/etc/sluice/exports.toml")).unwrap();
        assert_eq!(
            v,
            vec![
                ExportSpec {
                    name: "vm1".into(),
                    path: "/var/lib/sluice/vm1.img".into(),
                    read_only: false,
                    description: Some("build VM root disk".into()),
                    origin: Some("/etc/sluice/exports.toml: line 2".into()),
                },
                ExportSpec {
                    name: "golden".into(),
                    path: "/etc/sluice/golden.img".into(),
                    read_only: true,
                    description: None,
                    origin: Some("/etc/sluice/exports.toml: line 7".into()),
                },
            ]
        );
        let doc = include_str!("../../docs/examples/exports.toml");
        assert_eq!(parse(doc, Path::new("/x/e.toml")).unwrap().len(), 2);
    }

    #[test]
    fn errors_name_the_file_and_line() {
        let e = err("[[export]]\nname = \"a\"\npath = \"a.img\"\nread_only = yes\n");
        assert!(e.starts_with("/etc/x.toml: line 4: "), "{e}");
        let e = err("[[export]]\nname = \"a\"\npath = \"a.img\"\nreadonly = true\n");
        assert!(e.starts_with("/etc/x.toml: line 4: "), "{e}");
        assert!(e.contains("readonly"), "{e}");
        let e = err("[[export]]\nname = \"a\"\n\n[[export]]\nname = \"b\"\n");
        assert!(e.starts_with("/etc/x.toml: line "), "{e}");
        assert!(e.contains("path"), "{e}");
        let e = err(
            "[[export]]\nname = \"a\"\npath = \"a.img\"\n\n[[export]]\nname = \"a\"\npath = \"b.img\"\n",
        );
        assert_eq!(e, "/etc/x.toml: line 6: export name \"a\" given twice");
        let e = err("[[export]]\nname = \"a\"\npath = \"\"\n");
        assert!(e.starts_with("/etc/x.toml: line 3: empty path"), "{e}");
        let e = err("# nothing\n");
        assert!(e.contains("no [[export]]"), "{e}");
        let e = err("[[export]]\nname = \"a\"\npath = \"a.img\"\nname = \"b\"\n");
        assert!(e.starts_with("/etc/x.toml: line 4: "), "{e}");
    }
}
