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
    Failed(Failure),
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
            Error::Failed(f) => f.errno,
            _ => libc::EIO,
        }
    }
}

/// Why a volume stopped (`Error::Failed`): what failed, for people, and the
/// errno every later write, trim, zero and flush answers, derived once from the
/// cause's `io::Error` (never from message text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub why: String,
    pub errno: i32,
}

impl Failure {
    /// `what` failed with `cause`: ENOSPC when the host file system under the
    /// media is full (or over quota; a sparse file that could not grow), EIO
    /// for everything else.
    pub fn io(what: impl std::fmt::Display, cause: &std::io::Error) -> Failure {
        Failure {
            why: format!("{what}: {cause}"),
            errno: stop_errno(cause),
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.why)
    }
}

/// The errno a volume stopped by `e` answers: ENOSPC for a full host file
/// system or quota, EIO otherwise (a client cannot act on EINVAL or EBADF from
/// the media, and must not retry).
pub fn stop_errno(e: &std::io::Error) -> i32 {
    match e.raw_os_error() {
        Some(libc::ENOSPC) | Some(libc::EDQUOT) => libc::ENOSPC,
        Some(_) => libc::EIO,
        None if matches!(
            e.kind(),
            std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
        ) =>
        {
            libc::ENOSPC
        }
        None => libc::EIO,
    }
}

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

    /// A stopped volume's errno comes from its cause's errno or kind, not from
    /// the words of its message.
    #[test]
    fn a_stopped_volume_answers_the_errno_of_its_cause() {
        let full = std::io::Error::from_raw_os_error(libc::ENOSPC);
        assert_eq!(
            Error::Failed(Failure::io("writing", &full)).errno(),
            libc::ENOSPC
        );
        let quota = std::io::Error::from_raw_os_error(libc::EDQUOT);
        assert_eq!(
            Error::Failed(Failure::io("writing", &quota)).errno(),
            libc::ENOSPC
        );
        let kind = std::io::Error::new(std::io::ErrorKind::StorageFull, "full");
        assert_eq!(
            Error::Failed(Failure::io("writing", &kind)).errno(),
            libc::ENOSPC
        );
        let eio = std::io::Error::from_raw_os_error(libc::EIO);
        assert_eq!(
            Error::Failed(Failure::io("writing", &eio)).errno(),
            libc::EIO
        );
        // a message that merely says "(os error 28)" is not a full file system
        let liar = std::io::Error::other("disk said (os error 28)");
        assert_eq!(
            Error::Failed(Failure::io("writing", &liar)).errno(),
            libc::EIO
        );
        let badf = std::io::Error::from_raw_os_error(libc::EBADF);
        assert_eq!(
            Error::Failed(Failure::io("writing", &badf)).errno(),
            libc::EIO
        );
    }
}
