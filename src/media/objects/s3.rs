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
//! Credentials come from `S3Options` or else the usual AWS_* environment
//! variables (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN,
//! AWS_REGION, AWS_ENDPOINT_URL, ...). Without any, the client refuses to
//! start unless `anonymous` is set: it never falls back to probing an
//! instance metadata service.

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

/// How to reach an S3 store; every `None` falls back to the environment.
#[derive(Debug, Clone)]
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
            request_timeout: Duration::from_secs(30),
            max_retries: 3,
            retry_timeout: Duration::from_secs(20),
        }
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
        let mut b = AmazonS3Builder::from_env().with_bucket_name(bucket);
        if let Some(e) = &opts.endpoint {
            b = b.with_endpoint(e);
        }
        if let Some(r) = &opts.region {
            b = b.with_region(r);
        } else if b.get_config_value(&AmazonS3ConfigKey::Region).is_none() {
            let r = std::env::var("AWS_DEFAULT_REGION").unwrap_or_else(|_| "us-east-1".into());
            b = b.with_region(r);
        }
        if let Some(k) = &opts.access_key_id {
            b = b.with_access_key_id(k);
        }
        if let Some(s) = &opts.secret_access_key {
            b = b.with_secret_access_key(s);
        }
        if let Some(t) = &opts.session_token {
            b = b.with_token(t);
        }
        let has_key = b
            .get_config_value(&AmazonS3ConfigKey::AccessKeyId)
            .is_some()
            && b.get_config_value(&AmazonS3ConfigKey::SecretAccessKey)
                .is_some();
        if opts.anonymous {
            b = b.with_skip_signature(true);
        } else if !has_key {
            return Err(ObjError::Invalid(
                "no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY \
                 (or pass them, or ask for anonymous access)"
                    .into(),
            ));
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
        if std::env::var_os("AWS_ACCESS_KEY_ID").is_none() {
            let e = S3Objects::open("vols", "p", &S3Options::default()).err();
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
}
