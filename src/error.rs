//! Engine errors, each with the errno an NBD frontend should answer with.

use crate::format::FormatError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("no space left: live data and the GC reserve fill the volume")]
    NoSpace,
    #[error("request {offset}+{len} is beyond the end of the volume ({size} bytes)")]
    OutOfRange { offset: u64, len: u64, size: u64 },
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("volume is read-only")]
    ReadOnly,
    #[error("damaged volume: {0}")]
    Corrupt(String),
    #[error("on-disk structure rejected: {0}")]
    Format(#[from] FormatError),
    #[error("volume stopped after an earlier media error: {0}")]
    Failed(String),
    #[error("logical block {lba} fails its checksum (segment {segment}, {chunk})")]
    BadBlock {
        lba: u64,
        segment: u32,
        chunk: String,
    },
    #[error("volume is closed")]
    Closed,
}

impl Error {
    /// The errno that best describes this error to a block-device client.
    pub fn errno(&self) -> i32 {
        match self {
            Error::NoSpace => libc::ENOSPC,
            Error::OutOfRange { .. } | Error::InvalidArgument(_) => libc::EINVAL,
            Error::ReadOnly => libc::EPERM,
            Error::Io(e) => e.raw_os_error().unwrap_or(libc::EIO),
            _ => libc::EIO,
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;
