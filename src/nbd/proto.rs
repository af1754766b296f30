//! NBD wire format: constants, and pure encode/decode of the fixed-newstyle
//! handshake, option haggling, requests and (simple and structured) replies.
//! No IO and no engine calls here, so every decoder can be fuzzed on its own.
//!
//! Invariant: a decoder never trusts a length field from the wire for more than
//! the bytes it was actually given (lengths are checked before slicing), and
//! `check_request` decides whether a request may run *before* the server reads
//! or allocates its payload.

/// "NBDMAGIC", the first 8 bytes the server sends.
pub const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
/// "IHAVEOPT": newstyle magic and the prefix of every client option.
pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
/// Magic of every option reply.
pub const REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;

// Handshake flags (server) and client flags.
pub const FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
pub const FLAG_NO_ZEROES: u16 = 1 << 1;
pub const FLAG_C_FIXED_NEWSTYLE: u32 = 1 << 0;
pub const FLAG_C_NO_ZEROES: u32 = 1 << 1;

// Options.
pub const OPT_EXPORT_NAME: u32 = 1;
pub const OPT_ABORT: u32 = 2;
pub const OPT_LIST: u32 = 3;
pub const OPT_STARTTLS: u32 = 5;
pub const OPT_INFO: u32 = 6;
pub const OPT_GO: u32 = 7;
pub const OPT_STRUCTURED_REPLY: u32 = 8;
pub const OPT_LIST_META_CONTEXT: u32 = 9;
pub const OPT_SET_META_CONTEXT: u32 = 10;

// Option replies.
pub const REP_ACK: u32 = 1;
pub const REP_SERVER: u32 = 2;
pub const REP_INFO: u32 = 3;
pub const REP_META_CONTEXT: u32 = 4;
pub const REP_ERR_UNSUP: u32 = (1 << 31) + 1;
pub const REP_ERR_POLICY: u32 = (1 << 31) + 2;
pub const REP_ERR_INVALID: u32 = (1 << 31) + 3;
pub const REP_ERR_TLS_REQD: u32 = (1 << 31) + 5;
pub const REP_ERR_UNKNOWN: u32 = (1 << 31) + 6;
pub const REP_ERR_SHUTDOWN: u32 = (1 << 31) + 7;
pub const REP_ERR_TOO_BIG: u32 = (1 << 31) + 9;

// NBD_INFO_* items of NBD_REP_INFO.
pub const INFO_EXPORT: u16 = 0;
pub const INFO_NAME: u16 = 1;
pub const INFO_DESCRIPTION: u16 = 2;
pub const INFO_BLOCK_SIZE: u16 = 3;

// Transmission flags.
pub const TFLAG_HAS_FLAGS: u16 = 1 << 0;
pub const TFLAG_READ_ONLY: u16 = 1 << 1;
pub const TFLAG_SEND_FLUSH: u16 = 1 << 2;
pub const TFLAG_SEND_FUA: u16 = 1 << 3;
pub const TFLAG_SEND_TRIM: u16 = 1 << 5;
pub const TFLAG_SEND_WRITE_ZEROES: u16 = 1 << 6;
pub const TFLAG_SEND_DF: u16 = 1 << 7;
pub const TFLAG_CAN_MULTI_CONN: u16 = 1 << 8;
pub const TFLAG_SEND_CACHE: u16 = 1 << 10;
pub const TFLAG_SEND_FAST_ZERO: u16 = 1 << 11;

// Commands.
pub const CMD_READ: u16 = 0;
pub const CMD_WRITE: u16 = 1;
pub const CMD_DISC: u16 = 2;
pub const CMD_FLUSH: u16 = 3;
pub const CMD_TRIM: u16 = 4;
pub const CMD_CACHE: u16 = 5;
pub const CMD_WRITE_ZEROES: u16 = 6;
pub const CMD_BLOCK_STATUS: u16 = 7;

