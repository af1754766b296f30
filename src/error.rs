//! Engine errors, each with the errno an NBD frontend should answer with.
//!
//! Invariant: a message is said once. A variant that prints a wrapped error in
//! its own message does not also expose it as `source()`, so a chain printer
//! (`anyhow`'s `{:#}`) does not repeat it ("... (os error 28): ... (os error 28)").

use crate::format::FormatError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("I/O error: {0}")]
    Io(std::io::Error),
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
    Format(FormatError),
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

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Error {
        Error::Io(e)
    }
}

impl From<FormatError> for Error {
    fn from(e: FormatError) -> Error {
        Error::Format(e)
    }
}

impl Error {
    /// The errno that best describes this error to a block-device client.
    pub fn errno(&self) -> i32 {
        match self {
            Error::NoSpace => libc::ENOSPC,
            Error::OutOfRange { .. } | Error::InvalidArgument(_) => libc::EINVAL,
            Error::ReadOnly => libc::EPERM,
            Error::Io(e) => e.raw_os_error().unwrap_or(libc::EIO),
            // The volume stopped because the host filesystem under it is full (a
            // sparse file that could not grow): clients see ENOSPC, not EIO.
            Error::Failed(why) if why.contains(HOST_FULL) => libc::ENOSPC,
            _ => libc::EIO,
        }
    }
}

/// How std::io::Error displays ENOSPC; a stop message carrying it came from a full
/// host filesystem.
const HOST_FULL: &str = "(os error 28)";

pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    /// The chain printer the CLI uses prints an I/O error's errno once.
    #[test]
    fn a_chain_printer_says_the_errno_once() {
        let e = anyhow::Error::from(Error::from(std::io::Error::from_raw_os_error(28)))
            .context("creating a volume on v.img");
        let s = format!("{e:#}");
        assert_eq!(s.matches("(os error 28)").count(), 1, "{s}");
        let e = anyhow::Error::from(Error::from(FormatError::Checksum));
        let s = format!("{e:#}");
        assert_eq!(s.matches("checksum mismatch").count(), 1, "{s}");
    }
}
