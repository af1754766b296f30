//! Object stores: the IO a log-structured volume needs from S3 or RADOS, as a
//! small synchronous trait (issue 21; docs/objects.md). Names are relative to
//! the store's root (`s3://BUCKET/PREFIX`: PREFIX is the root), `/`-separated,
//! and chosen by the layer above (`format::objname`).
//!
//! Invariant every implementation keeps: an object is written once.
//! `put_new` never replaces an existing object: it creates the object, or
//! reports `ObjError::Exists` and leaves what is there untouched. A `put_new`
//! that returned Ok is durable in the store (the store's own promise for an
//! acknowledged PUT); nothing is promised for one that returned an error.
//!
//! `MemObjects` serves unit tests of the logic above; durability is tested
//! only against a real server (tests/objects_s3.rs).

pub mod awsfiles;
mod memory;
#[cfg(feature = "rados")]
mod rados;
mod s3;

pub use memory::MemObjects;
#[cfg(feature = "rados")]
pub use rados::{RadosObjects, RadosOptions};
pub use s3::{S3Objects, S3Options};

use std::io;
use std::ops::Range;

/// Why an object operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ObjError {
    /// `put_new` found an object of that name with other content.
    #[error("object {0} already exists")]
    Exists(String),
    #[error("object {0} not found")]
    NotFound(String),
    /// A ranged read asked for bytes past the object's end.
    #[error("object {name}: bytes {start}..{end} asked, the object has {len}")]
    Short {
        name: String,
        start: u64,
        end: u64,
        len: u64,
    },
    /// The caller passed something no store accepts (a bad name or range).
    #[error("{0}")]
    Invalid(String),
    /// The store or the way to it failed (network, server error, timeout).
    #[error("object store: {0}")]
    Store(String),
}

impl From<ObjError> for io::Error {
    fn from(e: ObjError) -> io::Error {
        let kind = match &e {
            ObjError::Exists(_) => io::ErrorKind::AlreadyExists,
            ObjError::NotFound(_) => io::ErrorKind::NotFound,
            ObjError::Short { .. } => io::ErrorKind::UnexpectedEof,
            ObjError::Invalid(_) => io::ErrorKind::InvalidInput,
            ObjError::Store(_) => io::ErrorKind::Other,
        };
        io::Error::new(kind, e)
    }
}

/// One listed object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectInfo {
    /// Relative to the store's root.
    pub name: String,
    pub len: u64,
}

/// What a log-structured volume needs from an object store. Every call
/// blocks until the store answered; all are safe from many threads.
pub trait ObjectStore: Send + Sync {
    /// Create `name` with `bytes`, only if no object of that name exists.
    /// An existing object with the same bytes is Ok (a create whose answer was
    /// lost and which was sent again is the same create); one with other
    /// bytes is `ObjError::Exists` and is left as it is.
    fn put_new(&self, name: &str, bytes: &[u8]) -> Result<(), ObjError>;
    /// Exactly the bytes `range` of `name`; `ObjError::Short` if the object
    /// ends before `range.end`. An empty range reads nothing and asks the
    /// store nothing.
    fn get_range(&self, name: &str, range: Range<u64>) -> Result<Vec<u8>, ObjError>;
    /// The whole object.
    fn get(&self, name: &str) -> Result<Vec<u8>, ObjError>;
    /// The object's length.
    fn head(&self, name: &str) -> Result<u64, ObjError>;
    /// Every object whose name starts with `prefix` (a plain string prefix),
    /// sorted by name (byte order), however many there are.
    fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>, ObjError>;
    /// Remove `name`; Ok also when it did not exist (deletes are retried).
    fn delete(&self, name: &str) -> Result<(), ObjError>;
    /// Where this store is, for messages (`s3://bucket/prefix at endpoint`).
    fn describe(&self) -> String;
}

/// Check a relative object name: non-empty `/`-separated parts of
/// `A-Z a-z 0-9 . _ -`, none `.` or `..`, at most 512 bytes. Both stores
/// apply it, so a name the memory store takes the real one takes too, and
/// no name needs escaping on the way (S3 lists a name as it was put).
pub fn check_name(name: &str) -> Result<(), ObjError> {
    let bad = |why: &str| Err(ObjError::Invalid(format!("object name {name:?}: {why}")));
    if name.is_empty() || name.len() > 512 {
        return bad("empty or longer than 512 bytes");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"._-/".contains(&b))
    {
        return bad("only A-Z, a-z, 0-9, '.', '_', '-' and '/'");
    }
    for part in name.split('/') {
        if part.is_empty() || part == "." || part == ".." {
            return bad("empty, '.' or '..' part");
        }
    }
    Ok(())
}