// Command flags.
pub const CMD_FLAG_FUA: u16 = 1 << 0;
pub const CMD_FLAG_NO_HOLE: u16 = 1 << 1;
pub const CMD_FLAG_DF: u16 = 1 << 2;
pub const CMD_FLAG_REQ_ONE: u16 = 1 << 3;
pub const CMD_FLAG_FAST_ZERO: u16 = 1 << 4;

// Structured reply chunk types and flags.
pub const REPLY_FLAG_DONE: u16 = 1 << 0;
pub const REPLY_TYPE_NONE: u16 = 0;
pub const REPLY_TYPE_OFFSET_DATA: u16 = 1;
pub const REPLY_TYPE_BLOCK_STATUS: u16 = 5;
pub const REPLY_TYPE_ERROR: u16 = (1 << 15) + 1;

// base:allocation state bits.
pub const STATE_HOLE: u32 = 1 << 0;
pub const STATE_ZERO: u32 = 1 << 1;

/// Errno values on the wire (the spec fixes them to the Linux numbers).
pub const EPERM: u32 = 1;
pub const EIO: u32 = 5;
pub const ENOMEM: u32 = 12;
pub const EINVAL: u32 = 22;
pub const ENOSPC: u32 = 28;
pub const EOVERFLOW: u32 = 75;
pub const ENOTSUP: u32 = 95;
pub const ESHUTDOWN: u32 = 108;

/// The only metadata context we serve, and its id.
pub const BASE_ALLOCATION: &str = "base:allocation";
pub const BASE_ALLOCATION_ID: u32 = 1;

/// Block sizes advertised with NBD_INFO_BLOCK_SIZE.
pub const MIN_BLOCK: u32 = 512;
pub const PREFERRED_BLOCK: u32 = 4096;
/// Largest READ/WRITE payload we accept (and so the most a request can make us allocate).
pub const MAX_PAYLOAD: u32 = 32 << 20;
/// Largest option payload we read; larger options are discarded unread and refused.
pub const MAX_OPTION_BYTES: u32 = 64 << 10;
/// Longest string (export name, query) the spec allows.
pub const MAX_STRING: usize = 4096;
/// Most info items / meta context queries we accept in one option.
pub const MAX_ITEMS: usize = 256;

pub const REQUEST_BYTES: usize = 28;
pub const OPTION_HEADER_BYTES: usize = 16;
pub const SIMPLE_REPLY_BYTES: usize = 16;
pub const STRUCTURED_HEADER_BYTES: usize = 20;

