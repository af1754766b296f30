//! RADOS objects: `ObjectStore` on a Ceph pool through librados (issue 21),
//! behind the cargo feature `rados` (it links Debian's `librados-dev`).
//!
//! Owns one cluster handle and one IO context on one pool; every object name
//! is `PREFIX/name` in the pool's default namespace. librados' IO context is
//! safe to use from many threads as long as nobody changes its settings
//! (namespace, locator key, snapshot) after creation, and nothing here does.
//!
//! Invariant (the trait's): `put_new` is one librados write operation made of
//! an *exclusive create* and a full write, so the OSD applies both or
//! neither, and refuses with EEXIST when the object exists: an object is
//! written once. A `put_new` that returned Ok was acknowledged by the OSDs
//! that hold it (librados acknowledges a write when it is durable on every
//! replica of the acting set).
//!
//! Bindings: the `ceph` crate (3.2.5) for its raw librados declarations and
//! the link line; its safe wrapper is not used because it has no exclusive
//! create, and its pool iterator ends silently on an error (a listing that
//! stops early would make recovery roll forward over fewer segments than
//! exist). docs/dependencies.md says more.

use super::{check_name, check_range, ObjError, ObjectInfo, ObjectStore};
use ceph::rados as ffi;
use std::ffi::{CStr, CString};
use std::io;
use std::ops::Range;
use std::path::PathBuf;
use std::ptr;
use std::time::Duration;

/// Largest object `put_new` writes: Ceph's `osd_max_write_size` default (90 MiB)
/// caps one write operation (its `osd_max_object_size`, 128 MiB, caps objects).
pub const MAX_PUT_BYTES: usize = 90 << 20;

/// librados' "exclusive" flag of `rados_write_op_create`.
// MUTANT: rados-create-not-exclusive s|= 1;|= 0;|
const CREATE_EXCLUSIVE: libc::c_int = 1;

/// Where and how to connect.
#[derive(Debug, Clone)]
pub struct RadosOptions {
    /// ceph.conf to read (monitors, keyring); `CEPH_CONF` or
    /// /etc/ceph/ceph.conf when None.
    pub conf: Option<PathBuf>,
    /// Client id (the `admin` of `client.admin`).
    pub user: String,
    /// How long one operation may wait on monitors or OSDs before it fails
    /// (librados waits forever by default: a store that went away would hang
    /// the volume instead of giving a clear error).
    pub op_timeout: Duration,
}

impl Default for RadosOptions {
    fn default() -> Self {
        RadosOptions {
            conf: None,
            user: "admin".into(),
            op_timeout: Duration::from_secs(30),
        }
    }
}

/// A connection to one pool, rooted at a prefix.
pub struct RadosObjects {
    cluster: ffi::rados_t,
    io: ffi::rados_ioctx_t,
    pool: String,
    /// `PREFIX/`, or empty for the pool's root.
    root: String,
    conf: String,
}

// SAFETY: librados' cluster handle and IO context may be used from many
// threads at once; only their configuration setters are not thread-safe,
// and they are called only in `open`, before the value is shared.
unsafe impl Send for RadosObjects {}
// SAFETY: as for Send.
unsafe impl Sync for RadosObjects {}

/// The error of a librados call that returned `ret < 0` (a negated errno).
fn errno(what: &str, ret: i32) -> ObjError {
    ObjError::Store(format!("{what}: {}", io::Error::from_raw_os_error(-ret)))
}

fn cstr(s: &str) -> Result<CString, ObjError> {
    CString::new(s).map_err(|_| ObjError::Invalid(format!("{s:?} holds a NUL byte")))
}