/// Check that `store` really creates conditionally (a store or proxy that
/// ignores `If-None-Match` would overwrite, silently breaking write-once):
/// create `name` with random bytes, create it again with other bytes, expect
/// `Exists` and the first bytes, delete it. Run once before writing a volume;
/// `name` must be the caller's own (e.g. carry its epoch).
pub fn verify_write_once(store: &dyn ObjectStore, name: &str) -> Result<(), ObjError> {
    let first: [u8; 16] = rand::random();
    let mut second = first;
    second[0] ^= 1;
    store.put_new(name, &first)?;
    let again = store.put_new(name, &second);
    let back = store.get(name);
    let _ = store.delete(name);
    match again {
        Err(ObjError::Exists(_)) => {}
        Ok(()) => {
            return Err(ObjError::Invalid(format!(
                "{}: a second create of {name} was accepted: this store does not \
                 honour conditional creates (If-None-Match), so it cannot hold a volume",
                store.describe()
            )))
        }
        Err(e) => return Err(e),
    }
    if back? != first {
        return Err(ObjError::Invalid(format!(
            "{}: {name} changed under a refused create",
            store.describe()
        )));
    }
    Ok(())
}

/// Check a range before asking a store.
pub(crate) fn check_range(name: &str, range: &Range<u64>) -> Result<(), ObjError> {
    if range.start > range.end {
        return Err(ObjError::Invalid(format!(
            "object {name}: range {}..{} runs backwards",
            range.start, range.end
        )));
    }
    Ok(())
}

/// An object-store location as users write it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// `s3://BUCKET/PREFIX` (PREFIX may be empty).
    S3 { bucket: String, prefix: String },
    /// `rados://POOL/PREFIX` (PREFIX may be empty): a Ceph pool, reached
    /// through librados (builds with the cargo feature `rados`).
    Rados { pool: String, prefix: String },
}

