//! The AWS shared config files, read the way the AWS CLI and SDKs read them:
//! `AWS_SHARED_CREDENTIALS_FILE` (default `~/.aws/credentials`, sections
//! `[NAME]`) and `AWS_CONFIG_FILE` (default `~/.aws/config`, sections
//! `[default]` and `[profile NAME]`), the profile named by `AWS_PROFILE`
//! (default `default`). Keys: `aws_access_key_id`, `aws_secret_access_key`,
//! `aws_session_token`, `region`, `endpoint_url`; others are ignored.
//!
//! Invariants: a missing file is no error; an unreadable or malformed one is
//! an error naming the file (and the line); a profile named by `AWS_PROFILE`
//! that neither file has is an error naming it. No error, and no `Debug`,
//! ever shows a value: a line of a credentials file may hold a secret.
//! Credentials are a set: key, secret and token come from one source (the
//! credentials file's profile, else the config file's), never mixed.
//! `merge` keeps the precedence: command line, then environment, then files.

use super::ObjError;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// Where the files are and which profile to read: from the environment
/// (`from_env`) or given (tests).
#[derive(Debug, Clone, Default)]
pub struct AwsFiles {
    pub credentials: Option<PathBuf>,
    pub config: Option<PathBuf>,
    /// None: `default`, and its absence is no error.
    pub profile: Option<String>,
}

impl AwsFiles {
    /// As the AWS CLI finds them: the variables, else `$HOME/.aws/...`.
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> AwsFiles {
        let home = env("HOME").filter(|h| !h.is_empty());
        let file = |var: &str, default: &str| match env(var).filter(|v| !v.is_empty()) {
            Some(p) => Some(expand_home(&p, home.as_deref())),
            None => home.as_ref().map(|h| Path::new(h).join(default)),
        };
        AwsFiles {
            credentials: file("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials"),
            config: file("AWS_CONFIG_FILE", ".aws/config"),
            profile: env("AWS_PROFILE").filter(|p| !p.is_empty()),
        }
    }
}

fn expand_home(p: &str, home: Option<&str>) -> PathBuf {
    match (p.strip_prefix("~/"), home) {
        (Some(rest), Some(h)) => Path::new(h).join(rest),
        _ => PathBuf::from(p),
    }
}

/// One source's settings (the command line, the environment or a profile).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Settings {
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
    pub session_token: Option<String>,
    pub region: Option<String>,
    pub endpoint: Option<String>,
    /// Where these came from, for messages (`profile dev of FILE`).
    pub source: String,
}

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hidden = |v: &Option<String>| v.as_ref().map(|_| "<hidden>");
        f.debug_struct("Settings")
            .field("access_key_id", &hidden(&self.access_key_id))
            .field("secret_access_key", &hidden(&self.secret_access_key))
            .field("session_token", &hidden(&self.session_token))
            .field("region", &self.region)
            .field("endpoint", &self.endpoint)
            .field("source", &self.source)
            .finish()
    }
}

impl Settings {
    fn has_credentials(&self) -> bool {
        self.access_key_id.is_some() || self.secret_access_key.is_some()
    }
}

/// The settings to use: each of region and endpoint from the first source
/// that has it; the credentials (key, secret, token together) from the
/// first source that has a key or a secret. `source` says where the
/// credentials came from ("" when none did).
pub fn merge(cli: &Settings, env: &Settings, files: &Settings) -> Settings {
    // MUTANT: aws-files-over-env s|[cli, env, files]|[cli, files, env]|
    let order = [cli, env, files];
    let first =
        |get: &dyn Fn(&Settings) -> &Option<String>| order.iter().find_map(|s| get(s).clone());
    let creds = order.iter().find(|s| s.has_credentials());
    Settings {
        access_key_id: creds.and_then(|s| s.access_key_id.clone()),
        secret_access_key: creds.and_then(|s| s.secret_access_key.clone()),
        session_token: creds.and_then(|s| s.session_token.clone()),
        region: first(&|s| &s.region),
        endpoint: first(&|s| &s.endpoint),
        source: creds.map(|s| s.source.clone()).unwrap_or_default(),
    }
}

/// The environment's settings: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
/// AWS_SESSION_TOKEN (else AWS_TOKEN), AWS_REGION (else AWS_DEFAULT_REGION), AWS_ENDPOINT_URL
/// (else AWS_ENDPOINT). Empty values count as unset.
pub fn env_settings(env: &dyn Fn(&str) -> Option<String>) -> Settings {
    let get = |k: &str| env(k).filter(|v| !v.is_empty());
    Settings {
        access_key_id: get("AWS_ACCESS_KEY_ID"),
        secret_access_key: get("AWS_SECRET_ACCESS_KEY"),
        session_token: get("AWS_SESSION_TOKEN").or_else(|| get("AWS_TOKEN")),
        region: get("AWS_REGION").or_else(|| get("AWS_DEFAULT_REGION")),
        endpoint: get("AWS_ENDPOINT_URL").or_else(|| get("AWS_ENDPOINT")),
        source: "the environment".into(),
    }
}

