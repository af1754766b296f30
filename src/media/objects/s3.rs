//! S3Objects: the object-store trait on S3 (AWS, radosgw, SeaweedFS) through
//! the `object_store` crate. The crate is async; this client owns a small
//! tokio runtime (one worker thread for the connection tasks; each caller
//! drives its own request with `block_on`), so nothing above the media layer
//! sees async. Do not call it from inside a tokio runtime.
//!
//! Invariant: `put_new` is a conditional create (`PutMode::Create`, sent as
//! `If-None-Match: *`), never an overwrite. When the store says the object
//! exists, the object is read back: the same bytes mean this create already
//! landed (an answer lost and the request sent again), other bytes are
//! `ObjError::Exists`; a conflict with a create still in flight (409, or 412
//! and then nothing there) is asked again a few times.
//!
//! Credentials, region and endpoint come from `S3Options` (the command
//! line), else the usual AWS_* environment variables (AWS_ACCESS_KEY_ID,
//! AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION, AWS_ENDPOINT_URL,
//! ...), else the AWS shared config files (`awsfiles`: ~/.aws/credentials,
//! ~/.aws/config, profile AWS_PROFILE). Without any key, the client refuses
//! to start unless `anonymous` is set: it never falls back to probing an
//! instance metadata service.

use super::awsfiles::{self, AwsFiles, Settings};
use super::{check_name, check_range, ObjError, ObjectInfo, ObjectStore};
use futures_util::StreamExt;
use object_store::aws::{AmazonS3, AmazonS3Builder, AmazonS3ConfigKey};
use object_store::path::Path;
use object_store::{
    ClientOptions, ObjectStore as _, ObjectStoreExt as _, PutMode, PutOptions, PutPayload,
    RetryConfig,
};
use std::ops::Range;
use std::time::Duration;

/// How to reach an S3 store; every `None` falls back to the environment,
/// then to the AWS shared config files. (`Debug` hides the secrets.)
#[derive(Clone)]
pub struct S3Options {
    /// `http://127.0.0.1:8333` and the like (path-style requests); None: the
    /// AWS_ENDPOINT_URL / AWS_ENDPOINT variable, else AWS itself.
    pub endpoint: Option<String>,
    /// None: AWS_REGION / AWS_DEFAULT_REGION, else `us-east-1`.
    pub region: Option<String>,
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
    pub session_token: Option<String>,
    /// Send unsigned requests (a public or open store) instead of refusing
    /// when no credentials are found.
    pub anonymous: bool,
    /// The AWS shared config files to read; None: where the AWS CLI finds
    /// them (AWS_SHARED_CREDENTIALS_FILE, AWS_CONFIG_FILE, AWS_PROFILE,
    /// HOME). Each setting above that is None comes from the environment,
    /// else from these files.
    pub files: Option<AwsFiles>,
    /// Time limit of one request.
    pub request_timeout: Duration,
    /// Retries of a failed request (server errors, connection failures):
    /// at most this many, within `retry_timeout` of the first try.
    pub max_retries: usize,
    pub retry_timeout: Duration,
}

impl Default for S3Options {
    fn default() -> S3Options {
        S3Options {
            endpoint: None,
            region: None,
            access_key_id: None,
            secret_access_key: None,
            session_token: None,
            anonymous: false,
            files: None,
            request_timeout: Duration::from_secs(30),
            max_retries: 3,
            retry_timeout: Duration::from_secs(20),
        }
    }
}

impl S3Options {
    /// The settings given here (the command line's), first in precedence
    /// (`awsfiles::merge`).
    fn given(&self) -> Settings {
        Settings {
            access_key_id: self.access_key_id.clone(),
            secret_access_key: self.secret_access_key.clone(),
            session_token: self.session_token.clone(),
            region: self.region.clone(),
            endpoint: self.endpoint.clone(),
            source: "the command line".into(),
        }
    }
}

impl std::fmt::Debug for S3Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // the five settings through `Settings`' Debug, which hides secrets
        f.debug_struct("S3Options")
            .field("given", &self.given())
            .field("anonymous", &self.anonymous)
            .field("files", &self.files)
            .field("request_timeout", &self.request_timeout)
            .field("max_retries", &self.max_retries)
            .field("retry_timeout", &self.retry_timeout)
            .finish()
    }
}