/// The server's greeting: NBDMAGIC, IHAVEOPT, handshake flags.
pub fn greeting() -> [u8; 18] {
    let mut b = [0u8; 18];
    b[0..8].copy_from_slice(&NBDMAGIC.to_be_bytes());
    b[8..16].copy_from_slice(&IHAVEOPT.to_be_bytes());
    b[16..18].copy_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
    b
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    #[error("client flags {0:#x} include bits this server does not know")]
    UnknownClientFlags(u32),
    #[error("client does not speak fixed newstyle (flags {0:#x})")]
    NotFixedNewstyle(u32),
    #[error("bad option magic {0:#x}")]
    BadOptionMagic(u64),
    #[error("bad request magic {0:#x}")]
    BadRequestMagic(u32),
    #[error("malformed option payload: {0}")]
    Malformed(&'static str),
}

/// Validate the client's 32-bit flags; returns whether it asked for NO_ZEROES.
pub fn parse_client_flags(b: [u8; 4]) -> Result<bool, ProtoError> {
    let f = u32::from_be_bytes(b);
    if f & !(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES) != 0 {
        return Err(ProtoError::UnknownClientFlags(f));
    }
    if f & FLAG_C_FIXED_NEWSTYLE == 0 {
        return Err(ProtoError::NotFixedNewstyle(f));
    }
    Ok(f & FLAG_C_NO_ZEROES != 0)
}

/// Option header: IHAVEOPT, option, payload length.
pub fn parse_option_header(b: &[u8; OPTION_HEADER_BYTES]) -> Result<(u32, u32), ProtoError> {
    let magic = u64::from_be_bytes(b[0..8].try_into().unwrap());
    if magic != IHAVEOPT {
        return Err(ProtoError::BadOptionMagic(magic));
    }
    Ok((
        u32::from_be_bytes(b[8..12].try_into().unwrap()),
        u32::from_be_bytes(b[12..16].try_into().unwrap()),
    ))
}

/// A cursor over an option payload that never reads past its end.
struct Cursor<'a> {
    b: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], ProtoError> {
        if n > self.b.len() {
            return Err(ProtoError::Malformed("field runs past the option's end"));
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }
    fn u16(&mut self) -> Result<u16, ProtoError> {
        Ok(u16::from_be_bytes(self.take(2)?.try_into().unwrap()))
    }
    fn u32(&mut self) -> Result<u32, ProtoError> {
        Ok(u32::from_be_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn string(&mut self) -> Result<String, ProtoError> {
        let n = self.u32()? as usize;
        if n > MAX_STRING {
            return Err(ProtoError::Malformed("string longer than 4096 bytes"));
        }
        let s = self.take(n)?;
        let s = std::str::from_utf8(s).map_err(|_| ProtoError::Malformed("string is not UTF-8"))?;
        if s.contains('\0') {
            return Err(ProtoError::Malformed("string contains NUL"));
        }
        Ok(s.to_string())
    }
    fn end(&self) -> Result<(), ProtoError> {
        if self.b.is_empty() {
            Ok(())
        } else {
            Err(ProtoError::Malformed(
                "trailing bytes after the option's fields",
            ))
        }
    }
}

/// Payload of NBD_OPT_INFO / NBD_OPT_GO.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InfoRequest {
    pub name: String,
    pub items: Vec<u16>,
}

pub fn parse_info_request(b: &[u8]) -> Result<InfoRequest, ProtoError> {
    let mut c = Cursor { b };
    let name = c.string()?;
    let n = c.u16()? as usize;
    if n > MAX_ITEMS {
        return Err(ProtoError::Malformed("too many info requests"));
    }
    let mut items = Vec::with_capacity(n);
    for _ in 0..n {
        items.push(c.u16()?);
    }
    c.end()?;
    Ok(InfoRequest { name, items })
}

/// Payload of NBD_OPT_LIST_META_CONTEXT / NBD_OPT_SET_META_CONTEXT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaRequest {
    pub name: String,
    pub queries: Vec<String>,
}

pub fn parse_meta_request(b: &[u8]) -> Result<MetaRequest, ProtoError> {
    let mut c = Cursor { b };
    let name = c.string()?;
    let n = c.u32()? as usize;
    if n > MAX_ITEMS {
        return Err(ProtoError::Malformed("too many metadata context queries"));
    }
    let mut queries = Vec::with_capacity(n);
    for _ in 0..n {
        queries.push(c.string()?);
    }
    c.end()?;
    Ok(MetaRequest { name, queries })
}

/// Does `query` select base:allocation? LIST treats a bare namespace ("base:")
/// as "everything in it"; SET needs the full name.
pub fn query_selects_base_allocation(query: &str, list: bool) -> bool {
    query == BASE_ALLOCATION || (list && query == "base:")
}

/// An option reply: header + payload.
pub fn option_reply(option: u32, reply: u32, payload: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(20 + payload.len());
    b.extend_from_slice(&REPLY_MAGIC.to_be_bytes());
    b.extend_from_slice(&option.to_be_bytes());
    b.extend_from_slice(&reply.to_be_bytes());
    b.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    b.extend_from_slice(payload);
    b
}

/// NBD_REP_SERVER payload for one export: its name, then its description (the
/// rest of the payload, as the spec allows; `nbdinfo --list` shows it).
pub fn rep_server(name: &str, description: &str) -> Vec<u8> {
    let mut b = Vec::with_capacity(4 + name.len() + description.len());
    b.extend_from_slice(&(name.len() as u32).to_be_bytes());
    b.extend_from_slice(name.as_bytes());
    b.extend_from_slice(description.as_bytes());
    b
}