impl RadosObjects {
    /// Connect to the cluster of `opts.conf` and open `pool`; object names are
    /// rooted at `prefix` (checked like an object name; may be empty).
    pub fn open(pool: &str, prefix: &str, opts: &RadosOptions) -> Result<RadosObjects, ObjError> {
        if !prefix.is_empty() {
            check_name(prefix)?;
        }
        let conf = match &opts.conf {
            Some(p) => p.display().to_string(),
            None => std::env::var("CEPH_CONF").unwrap_or_else(|_| "/etc/ceph/ceph.conf".into()),
        };
        let user = cstr(&opts.user)?;
        let mut cluster: ffi::rados_t = ptr::null_mut();
        // SAFETY: rados_create fills `cluster` with a new handle or fails.
        let ret = unsafe { ffi::rados_create(&mut cluster, user.as_ptr()) };
        if ret < 0 {
            return Err(errno("rados_create", ret));
        }
        let mut me = RadosObjects {
            cluster,
            io: ptr::null_mut(),
            pool: pool.to_string(),
            root: if prefix.is_empty() {
                String::new()
            } else {
                format!("{prefix}/")
            },
            conf: conf.clone(),
        };
        // from here on Drop shuts the handle down on every error path
        let conf_c = cstr(&conf)?;
        // SAFETY: a live handle, NUL-terminated path.
        let ret = unsafe { ffi::rados_conf_read_file(me.cluster, conf_c.as_ptr()) };
        if ret < 0 {
            return Err(errno(&format!("reading {conf}"), ret));
        }
        let secs = opts.op_timeout.as_secs().max(1).to_string();
        for key in [
            "rados_osd_op_timeout",
            "rados_mon_op_timeout",
            "client_mount_timeout",
        ] {
            let (k, v) = (cstr(key)?, cstr(&secs)?);
            // SAFETY: a live handle, not connected yet (settings are read at connect).
            let ret = unsafe { ffi::rados_conf_set(me.cluster, k.as_ptr(), v.as_ptr()) };
            if ret < 0 {
                return Err(errno(&format!("setting {key}"), ret));
            }
        }
        // SAFETY: a live, configured handle.
        let ret = unsafe { ffi::rados_connect(me.cluster) };
        if ret < 0 {
            return Err(errno(&format!("connecting to the cluster of {conf}"), ret));
        }
        let pool_c = cstr(pool)?;
        // SAFETY: a connected handle; `io` is filled or the call fails.
        let ret = unsafe { ffi::rados_ioctx_create(me.cluster, pool_c.as_ptr(), &mut me.io) };
        if ret < 0 {
            return Err(errno(&format!("opening pool {pool}"), ret));
        }
        Ok(me)
    }

    fn oid(&self, name: &str) -> Result<CString, ObjError> {
        check_name(name)?;
        cstr(&format!("{}{name}", self.root))
    }

    fn stat(&self, name: &str, oid: &CStr) -> Result<u64, ObjError> {
        let (mut size, mut mtime) = (0u64, 0 as libc::time_t);
        // SAFETY: a live IO context, NUL-terminated name, valid out-pointers.
        let ret = unsafe { ffi::rados_stat(self.io, oid.as_ptr(), &mut size, &mut mtime) };
        match ret {
            0 => Ok(size),
            r if r == -libc::ENOENT => Err(ObjError::NotFound(name.to_string())),
            r => Err(errno(&format!("stat {name}"), r)),
        }
    }

    /// Read `buf.len()` bytes at `off`; returns how many the object had.
    fn read_into(
        &self,
        name: &str,
        oid: &CStr,
        buf: &mut [u8],
        off: u64,
    ) -> Result<usize, ObjError> {
        let mut got = 0;
        while got < buf.len() {
            let want = (buf.len() - got).min(64 << 20);
            // SAFETY: a live IO context; the buffer has `want` bytes from `got`.
            let ret = unsafe {
                ffi::rados_read(
                    self.io,
                    oid.as_ptr(),
                    buf[got..].as_mut_ptr().cast(),
                    want,
                    off + got as u64,
                )
            };
            match ret {
                0 => break, // the object ends here
                r if r == -libc::ENOENT => return Err(ObjError::NotFound(name.to_string())),
                r if r < 0 => return Err(errno(&format!("read {name}"), r)),
                r => got += r as usize,
            }
        }
        Ok(got)
    }
}

impl Drop for RadosObjects {
    fn drop(&mut self) {
        // SAFETY: the handles are ours, and nothing uses them after drop.
        unsafe {
            if !self.io.is_null() {
                ffi::rados_ioctx_destroy(self.io);
            }
            ffi::rados_shutdown(self.cluster);
        }
    }
}

/// A librados write operation, released on drop.
struct WriteOp(ffi::rados_write_op_t);

impl Drop for WriteOp {
    fn drop(&mut self) {
        // SAFETY: created by rados_create_write_op, released once.
        unsafe { ffi::rados_release_write_op(self.0) }
    }
}