pub struct S3Objects {
    store: AmazonS3,
    rt: tokio::runtime::Runtime,
    /// The PREFIX of `s3://BUCKET/PREFIX`, without slashes at either end.
    root: String,
    what: String,
}

/// Times `put_new` asks again after a conflict with a create in flight.
const CONFLICT_TRIES: usize = 4;

impl S3Objects {
    /// A client for `s3://bucket/prefix`. Makes no request.
    pub fn open(bucket: &str, prefix: &str, opts: &S3Options) -> Result<S3Objects, ObjError> {
        let prefix = prefix.trim_matches('/');
        if !prefix.is_empty() {
            check_name(prefix)?;
        }
        let env = |k: &str| std::env::var(k).ok();
        let files = match &opts.files {
            Some(f) => f.clone(),
            None => AwsFiles::from_env(&env),
        };
        let got = awsfiles::merge(
            &opts.given(),
            &awsfiles::env_settings(&env),
            &awsfiles::load(&files)?,
        );
        // The other AWS_* settings as `from_env` reads them; these five are
        // `got`'s, by the precedence above.
        let mut b = AmazonS3Builder::new().with_bucket_name(bucket);
        // (vars_os: `vars` panics on a variable that is not UTF-8)
        for (k, v) in std::env::vars_os() {
            let (Some(k), Some(v)) = (k.to_str(), v.to_str()) else {
                continue;
            };
            if !k.starts_with("AWS_") {
                continue;
            }
            if let Ok(key) = k.to_ascii_lowercase().parse::<AmazonS3ConfigKey>() {
                if !matches!(
                    key,
                    AmazonS3ConfigKey::AccessKeyId
                        | AmazonS3ConfigKey::SecretAccessKey
                        | AmazonS3ConfigKey::Token
                        | AmazonS3ConfigKey::Region
                        | AmazonS3ConfigKey::DefaultRegion
                        | AmazonS3ConfigKey::Endpoint
                ) {
                    b = b.with_config(key, v);
                }
            }
        }
        if let Some(e) = &got.endpoint {
            b = b.with_endpoint(e);
        }
        b = b.with_region(got.region.as_deref().unwrap_or("us-east-1"));
        if let Some(k) = &got.access_key_id {
            b = b.with_access_key_id(k);
        }
        if let Some(s) = &got.secret_access_key {
            b = b.with_secret_access_key(s);
        }
        if let Some(t) = &got.session_token {
            b = b.with_token(t);
        }
        let has_key = got.access_key_id.is_some() && got.secret_access_key.is_some();
        if opts.anonymous {
            b = b.with_skip_signature(true);
        } else if !has_key {
            return Err(ObjError::Invalid(match got.source.as_str() {
                "" => "no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, \
                       or put them in the AWS credentials file (~/.aws/credentials, \
                       AWS_SHARED_CREDENTIALS_FILE; profile AWS_PROFILE), or ask for \
                       anonymous access"
                    .into(),
                from => format!(
                    "no S3 credentials: {from} gives only one of the access key id and \
                     the secret access key"
                ),
            }));
        }
        let endpoint = b.get_config_value(&AmazonS3ConfigKey::Endpoint);
        let http = endpoint
            .as_deref()
            .is_some_and(|e| e.starts_with("http://"));
        let client = ClientOptions::new()
            .with_allow_http(http)
            .with_timeout(opts.request_timeout)
            .with_connect_timeout(Duration::from_secs(5));
        let retry = RetryConfig {
            max_retries: opts.max_retries,
            retry_timeout: opts.retry_timeout,
            ..RetryConfig::default()
        };
        let store = b
            .with_client_options(client)
            .with_retry(retry)
            .build()
            .map_err(|e| ObjError::Invalid(format!("s3://{bucket}: {e}")))?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("sluice-s3")
            .enable_all()
            .build()
            .map_err(|e| ObjError::Store(format!("tokio runtime: {e}")))?;
        let at = endpoint.unwrap_or_else(|| "AWS".into());
        let what = if prefix.is_empty() {
            format!("s3://{bucket} at {at}")
        } else {
            format!("s3://{bucket}/{prefix} at {at}")
        };
        if !got.source.is_empty() {
            tracing::info!("{what}: credentials from {}", got.source);
        }
        Ok(S3Objects {
            store,
            rt,
            root: prefix.to_string(),
            what,
        })
    }