/// One parsed file: section name -> key -> value (keys lower-cased).
type Sections = BTreeMap<String, BTreeMap<String, String>>;

/// The profile's settings from both files. Credentials from the credentials
/// file's profile if it has any, else from the config file's.
pub fn load(files: &AwsFiles) -> Result<Settings, ObjError> {
    let name = files.profile.as_deref().unwrap_or("default");
    let creds = read(files.credentials.as_deref())?;
    let conf = read(files.config.as_deref())?;
    let in_creds = creds.as_ref().and_then(|(_, s)| s.get(name));
    // the config file names profiles `[profile NAME]`, except `[default]`
    let in_conf = conf.as_ref().and_then(|(_, s)| {
        s.get(&format!("profile {name}"))
            .or_else(|| (name == "default").then(|| s.get("default")).flatten())
    });
    if in_creds.is_none() && in_conf.is_none() {
        // MUTANT: aws-profile-missing-ignored s|files.profile.is_some()|false|
        if files.profile.is_some() {
            let looked: Vec<String> = [&files.credentials, &files.config]
                .into_iter()
                .flatten()
                .map(|p| p.display().to_string())
                .collect();
            return Err(ObjError::Invalid(format!(
                "AWS profile {name:?} not found (looked in {})",
                if looked.is_empty() {
                    "no file: HOME is not set".into()
                } else {
                    looked.join(" and ")
                }
            )));
        }
        return Ok(Settings::default());
    }
    let key = |sec: Option<&BTreeMap<String, String>>, k: &str| {
        sec.and_then(|s| s.get(k))
            .filter(|v| !v.is_empty())
            .cloned()
    };
    let has = |sec| {
        key(sec, "aws_access_key_id").is_some() || key(sec, "aws_secret_access_key").is_some()
    };
    let (csec, cpath) = if has(in_creds) {
        (in_creds, creds.as_ref().map(|(p, _)| p))
    } else if has(in_conf) {
        (in_conf, conf.as_ref().map(|(p, _)| p))
    } else {
        (None, None)
    };
    Ok(Settings {
        access_key_id: key(csec, "aws_access_key_id"),
        secret_access_key: key(csec, "aws_secret_access_key"),
        session_token: key(csec, "aws_session_token"),
        region: key(in_conf, "region").or_else(|| key(in_creds, "region")),
        endpoint: key(in_conf, "endpoint_url").or_else(|| key(in_creds, "endpoint_url")),
        source: match cpath {
            Some(p) => format!("profile {name} of {}", p.display()),
            None => String::new(),
        },
    })
}

/// A file's sections, or None when there is no such file.
fn read(path: Option<&Path>) -> Result<Option<(PathBuf, Sections)>, ObjError> {
    let Some(path) = path else { return Ok(None) };
    let text = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(ObjError::Invalid(format!(
                "{}: cannot read: {e}",
                path.display()
            )))
        }
    };
    let text = String::from_utf8(text)
        .map_err(|_| ObjError::Invalid(format!("{}: not UTF-8 text", path.display())))?;
    // (a byte-order mark, as some Windows editors write, is not a line)
    let sections =
        parse(text.strip_prefix('\u{feff}').unwrap_or(&text)).map_err(|(line, why)| {
            ObjError::Invalid(format!("{}: line {line}: {why}", path.display()))
        })?;
    Ok(Some((path.to_path_buf(), sections)))
}