impl ObjectStore for RadosObjects {
    fn put_new(&self, name: &str, bytes: &[u8]) -> Result<(), ObjError> {
        let oid = self.oid(name)?;
        if bytes.len() > MAX_PUT_BYTES {
            return Err(ObjError::Invalid(format!(
                "object {name}: {} bytes, RADOS takes at most {MAX_PUT_BYTES} in one write",
                bytes.len()
            )));
        }
        // SAFETY: returns a new operation (or null, checked).
        let op = WriteOp(unsafe { ffi::rados_create_write_op() });
        if op.0.is_null() {
            return Err(ObjError::Store(
                "rados_create_write_op: out of memory".into(),
            ));
        }
        // SAFETY: a live operation; `bytes` outlives the operate call below,
        // which copies it out before returning.
        let ret = unsafe {
            ffi::rados_write_op_create(op.0, CREATE_EXCLUSIVE, ptr::null());
            ffi::rados_write_op_write_full(op.0, bytes.as_ptr().cast(), bytes.len());
            ffi::rados_write_op_operate(op.0, self.io, oid.as_ptr(), ptr::null_mut(), 0)
        };
        match ret {
            0 => Ok(()),
            r if r == -libc::EEXIST => {
                // the same create sent again (its answer lost) is the same create
                if self.get(name)? == bytes {
                    Ok(())
                } else {
                    Err(ObjError::Exists(name.to_string()))
                }
            }
            r => Err(errno(&format!("create {name}"), r)),
        }
    }

    fn get_range(&self, name: &str, range: Range<u64>) -> Result<Vec<u8>, ObjError> {
        check_range(name, &range)?;
        let oid = self.oid(name)?;
        let want = usize::try_from(range.end - range.start)
            .map_err(|_| ObjError::Invalid(format!("object {name}: range too large")))?;
        if want == 0 {
            return Ok(Vec::new());
        }
        let mut buf = vec![0u8; want];
        let got = self.read_into(name, &oid, &mut buf, range.start)?;
        // MUTANT: rados-short-read-unchecked s|got < want|got > want|
        if got < want {
            let len = self.stat(name, &oid)?;
            return Err(ObjError::Short {
                name: name.to_string(),
                start: range.start,
                end: range.end,
                len,
            });
        }
        Ok(buf)
    }

    fn get(&self, name: &str) -> Result<Vec<u8>, ObjError> {
        let oid = self.oid(name)?;
        let len = self.stat(name, &oid)?;
        let mut buf = vec![0u8; len as usize];
        let got = self.read_into(name, &oid, &mut buf, 0)?;
        if got != buf.len() {
            // it changed between stat and read: objects are written once,
            // so only a delete and a new create can do that
            return Err(ObjError::Store(format!(
                "object {name} changed while read ({len} bytes, then {got})"
            )));
        }
        Ok(buf)
    }

    fn head(&self, name: &str) -> Result<u64, ObjError> {
        let oid = self.oid(name)?;
        self.stat(name, &oid)
    }

    fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>, ObjError> {
        let want = format!("{}{prefix}", self.root);
        let mut names = Vec::new();
        let mut ctx: ffi::rados_list_ctx_t = ptr::null_mut();
        // SAFETY: a live IO context; `ctx` is filled or the call fails.
        let ret = unsafe { ffi::rados_nobjects_list_open(self.io, &mut ctx) };
        if ret < 0 {
            return Err(errno(&format!("listing pool {}", self.pool), ret));
        }
        let result = loop {
            let mut entry: *const libc::c_char = ptr::null();
            // SAFETY: an open list context; librados owns the returned string
            // until the next call, and it is copied before that.
            let ret = unsafe {
                ffi::rados_nobjects_list_next(
                    ctx,
                    // the crate declares `entry` one pointer too deep (C:
                    // `const char **entry`); librados stores a `const char *`
                    (&mut entry as *mut *const libc::c_char).cast(),
                    ptr::null_mut(),
                    ptr::null_mut(),
                )
            };
            if ret == -libc::ENOENT {
                break Ok(());
            }
            if ret < 0 {
                break Err(errno(&format!("listing pool {}", self.pool), ret));
            }
            // SAFETY: a NUL-terminated string owned by the list context.
            let full = unsafe { CStr::from_ptr(entry) }.to_string_lossy();
            if let Some(rel) = full.strip_prefix(&want) {
                names.push(format!("{prefix}{rel}"));
            }
        };
        // SAFETY: opened above, closed once.
        unsafe { ffi::rados_nobjects_list_close(ctx) };
        result?;
        names.sort();
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            let oid = self.oid(&name)?;
            match self.stat(&name, &oid) {
                Ok(len) => out.push(ObjectInfo { name, len }),
                // deleted since it was listed: a listing is of one moment
                Err(ObjError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    fn delete(&self, name: &str) -> Result<(), ObjError> {
        let oid = self.oid(name)?;
        // SAFETY: a live IO context, NUL-terminated name.
        let ret = unsafe { ffi::rados_remove(self.io, oid.as_ptr()) };
        match ret {
            r if r == 0 || r == -libc::ENOENT => Ok(()),
            r => Err(errno(&format!("delete {name}"), r)),
        }
    }

    fn describe(&self) -> String {
        format!(
            "rados://{}/{} (cluster of {})",
            self.pool,
            self.root.trim_end_matches('/'),
            self.conf
        )
    }
}