/// NBD_INFO_EXPORT payload.
pub fn info_export(size: u64, tflags: u16) -> [u8; 12] {
    let mut b = [0u8; 12];
    b[0..2].copy_from_slice(&INFO_EXPORT.to_be_bytes());
    b[2..10].copy_from_slice(&size.to_be_bytes());
    b[10..12].copy_from_slice(&tflags.to_be_bytes());
    b
}

/// NBD_INFO_BLOCK_SIZE payload.
pub fn info_block_size() -> [u8; 14] {
    let mut b = [0u8; 14];
    b[0..2].copy_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
    b[2..6].copy_from_slice(&MIN_BLOCK.to_be_bytes());
    b[6..10].copy_from_slice(&PREFERRED_BLOCK.to_be_bytes());
    b[10..14].copy_from_slice(&MAX_PAYLOAD.to_be_bytes());
    b
}

/// NBD_INFO_NAME / NBD_INFO_DESCRIPTION payload.
pub fn info_string(kind: u16, s: &str) -> Vec<u8> {
    let mut b = Vec::with_capacity(2 + s.len());
    b.extend_from_slice(&kind.to_be_bytes());
    b.extend_from_slice(s.as_bytes());
    b
}

/// NBD_REP_META_CONTEXT payload.
pub fn rep_meta_context(id: u32, name: &str) -> Vec<u8> {
    let mut b = Vec::with_capacity(4 + name.len());
    b.extend_from_slice(&id.to_be_bytes());
    b.extend_from_slice(name.as_bytes());
    b
}

/// Reply to NBD_OPT_EXPORT_NAME: size, flags and (unless NO_ZEROES) 124 zero bytes.
pub fn export_name_reply(size: u64, tflags: u16, no_zeroes: bool) -> Vec<u8> {
    let mut b = Vec::with_capacity(134);
    b.extend_from_slice(&size.to_be_bytes());
    b.extend_from_slice(&tflags.to_be_bytes());
    if !no_zeroes {
        b.extend_from_slice(&[0u8; 124]);
    }
    b
}

/// One transmission-phase request header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub flags: u16,
    pub cmd: u16,
    pub cookie: u64,
    pub offset: u64,
    pub length: u32,
}

impl Request {
    pub fn decode(b: &[u8; REQUEST_BYTES]) -> Result<Request, ProtoError> {
        let magic = u32::from_be_bytes(b[0..4].try_into().unwrap());
        if magic != REQUEST_MAGIC {
            return Err(ProtoError::BadRequestMagic(magic));
        }
        Ok(Request {
            flags: u16::from_be_bytes(b[4..6].try_into().unwrap()),
            cmd: u16::from_be_bytes(b[6..8].try_into().unwrap()),
            cookie: u64::from_be_bytes(b[8..16].try_into().unwrap()),
            offset: u64::from_be_bytes(b[16..24].try_into().unwrap()),
            length: u32::from_be_bytes(b[24..28].try_into().unwrap()),
        })
    }