/// The INI dialect of the AWS files: `[section]`, `key = value` (or
/// `key: value`), comments on their own line starting `#` or `;`, blank
/// lines. An indented line after a key is a nested setting (`s3 =` followed
/// by `  max_concurrent_requests = 4`): skipped. A later key of the same name
/// wins; a section named twice is one section. Errors: (line, why), never
/// the line's text.
fn parse(text: &str) -> Result<Sections, (usize, &'static str)> {
    let mut out = Sections::new();
    let mut section: Option<String> = None;
    let mut after_key = false;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if after_key && raw.starts_with([' ', '\t']) {
            continue; // nested under the key above
        }
        if let Some(rest) = line.strip_prefix('[') {
            let Some(name) = rest.strip_suffix(']') else {
                return Err((i + 1, "a section header without its closing `]`"));
            };
            let name = name.split_whitespace().collect::<Vec<_>>().join(" ");
            if name.is_empty() {
                return Err((i + 1, "an empty section name"));
            }
            out.entry(name.clone()).or_default();
            section = Some(name);
            after_key = false;
            continue;
        }
        let Some(at) = line.find(['=', ':']) else {
            return Err((i + 1, "expected `[section]`, `key = value` or a comment"));
        };
        let (k, v) = (line[..at].trim(), line[at + 1..].trim());
        if k.is_empty() {
            return Err((i + 1, "a value without a key"));
        }
        let Some(s) = &section else {
            return Err((i + 1, "a setting before any `[section]`"));
        };
        out.get_mut(s)
            .expect("entered above")
            .insert(k.to_ascii_lowercase(), v.to_string());
        after_key = true;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(key: Option<&str>, secret: Option<&str>, region: Option<&str>, src: &str) -> Settings {
        Settings {
            access_key_id: key.map(Into::into),
            secret_access_key: secret.map(Into::into),
            session_token: None,
            region: region.map(Into::into),
            endpoint: None,
            source: src.into(),
        }
    }

    #[test]
    fn parse_reads_sections_keys_comments_and_nested_settings() {
        let t = "# top comment\n\n[default]\naws_access_key_id = AK\n\
                 Aws_Secret_Access_Key=SK  \n; another\n[profile  dev]\nregion: eu-west-1\n\
                 s3 =\n  endpoint_url = http://nested\n  max_concurrent_requests = 4\n\
                 endpoint_url = http://x:1\n[default]\naws_session_token = T\n";
        let p = parse(t).unwrap();
        assert_eq!(p.len(), 2);
        let d = &p["default"];
        assert_eq!(d["aws_access_key_id"], "AK");
        assert_eq!(d["aws_secret_access_key"], "SK");
        assert_eq!(d["aws_session_token"], "T");
        let dev = &p["profile dev"];
        assert_eq!(dev["region"], "eu-west-1");
        assert_eq!(dev["endpoint_url"], "http://x:1", "a nested key leaked");
        assert_eq!(dev["s3"], "");
        assert_eq!(dev.len(), 3);
    }

    #[test]
    fn parse_errors_name_the_line_and_never_its_text() {
        for (t, line) in [
            ("[default]\naws_secret_access_key SECRET\n", 2),
            ("aws_secret_access_key = SECRET\n[default]\n", 1),
            ("[default\naws_secret_access_key = SECRET\n", 1),
            ("[default]\n\n\n= SECRET\n", 4),
            ("[]\n", 1),
        ] {
            let (l, why) = parse(t).unwrap_err();
            assert_eq!(l, line, "{t:?}");
            assert!(!why.contains("SECRET"));
        }
    }

    #[test]
    fn merge_takes_command_line_then_environment_then_files_and_credentials_as_a_set() {
        let cli = s(None, None, Some("cli-r"), "the command line");
        let env = s(Some("EK"), None, None, "the environment");
        let mut files = s(
            Some("FK"),
            Some("FS"),
            Some("file-r"),
            "profile default of F",
        );
        files.session_token = Some("FT".into());
        files.endpoint = Some("http://file".into());
        let m = merge(&cli, &env, &files);
        assert_eq!(m.region.as_deref(), Some("cli-r"));
        assert_eq!(m.endpoint.as_deref(), Some("http://file"));
        // the environment has a key: its set wins, even half; no file secret or token
        assert_eq!(m.access_key_id.as_deref(), Some("EK"));
        assert_eq!(m.secret_access_key, None);
        assert_eq!(m.session_token, None);
        assert_eq!(m.source, "the environment");
        // nothing on the command line or in the environment: all from the files
        let none = Settings::default();
        let m = merge(&none, &none, &files);
        assert_eq!(
            m,
            Settings {
                source: files.source.clone(),
                ..files.clone()
            }
        );
        // the command line's key beats both
        let cli = s(Some("CK"), Some("CS"), None, "the command line");
        let m = merge(&cli, &env, &files);
        assert_eq!(
            (m.access_key_id.as_deref(), m.secret_access_key.as_deref()),
            (Some("CK"), Some("CS"))
        );
        assert_eq!(m.region.as_deref(), Some("file-r"));
        // no source has any: none, and no source named
        let m = merge(&none, &none, &none);
        assert_eq!(m, Settings::default());
    }

    #[test]
    fn debug_hides_every_secret() {
        let mut x = s(Some("AKID"), Some("SECRET"), Some("r"), "src");
        x.session_token = Some("TOKEN".into());
        let d = format!("{x:?}");
        for v in ["AKID", "SECRET", "TOKEN"] {
            assert!(!d.contains(v), "{d}");
        }
    }

    fn files(
        dir: &Path,
        creds: Option<&str>,
        conf: Option<&str>,
        profile: Option<&str>,
    ) -> AwsFiles {
        let c = dir.join("credentials");
        let f = dir.join("config");
        let _ = std::fs::remove_file(&c);
        let _ = std::fs::remove_file(&f);
        if let Some(t) = creds {
            std::fs::write(&c, t).unwrap();
        }
        if let Some(t) = conf {
            std::fs::write(&f, t).unwrap();
        }
        AwsFiles {
            credentials: Some(c),
            config: Some(f),
            profile: profile.map(Into::into),
        }
    }

    #[test]
    fn load_reads_the_profile_from_both_files() {
        let d = tempfile::tempdir().unwrap();
        let creds = "[default]\naws_access_key_id = DK\naws_secret_access_key = DS\n\
                     [dev]\naws_access_key_id = K\naws_secret_access_key = S\naws_session_token = T\n";
        let conf =
            "[default]\nregion = r0\n[profile dev]\nregion = r1\nendpoint_url = http://e:1\n\
                    [dev]\nregion = not-this\n";
        let p = load(&files(d.path(), Some(creds), Some(conf), Some("dev"))).unwrap();
        assert_eq!(p.access_key_id.as_deref(), Some("K"));
        assert_eq!(p.secret_access_key.as_deref(), Some("S"));
        assert_eq!(p.session_token.as_deref(), Some("T"));
        assert_eq!(p.region.as_deref(), Some("r1"));
        assert_eq!(p.endpoint.as_deref(), Some("http://e:1"));
        assert!(p.source.starts_with("profile dev of ") && p.source.ends_with("credentials"));
        let p = load(&files(d.path(), Some(creds), Some(conf), None)).unwrap();
        assert_eq!(p.access_key_id.as_deref(), Some("DK"));
        assert_eq!(p.region.as_deref(), Some("r0"));
        // keys in the config file serve when the credentials file has none
        let conf2 = "[profile dev]\naws_access_key_id = CK\naws_secret_access_key = CS\n";
        let p = load(&files(d.path(), None, Some(conf2), Some("dev"))).unwrap();
        assert_eq!(p.access_key_id.as_deref(), Some("CK"));
        assert!(p.source.ends_with("config"), "{}", p.source);
        // no files: nothing, and no error for the default profile
        assert_eq!(
            load(&files(d.path(), None, None, None)).unwrap(),
            Settings::default()
        );
    }

    #[test]
    fn load_errors_name_the_missing_profile_or_the_bad_file_and_line() {
        let d = tempfile::tempdir().unwrap();
        let e = load(&files(d.path(), Some("[default]\n"), None, Some("nope"))).unwrap_err();
        let e = e.to_string();
        assert!(
            e.contains("\"nope\" not found") && e.contains("credentials"),
            "{e}"
        );
        let bad = "[default]\naws_access_key_id = K\naws_secret_access_key SECRETVALUE\n";
        let e = load(&files(d.path(), Some(bad), None, None))
            .unwrap_err()
            .to_string();
        assert!(e.contains("credentials: line 3:"), "{e}");
        assert!(!e.contains("SECRETVALUE"), "{e}");
        // unreadable: a directory where the file should be
        let f = AwsFiles {
            credentials: Some(d.path().to_path_buf()),
            config: None,
            profile: None,
        };
        let e = load(&f).unwrap_err().to_string();
        assert!(e.contains("cannot read"), "{e}");
    }

    #[test]
    fn from_env_finds_the_files_as_the_cli_does() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                vars.iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let f = AwsFiles::from_env(&env(&[("HOME", "/h")]));
        assert_eq!(f.credentials, Some(PathBuf::from("/h/.aws/credentials")));
        assert_eq!(f.config, Some(PathBuf::from("/h/.aws/config")));
        assert_eq!(f.profile, None);
        let f = AwsFiles::from_env(&env(&[
            ("HOME", "/h"),
            ("AWS_SHARED_CREDENTIALS_FILE", "~/c"),
            ("AWS_CONFIG_FILE", "/etc/x"),
            ("AWS_PROFILE", "p"),
        ]));
        assert_eq!(f.credentials, Some(PathBuf::from("/h/c")));
        assert_eq!(f.config, Some(PathBuf::from("/etc/x")));
        assert_eq!(f.profile.as_deref(), Some("p"));
        let f = AwsFiles::from_env(&env(&[]));
        assert_eq!((f.credentials, f.config), (None, None));
    }
}