impl Location {
    /// Parse `s3://BUCKET/PREFIX`. The bucket follows S3's rules for names
    /// (3-63 of `a-z0-9.-`, starting and ending with a letter or digit); the
    /// prefix, if any, must be a valid object name (`check_name`); a trailing
    /// `/` is dropped.
    ///
    /// `rados://POOL/PREFIX`: the pool is 1-63 of `A-Za-z0-9._-` (Ceph takes
    /// more; these need no quoting anywhere), the prefix as for S3.
    pub fn parse(s: &str) -> Result<Location, ObjError> {
        let bad = |why: &str| Err(ObjError::Invalid(format!("location {s:?}: {why}")));
        let split = |rest: &'_ str| -> (String, String) {
            match rest.split_once('/') {
                Some((b, p)) => (b.to_string(), p.trim_end_matches('/').to_string()),
                None => (rest.to_string(), String::new()),
            }
        };
        if let Some(rest) = s.strip_prefix("rados://") {
            let (pool, prefix) = split(rest);
            let ok_pool = (1..=63).contains(&pool.len())
                && pool
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
            if !ok_pool {
                return bad("the pool is 1-63 of A-Z, a-z, 0-9, '.', '_', '-'");
            }
            if !prefix.is_empty() {
                check_name(&prefix)?;
            }
            return Ok(Location::Rados { pool, prefix });
        }
        let Some(rest) = s.strip_prefix("s3://") else {
            return bad("expected s3://BUCKET/PREFIX or rados://POOL/PREFIX");
        };
        let (bucket, prefix) = split(rest);
        let (bucket, prefix) = (bucket.as_str(), prefix.as_str());
        let ok_bucket = (3..=63).contains(&bucket.len())
            && bucket
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
            && bucket.as_bytes()[0].is_ascii_alphanumeric()
            && bucket.as_bytes()[bucket.len() - 1].is_ascii_alphanumeric();
        if !ok_bucket {
            return bad("the bucket is 3-63 of a-z, 0-9, '.', '-'");
        }
        if !prefix.is_empty() {
            check_name(prefix)?;
        }
        Ok(Location::S3 {
            bucket: bucket.to_string(),
            prefix: prefix.to_string(),
        })
    }
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::S3 { bucket, prefix } if prefix.is_empty() => write!(f, "s3://{bucket}"),
            Location::S3 { bucket, prefix } => write!(f, "s3://{bucket}/{prefix}"),
            Location::Rados { pool, prefix } if prefix.is_empty() => write!(f, "rados://{pool}"),
            Location::Rados { pool, prefix } => write!(f, "rados://{pool}/{prefix}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_parse_and_print_back() {
        for (s, bucket, prefix, back) in [
            ("s3://vols/a/b", "vols", "a/b", "s3://vols/a/b"),
            ("s3://vols/a/b/", "vols", "a/b", "s3://vols/a/b"),
            ("s3://vols", "vols", "", "s3://vols"),
            ("s3://my.bucket-1/", "my.bucket-1", "", "s3://my.bucket-1"),
        ] {
            let l = Location::parse(s).unwrap();
            assert_eq!(
                l,
                Location::S3 {
                    bucket: bucket.into(),
                    prefix: prefix.into()
                }
            );
            assert_eq!(l.to_string(), back);
        }
        for (s, pool, prefix, back) in [
            (
                "rados://sluice/vols/a",
                "sluice",
                "vols/a",
                "rados://sluice/vols/a",
            ),
            ("rados://Pool_1.x/", "Pool_1.x", "", "rados://Pool_1.x"),
            ("rados://p", "p", "", "rados://p"),
        ] {
            let l = Location::parse(s).unwrap();
            assert_eq!(
                l,
                Location::Rados {
                    pool: pool.into(),
                    prefix: prefix.into()
                }
            );
            assert_eq!(l.to_string(), back);
        }
    }

    #[test]
    fn bad_locations_are_errors() {
        for s in [
            "",
            "s3:/vols",
            "rados://",
            "rados:///x",
            "rados://po ol/x",
            "rados://pool/a//b",
            "rados://pool/../b",
            "s3://",
            "s3://ab",
            "s3://Vols/x",
            "s3://-vols/x",
            "s3://vols-/x",
            "s3://vols/a//b",
            "s3://vols/a/../b",
            "s3://vols/a b",
            "file:///tmp/x",
        ] {
            assert!(
                matches!(Location::parse(s), Err(ObjError::Invalid(_))),
                "{s:?} accepted"
            );
        }
    }

    /// A store that overwrites on create (If-None-Match ignored).
    struct Overwrites(MemObjects);

    impl ObjectStore for Overwrites {
        fn put_new(&self, name: &str, bytes: &[u8]) -> Result<(), ObjError> {
            self.0.delete(name)?;
            self.0.put_new(name, bytes)
        }
        fn get_range(&self, n: &str, r: Range<u64>) -> Result<Vec<u8>, ObjError> {
            self.0.get_range(n, r)
        }
        fn get(&self, n: &str) -> Result<Vec<u8>, ObjError> {
            self.0.get(n)
        }
        fn head(&self, n: &str) -> Result<u64, ObjError> {
            self.0.head(n)
        }
        fn list(&self, p: &str) -> Result<Vec<ObjectInfo>, ObjError> {
            self.0.list(p)
        }
        fn delete(&self, n: &str) -> Result<(), ObjError> {
            self.0.delete(n)
        }
        fn describe(&self) -> String {
            "overwriting store".into()
        }
    }

    #[test]
    fn write_once_is_verified_and_an_overwriting_store_is_refused() {
        let m = MemObjects::new();
        verify_write_once(&m, "probe/1").unwrap();
        assert!(m.list("").unwrap().is_empty(), "the probe is deleted");
        let o = Overwrites(MemObjects::new());
        let e = verify_write_once(&o, "probe/1").unwrap_err();
        assert!(
            e.to_string()
                .contains("does not honour conditional creates"),
            "{e}"
        );
        assert!(o.list("").unwrap().is_empty(), "the probe is deleted");
    }

    #[test]
    fn names_are_checked() {
        for ok in [
            "a",
            "seg/00000000000000000001-00000000000000000001",
            "x.y/z-1",
        ] {
            check_name(ok).unwrap();
        }
        for bad in [
            "", "/a", "a/", "a//b", "./a", "a/..", "a b", "a\\b", "é", "a%2F", "a*", "a+b",
        ] {
            assert!(check_name(bad).is_err(), "{bad:?} accepted");
        }
        assert!(check_name(&"a".repeat(513)).is_err());
        let backwards = Range { start: 5, end: 4 };
        assert!(check_range("x", &backwards).is_err());
    }
}