    fn path(&self, name: &str) -> Result<Path, ObjError> {
        check_name(name)?;
        Ok(if self.root.is_empty() {
            Path::from(name)
        } else {
            Path::from(format!("{}/{name}", self.root))
        })
    }

    fn err(&self, name: &str, e: object_store::Error) -> ObjError {
        match e {
            object_store::Error::NotFound { .. } => ObjError::NotFound(name.to_string()),
            object_store::Error::AlreadyExists { .. } => ObjError::Exists(name.to_string()),
            e => ObjError::Store(format!("{name} on {}: {e}", self.what)),
        }
    }

    /// The name relative to the root of a listed path; None outside it.
    fn relative<'a>(&self, full: &'a str) -> Option<&'a str> {
        if self.root.is_empty() {
            Some(full)
        } else {
            full.strip_prefix(self.root.as_str())?.strip_prefix('/')
        }
    }
}

impl ObjectStore for S3Objects {
    fn put_new(&self, name: &str, bytes: &[u8]) -> Result<(), ObjError> {
        let path = self.path(name)?;
        for _ in 0..CONFLICT_TRIES {
            let opts = PutOptions {
                // MUTANT: put-new-overwrites s|PutMode::Create|PutMode::Overwrite|
                mode: PutMode::Create,
                ..PutOptions::default()
            };
            let payload = PutPayload::from(bytes.to_vec());
            match self.rt.block_on(self.store.put_opts(&path, payload, opts)) {
                Ok(_) => return Ok(()),
                Err(object_store::Error::AlreadyExists { .. }) => match self.get(name) {
                    // MUTANT: put-new-any-existing-is-ours s|Ok(there) if there == bytes =>|Ok(_) =>|
                    Ok(there) if there == bytes => return Ok(()),
                    Ok(_) => return Err(ObjError::Exists(name.to_string())),
                    // a conflicting create still in flight, or one deleted since
                    Err(ObjError::NotFound(_)) => std::thread::sleep(Duration::from_millis(20)),
                    Err(e) => return Err(e),
                },
                Err(e) => return Err(self.err(name, e)),
            }
        }
        Err(ObjError::Store(format!(
            "{name} on {}: the conditional create kept conflicting ({CONFLICT_TRIES} tries)",
            self.what
        )))
    }

    fn get_range(&self, name: &str, range: Range<u64>) -> Result<Vec<u8>, ObjError> {
        check_range(name, &range)?;
        let path = self.path(name)?;
        if range.is_empty() {
            return Ok(Vec::new());
        }
        let want = range.end - range.start;
        let short = |len: u64| ObjError::Short {
            name: name.to_string(),
            start: range.start,
            end: range.end,
            len,
        };
        match self.rt.block_on(self.store.get_range(&path, range.clone())) {
            // MUTANT: range-length-unchecked s|Ok(b) if b.len() as u64 == want =>|Ok(b) =>|
            Ok(b) if b.len() as u64 == want => Ok(b.to_vec()),
            Ok(b) => match self.head(name)? {
                len if range.end > len => Err(short(len)),
                len => Err(ObjError::Store(format!(
                    "{name} on {}: bytes {}..{} of a {len}-byte object came back as {} bytes",
                    self.what,
                    range.start,
                    range.end,
                    b.len()
                ))),
            },
            Err(object_store::Error::NotFound { .. }) => Err(ObjError::NotFound(name.to_string())),
            // a range the store refused (416) is a short object; any other
            // failure keeps its own message
            Err(e) => match self.head(name) {
                Ok(len) if range.end > len => Err(short(len)),
                _ => Err(self.err(name, e)),
            },
        }
    }

    fn get(&self, name: &str) -> Result<Vec<u8>, ObjError> {
        let path = self.path(name)?;
        self.rt
            .block_on(async {
                let r = self.store.get(&path).await?;
                r.bytes().await
            })
            .map(|b| b.to_vec())
            .map_err(|e| self.err(name, e))
    }

    fn head(&self, name: &str) -> Result<u64, ObjError> {
        let path = self.path(name)?;
        self.rt
            .block_on(self.store.head(&path))
            .map(|m| m.size)
            .map_err(|e| self.err(name, e))
    }

    fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>, ObjError> {
        // object_store lists by whole path parts: list the directory of the
        // prefix (all of it, page after page), keep what starts with it
        let dir = match prefix.rfind('/') {
            Some(i) => &prefix[..i],
            None => "",
        };
        let list_path = match (self.root.is_empty(), dir.is_empty()) {
            (true, true) => None,
            (true, false) => Some(self.path(dir)?),
            (false, true) => Some(Path::from(self.root.as_str())),
            (false, false) => Some(self.path(dir)?),
        };
        let mut out = Vec::new();
        self.rt.block_on(async {
            // MUTANT: list-first-page-only s|.list(list_path.as_ref());|.list(list_path.as_ref()).take(1000);|
            let mut s = self.store.list(list_path.as_ref());
            while let Some(m) = s.next().await {
                let m = m.map_err(|e| self.err(prefix, e))?;
                let full = m.location.as_ref();
                if let Some(rel) = self.relative(full) {
                    if rel.starts_with(prefix) {
                        out.push(ObjectInfo {
                            name: rel.to_string(),
                            len: m.size,
                        });
                    }
                }
            }
            Ok::<(), ObjError>(())
        })?;
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    fn delete(&self, name: &str) -> Result<(), ObjError> {
        let path = self.path(name)?;
        match self.rt.block_on(self.store.delete(&path)) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.err(name, e)),
        }
    }

    fn describe(&self) -> String {
        self.what.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_credentials_is_refused_unless_anonymous() {
        // the refusal needs an environment without keys (CI has none)
        let no_files = S3Options {
            files: Some(AwsFiles::default()),
            ..S3Options::default()
        };
        if std::env::var_os("AWS_ACCESS_KEY_ID").is_none() {
            let e = S3Objects::open("vols", "p", &no_files).err();
            assert!(matches!(e, Some(ObjError::Invalid(m)) if m.contains("no S3 credentials")));
        }
        let anon = S3Options {
            anonymous: true,
            endpoint: Some("http://127.0.0.1:9".into()),
            ..S3Options::default()
        };
        let s = S3Objects::open("vols", "p/", &anon).unwrap();
        assert_eq!(s.describe(), "s3://vols/p at http://127.0.0.1:9");
        assert_eq!(s.relative("p/seg/1"), Some("seg/1"));
        assert_eq!(s.relative("px/seg/1"), None);
        assert!(s.path("a//b").is_err());
    }

    /// Credentials and endpoint from the files alone (this process's
    /// environment has none of its own: checked), and the command line's
    /// endpoint over the file's.
    #[test]
    fn the_files_serve_what_the_command_line_and_environment_do_not_give() {
        let env_has = |k: &str| std::env::var_os(k).is_some_and(|v| !v.is_empty());
        if [
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_ENDPOINT_URL",
            "AWS_ENDPOINT",
        ]
        .iter()
        .any(|k| env_has(k))
        {
            eprintln!("SKIP: AWS_* set in this environment");
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let creds = d.path().join("credentials");
        let conf = d.path().join("config");
        std::fs::write(
            &creds,
            "[t]\naws_access_key_id = K\naws_secret_access_key = S3CRET\n",
        )
        .unwrap();
        std::fs::write(&conf, "[profile t]\nendpoint_url = http://127.0.0.1:7\n").unwrap();
        let files = AwsFiles {
            credentials: Some(creds.clone()),
            config: Some(conf),
            profile: Some("t".into()),
        };
        let o = S3Options {
            files: Some(files.clone()),
            ..S3Options::default()
        };
        let s = S3Objects::open("vols", "p", &o).unwrap();
        assert_eq!(s.describe(), "s3://vols/p at http://127.0.0.1:7");
        let o2 = S3Options {
            endpoint: Some("http://127.0.0.1:9".into()),
            ..o.clone()
        };
        let s = S3Objects::open("vols", "p", &o2).unwrap();
        assert_eq!(s.describe(), "s3://vols/p at http://127.0.0.1:9");
        // only the key in the file: refused, naming the profile, not the key
        std::fs::write(&creds, "[t]\naws_access_key_id = K\n").unwrap();
        let e = S3Objects::open("vols", "p", &o).err().unwrap().to_string();
        assert!(
            e.contains("profile t of") && e.contains("only one of"),
            "{e}"
        );
        assert!(!format!("{o:?}").contains("S3CRET"));
        let o3 = S3Options {
            secret_access_key: Some("S3CRET".into()),
            ..o
        };
        assert!(!format!("{o3:?}").contains("S3CRET"));
    }
}