    pub fn encode(&self) -> [u8; REQUEST_BYTES] {
        let mut b = [0u8; REQUEST_BYTES];
        b[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
        b[4..6].copy_from_slice(&self.flags.to_be_bytes());
        b[6..8].copy_from_slice(&self.cmd.to_be_bytes());
        b[8..16].copy_from_slice(&self.cookie.to_be_bytes());
        b[16..24].copy_from_slice(&self.offset.to_be_bytes());
        b[24..28].copy_from_slice(&self.length.to_be_bytes());
        b
    }

    /// Bytes of payload that follow this header on the wire (only WRITE has one).
    pub fn payload_len(&self) -> u32 {
        if self.cmd == CMD_WRITE {
            self.length
        } else {
            0
        }
    }
}

/// What the connection negotiated, as far as request validation cares.
#[derive(Debug, Clone, Copy)]
pub struct Negotiated {
    pub size: u64,
    pub read_only: bool,
    pub structured: bool,
    pub base_allocation: bool,
}

/// Decide whether a request may run. `Err(errno)` means: answer with that error
/// (and, for a WRITE, discard its payload unread).
pub fn check_request(r: &Request, n: &Negotiated) -> Result<(), u32> {
    let allowed = match r.cmd {
        CMD_READ => CMD_FLAG_FUA | if n.structured { CMD_FLAG_DF } else { 0 },
        CMD_WRITE | CMD_TRIM => CMD_FLAG_FUA,
        CMD_WRITE_ZEROES => CMD_FLAG_FUA | CMD_FLAG_NO_HOLE | CMD_FLAG_FAST_ZERO,
        CMD_FLUSH | CMD_CACHE | CMD_DISC => CMD_FLAG_FUA,
        CMD_BLOCK_STATUS => CMD_FLAG_FUA | CMD_FLAG_REQ_ONE,
        _ => return Err(EINVAL),
    };
    if r.flags & !allowed != 0 {
        return Err(EINVAL);
    }
    let ranged = !matches!(r.cmd, CMD_FLUSH | CMD_DISC);
    if ranged {
        let end = r.offset.checked_add(r.length as u64);
        if end.is_none_or(|e| e > n.size) {
            return Err(EINVAL);
        }
    }
    match r.cmd {
        CMD_READ | CMD_WRITE if r.length > MAX_PAYLOAD => {
            return Err(if r.cmd == CMD_READ && n.structured {
                EOVERFLOW
            } else {
                EINVAL
            })
        }
        CMD_WRITE | CMD_TRIM | CMD_WRITE_ZEROES if n.read_only => return Err(EPERM),
        CMD_BLOCK_STATUS if !n.base_allocation => return Err(EINVAL),
        CMD_BLOCK_STATUS if r.length == 0 => return Err(EINVAL),
        CMD_FLUSH | CMD_DISC if r.offset != 0 || r.length != 0 => return Err(EINVAL),
        _ => {}
    }
    Ok(())
}

/// Simple reply header (READ data, if any, follows it).
pub fn simple_reply(errno: u32, cookie: u64) -> [u8; SIMPLE_REPLY_BYTES] {
    let mut b = [0u8; SIMPLE_REPLY_BYTES];
    b[0..4].copy_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    b[4..8].copy_from_slice(&errno.to_be_bytes());
    b[8..16].copy_from_slice(&cookie.to_be_bytes());
    b
}

/// Structured reply chunk header; `len` bytes of payload follow.
pub fn structured_header(
    flags: u16,
    kind: u16,
    cookie: u64,
    len: u32,
) -> [u8; STRUCTURED_HEADER_BYTES] {
    let mut b = [0u8; STRUCTURED_HEADER_BYTES];
    b[0..4].copy_from_slice(&STRUCTURED_REPLY_MAGIC.to_be_bytes());
    b[4..6].copy_from_slice(&flags.to_be_bytes());
    b[6..8].copy_from_slice(&kind.to_be_bytes());
    b[8..16].copy_from_slice(&cookie.to_be_bytes());
    b[16..20].copy_from_slice(&len.to_be_bytes());
    b
}

/// Header + offset of a final NBD_REPLY_TYPE_OFFSET_DATA chunk carrying `data_len` bytes.
pub fn offset_data_header(cookie: u64, offset: u64, data_len: u32) -> [u8; 28] {
    let mut b = [0u8; 28];
    b[..20].copy_from_slice(&structured_header(
        REPLY_FLAG_DONE,
        REPLY_TYPE_OFFSET_DATA,
        cookie,
        8 + data_len,
    ));
    b[20..28].copy_from_slice(&offset.to_be_bytes());
    b
}

/// A final NBD_REPLY_TYPE_ERROR chunk with a short message.
pub fn structured_error(cookie: u64, errno: u32, msg: &str) -> Vec<u8> {
    let msg = &msg.as_bytes()[..msg.len().min(1024)];
    let mut b = Vec::with_capacity(26 + msg.len());
    b.extend_from_slice(&structured_header(
        REPLY_FLAG_DONE,
        REPLY_TYPE_ERROR,
        cookie,
        6 + msg.len() as u32,
    ));
    b.extend_from_slice(&errno.to_be_bytes());
    b.extend_from_slice(&(msg.len() as u16).to_be_bytes());
    b.extend_from_slice(msg);
    b
}

/// A final NBD_REPLY_TYPE_BLOCK_STATUS chunk for base:allocation.
/// `extents` are (length, state flags); the caller keeps them non-empty, each
/// length non-zero and their sum within the request.
pub fn block_status_reply(cookie: u64, extents: &[(u32, u32)]) -> Vec<u8> {
    let len = 4 + 8 * extents.len();
    let mut b = Vec::with_capacity(STRUCTURED_HEADER_BYTES + len);
    b.extend_from_slice(&structured_header(
        REPLY_FLAG_DONE,
        REPLY_TYPE_BLOCK_STATUS,
        cookie,
        len as u32,
    ));
    b.extend_from_slice(&BASE_ALLOCATION_ID.to_be_bytes());
    for &(l, s) in extents {
        b.extend_from_slice(&l.to_be_bytes());
        b.extend_from_slice(&s.to_be_bytes());
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    fn neg() -> Negotiated {
        Negotiated {
            size: 1 << 30,
            read_only: false,
            structured: true,
            base_allocation: true,
        }
    }

    fn req(cmd: u16, flags: u16, offset: u64, length: u32) -> Request {
        Request {
            flags,
            cmd,
            cookie: 7,
            offset,
            length,
        }
    }

    #[test]
    fn request_round_trips_and_rejects_bad_magic() {
        let r = req(CMD_WRITE, CMD_FLAG_FUA, 4096, 512);
        assert_eq!(Request::decode(&r.encode()), Ok(r));
        let mut b = r.encode();
        b[0] ^= 1;
        assert!(matches!(
            Request::decode(&b),
            Err(ProtoError::BadRequestMagic(_))
        ));
    }

    #[test]
    fn check_request_enforces_range_size_flags_and_read_only() {
        let n = neg();
        assert_eq!(check_request(&req(CMD_READ, 0, 0, 4096), &n), Ok(()));
        assert_eq!(
            check_request(&req(CMD_READ, 0, (1 << 30) - 1, 2), &n),
            Err(EINVAL)
        );
        assert_eq!(
            check_request(&req(CMD_READ, 0, u64::MAX, 2), &n),
            Err(EINVAL)
        );
        assert_eq!(
            check_request(&req(CMD_WRITE, 0, 0, MAX_PAYLOAD + 1), &n),
            Err(EINVAL)
        );
        assert_eq!(
            check_request(&req(CMD_READ, 0, 0, MAX_PAYLOAD + 1), &n),
            Err(EOVERFLOW)
        );
        assert_eq!(check_request(&req(99, 0, 0, 0), &n), Err(EINVAL));
        assert_eq!(
            check_request(&req(CMD_WRITE, CMD_FLAG_NO_HOLE, 0, 512), &n),
            Err(EINVAL)
        );
        assert_eq!(
            check_request(
                &req(
                    CMD_WRITE_ZEROES,
                    CMD_FLAG_NO_HOLE | CMD_FLAG_FAST_ZERO,
                    0,
                    512
                ),
                &n
            ),
            Ok(())
        );
        assert_eq!(check_request(&req(CMD_FLUSH, 0, 1, 0), &n), Err(EINVAL));
        let ro = Negotiated {
            read_only: true,
            ..n
        };
        for c in [CMD_WRITE, CMD_TRIM, CMD_WRITE_ZEROES] {
            assert_eq!(check_request(&req(c, 0, 0, 512), &ro), Err(EPERM));
        }
        assert_eq!(check_request(&req(CMD_FLUSH, 0, 0, 0), &ro), Ok(()));
        let no_meta = Negotiated {
            base_allocation: false,
            ..n
        };
        assert_eq!(
            check_request(&req(CMD_BLOCK_STATUS, 0, 0, 512), &no_meta),
            Err(EINVAL)
        );
    }

    #[test]
    fn option_payloads_are_bounds_checked() {
        let mut b = Vec::new();
        b.extend_from_slice(&3u32.to_be_bytes());
        b.extend_from_slice(b"abc");
        b.extend_from_slice(&1u16.to_be_bytes());
        b.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
        assert_eq!(
            parse_info_request(&b),
            Ok(InfoRequest {
                name: "abc".into(),
                items: vec![INFO_BLOCK_SIZE]
            })
        );
        for cut in 0..b.len() {
            assert!(parse_info_request(&b[..cut]).is_err(), "cut {cut}");
        }
        let mut long = b.clone();
        long.push(0);
        assert!(parse_info_request(&long).is_err());
        let huge = u32::MAX.to_be_bytes();
        assert!(parse_info_request(&huge).is_err());
        assert!(parse_meta_request(&huge).is_err());
    }

    #[test]
    fn meta_request_parses_queries() {
        let mut b = Vec::new();
        b.extend_from_slice(&0u32.to_be_bytes());
        b.extend_from_slice(&2u32.to_be_bytes());
        for q in ["base:allocation", "qemu:dirty-bitmap:x"] {
            b.extend_from_slice(&(q.len() as u32).to_be_bytes());
            b.extend_from_slice(q.as_bytes());
        }
        let m = parse_meta_request(&b).unwrap();
        assert_eq!(m.name, "");
        assert_eq!(m.queries.len(), 2);
        assert!(query_selects_base_allocation(&m.queries[0], false));
        assert!(!query_selects_base_allocation(&m.queries[1], true));
        assert!(query_selects_base_allocation("base:", true));
        assert!(!query_selects_base_allocation("base:", false));
    }

    #[test]
    fn client_flags_must_be_fixed_newstyle_and_known() {
        assert_eq!(parse_client_flags(1u32.to_be_bytes()), Ok(false));
        assert_eq!(parse_client_flags(3u32.to_be_bytes()), Ok(true));
        assert!(parse_client_flags(0u32.to_be_bytes()).is_err());
        assert!(parse_client_flags(5u32.to_be_bytes()).is_err());
    }

    #[test]
    fn structured_error_has_consistent_length() {
        let e = structured_error(9, EIO, "boom");
        assert_eq!(e.len(), 20 + 6 + 4);
        assert_eq!(u32::from_be_bytes(e[16..20].try_into().unwrap()), 10);
    }

    proptest::proptest! {
        /// Arbitrary bytes never panic a decoder, and a request accepted by
        /// check_request always lies inside the export and within MAX_PAYLOAD.
        #[test]
        fn decoders_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600)) {
            let _ = parse_info_request(&bytes);
            let _ = parse_meta_request(&bytes);
            if bytes.len() >= REQUEST_BYTES {
                let mut h = [0u8; REQUEST_BYTES];
                h.copy_from_slice(&bytes[..REQUEST_BYTES]);
                h[..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
                let r = Request::decode(&h).unwrap();
                let n = Negotiated { size: 1 << 30, read_only: bytes[0] & 1 == 1, structured: bytes[1] & 1 == 1, base_allocation: bytes[2] & 1 == 1 };
                if check_request(&r, &n).is_ok() {
                    proptest::prop_assert!(r.offset + r.length as u64 <= n.size);
                    proptest::prop_assert!(r.payload_len() <= MAX_PAYLOAD);
                }
            }
            if bytes.len() >= OPTION_HEADER_BYTES {
                let mut h = [0u8; OPTION_HEADER_BYTES];
                h.copy_from_slice(&bytes[..OPTION_HEADER_BYTES]);
                let _ = parse_option_header(&h);
            }
        }
    }
}
