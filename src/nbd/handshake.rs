//! The NBD handshake (fixed newstyle): greeting, client flags, then one option
//! at a time, each answered by its handler from the `OPTIONS` table, until the
//! client picks an export (EXPORT_NAME, GO), aborts, or must be disconnected.
//! Also the refusal a client over the connection limit gets.
//!
//! Owns: what one connection negotiated so far (`Hs`), for the handshake's
//! duration only; the result is the immutable `Negotiated` the request loop
//! uses.
//!
//! Invariants: the whole handshake ends within its total deadline and at most
//! `MAX_OPTIONS` options (a client trickling bytes cannot stretch it); an
//! option longer than `proto::MAX_OPTION_BYTES` is discarded unread; under
//! `--tls require` nothing but STARTTLS and ABORT is served before TLS; after
//! STARTTLS what was negotiated before is forgotten (the spec).

use super::proto::{self, Negotiated};
use super::server::{Export, Server};
use super::tls::{self, TlsMode};
use super::transport::{read_by, skip_by, HsOut, RecvBuf, Stream};
use std::io::{self, Write};
use std::net::Shutdown;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Most options one handshake may send before we hang up.
const MAX_OPTIONS: u32 = 4096;

/// One handshake in progress: the socket both ways and what was negotiated.
struct Hs<'a> {
    srv: &'a Server,
    rd: &'a mut RecvBuf,
    wr: &'a mut HsOut,
    deadline: Instant,
    no_zeroes: bool,
    structured: bool,
    base_allocation: bool,
    tls_up: bool,
}

/// What an option's handler decided.
enum Step {
    /// Wait for the next option.
    Next,
    /// The handshake is over: the export chosen, or None (aborted, or the
    /// client must be disconnected).
    End(Option<(Negotiated, Export)>),
}

/// Handles one option: its code and its payload (at most
/// `proto::MAX_OPTION_BYTES`, already read).
type Handler = fn(&mut Hs<'_>, u32, &[u8]) -> io::Result<Step>;

/// Every option the server knows, with its handler; anything else is
/// answered `NBD_REP_ERR_UNSUP`.
const OPTIONS: &[(u32, Handler)] = &[
    (proto::OPT_EXPORT_NAME, export_name),
    (proto::OPT_ABORT, abort),
    (proto::OPT_LIST, list),
    (proto::OPT_STARTTLS, starttls),
    (proto::OPT_INFO, info_or_go),
    (proto::OPT_GO, info_or_go),
    (proto::OPT_STRUCTURED_REPLY, structured_reply),
    (proto::OPT_LIST_META_CONTEXT, meta_context),
    (proto::OPT_SET_META_CONTEXT, meta_context),
];

impl Hs<'_> {
    fn reply(&mut self, opt: u32, kind: u32, payload: &[u8]) -> io::Result<()> {
        self.wr.write_all(&proto::option_reply(opt, kind, payload))
    }
    fn negotiated(&self, e: &Export, base_allocation: bool) -> (Negotiated, Export) {
        let neg = Negotiated {
            size: e.vol.size_bytes(),
            read_only: e.read_only,
            structured: self.structured,
            base_allocation,
        };
        (neg, e.clone())
    }
}

/// Transmission flags of an export.
pub(super) fn tflags(read_only: bool, structured: bool) -> u16 {
    let mut f = proto::TFLAG_HAS_FLAGS
        | proto::TFLAG_SEND_FLUSH
        | proto::TFLAG_SEND_FUA
        | proto::TFLAG_CAN_MULTI_CONN
        | proto::TFLAG_SEND_CACHE;
    if read_only {
        f |= proto::TFLAG_READ_ONLY;
    } else {
        f |= proto::TFLAG_SEND_TRIM | proto::TFLAG_SEND_WRITE_ZEROES | proto::TFLAG_SEND_FAST_ZERO;
    }
    if structured {
        f |= proto::TFLAG_SEND_DF;
    }
    f
}

/// Option haggling, within `deadline` in total. Returns what was negotiated
/// and the export chosen, or None when the client aborted or must be
/// disconnected.
pub(super) fn handshake(
    srv: &Server,
    rd: &mut RecvBuf,
    wr: &mut HsOut,
    deadline: Instant,
) -> io::Result<Option<(Negotiated, Export)>> {
    wr.write_all(&proto::greeting())?;
    let mut cf = [0u8; 4];
    read_by(rd, &mut cf, deadline)?;
    let no_zeroes = match proto::parse_client_flags(cf) {
        Ok(z) => z,
        Err(e) => {
            tracing::debug!("nbd: handshake: {e}");
            return Ok(None);
        }
    };
    let mut hs = Hs {
        srv,
        rd,
        wr,
        deadline,
        no_zeroes,
        structured: false,
        base_allocation: false,
        tls_up: false,
    };
    for _ in 0..MAX_OPTIONS {
        let mut h = [0u8; proto::OPTION_HEADER_BYTES];
        read_by(hs.rd, &mut h, deadline)?;
        let (opt, len) = match proto::parse_option_header(&h) {
            Ok(x) => x,
            Err(e) => {
                tracing::debug!("nbd: handshake: {e}");
                return Ok(None);
            }
        };
        if len > proto::MAX_OPTION_BYTES {
            if opt == proto::OPT_EXPORT_NAME {
                return Ok(None); // no way to answer with an error
            }
            skip_by(hs.rd, len as u64, deadline)?;
            hs.reply(opt, proto::REP_ERR_TOO_BIG, b"option too large")?;
            continue;
        }
        let mut data = vec![0u8; len as usize];
        read_by(hs.rd, &mut data, deadline)?;
        if srv.stopping.load(Ordering::Acquire) {
            if opt != proto::OPT_EXPORT_NAME {
                hs.reply(opt, proto::REP_ERR_SHUTDOWN, b"server is shutting down")?;
            }
            return Ok(None);
        }
        if srv.cfg.tls == TlsMode::Require
            && !hs.tls_up
            && !matches!(opt, proto::OPT_STARTTLS | proto::OPT_ABORT)
        {
            if opt == proto::OPT_EXPORT_NAME {
                tracing::debug!("nbd: handshake: EXPORT_NAME without TLS, which is required");
                return Ok(None);
            }
            hs.reply(
                opt,
                proto::REP_ERR_TLS_REQD,
                b"TLS is required: use STARTTLS",
            )?;
            continue;
        }
        let step = match OPTIONS.iter().find(|(o, _)| *o == opt) {
            Some((_, handler)) => handler(&mut hs, opt, &data)?,
            None => {
                hs.reply(opt, proto::REP_ERR_UNSUP, b"option not supported")?;
                Step::Next
            }
        };
        if let Step::End(r) = step {
            return Ok(r);
        }
    }
    Ok(None)
}

fn export_name(hs: &mut Hs<'_>, _opt: u32, data: &[u8]) -> io::Result<Step> {
    let exp = std::str::from_utf8(data)
        .ok()
        .and_then(|n| hs.srv.export(n));
    let Some(exp) = exp else {
        tracing::debug!("nbd: handshake: unknown export requested");
        return Ok(Step::End(None));
    };
    hs.wr.write_all(&proto::export_name_reply(
        exp.vol.size_bytes(),
        tflags(exp.read_only, hs.structured),
        hs.no_zeroes,
    ))?;
    Ok(Step::End(Some(hs.negotiated(exp, false))))
}

fn abort(hs: &mut Hs<'_>, opt: u32, _data: &[u8]) -> io::Result<Step> {
    let _ = hs.reply(opt, proto::REP_ACK, &[]);
    Ok(Step::End(None))
}

fn list(hs: &mut Hs<'_>, opt: u32, data: &[u8]) -> io::Result<Step> {
    if !data.is_empty() {
        hs.reply(opt, proto::REP_ERR_INVALID, b"LIST takes no data")?;
        return Ok(Step::Next);
    }
    let srv = hs.srv;
    for e in &srv.exports {
        hs.reply(
            opt,
            proto::REP_SERVER,
            &proto::rep_server(&e.name, &e.description),
        )?;
    }
    hs.reply(opt, proto::REP_ACK, &[])?;
    Ok(Step::Next)
}

fn starttls(hs: &mut Hs<'_>, opt: u32, data: &[u8]) -> io::Result<Step> {
    let srv = hs.srv;
    let Some(cfg) = srv
        .cfg
        .tls_config
        .as_ref()
        .filter(|_| srv.cfg.tls != TlsMode::Off)
    else {
        hs.reply(
            opt,
            proto::REP_ERR_POLICY,
            b"TLS is not enabled on this server",
        )?;
        return Ok(Step::Next);
    };
    if hs.tls_up || !data.is_empty() {
        hs.reply(
            opt,
            proto::REP_ERR_INVALID,
            b"TLS already negotiated, or STARTTLS with data",
        )?;
        return Ok(Step::Next);
    }
    hs.reply(opt, proto::REP_ACK, &[])?;
    if !hs.rd.buffer().is_empty() {
        tracing::debug!("nbd: handshake: plaintext after STARTTLS");
        return Ok(Step::End(None));
    }
    let session = Arc::new(tls::accept(cfg, &mut hs.wr.stream, hs.deadline)?);
    hs.wr
        .stream
        .set_write_timeout(Some(srv.cfg.handshake_timeout))?;
    // From here on the reader decrypts and replies are sealed.
    hs.rd.tls = Some(session.clone());
    hs.wr.tls = Some(session);
    // The spec: what was negotiated before TLS is forgotten.
    hs.structured = false;
    hs.base_allocation = false;
    hs.tls_up = true;
    Ok(Step::Next)
}

fn info_or_go(hs: &mut Hs<'_>, opt: u32, data: &[u8]) -> io::Result<Step> {
    let req = match proto::parse_info_request(data) {
        Ok(r) => r,
        Err(e) => {
            hs.reply(opt, proto::REP_ERR_INVALID, e.to_string().as_bytes())?;
            return Ok(Step::Next);
        }
    };
    let srv = hs.srv;
    let Some(exp) = srv.export(&req.name) else {
        hs.reply(opt, proto::REP_ERR_UNKNOWN, b"no such export")?;
        return Ok(Step::Next);
    };
    let tf = tflags(exp.read_only, hs.structured);
    hs.reply(
        opt,
        proto::REP_INFO,
        &proto::info_export(exp.vol.size_bytes(), tf),
    )?;
    for item in req.items {
        match item {
            proto::INFO_NAME => hs.reply(
                opt,
                proto::REP_INFO,
                &proto::info_string(proto::INFO_NAME, &exp.name),
            )?,
            proto::INFO_DESCRIPTION => hs.reply(
                opt,
                proto::REP_INFO,
                &proto::info_string(proto::INFO_DESCRIPTION, &exp.description),
            )?,
            _ => {}
        }
    }
    // Sent whether asked for or not: clients that did not ask may ignore it.
    hs.reply(opt, proto::REP_INFO, &proto::info_block_size())?;
    hs.reply(opt, proto::REP_ACK, &[])?;
    if opt == proto::OPT_GO {
        return Ok(Step::End(Some(hs.negotiated(exp, hs.base_allocation))));
    }
    Ok(Step::Next)
}

fn structured_reply(hs: &mut Hs<'_>, opt: u32, data: &[u8]) -> io::Result<Step> {
    if !data.is_empty() {
        hs.reply(
            opt,
            proto::REP_ERR_INVALID,
            b"STRUCTURED_REPLY takes no data",
        )?;
    } else {
        hs.structured = true;
        hs.reply(opt, proto::REP_ACK, &[])?;
    }
    Ok(Step::Next)
}

fn meta_context(hs: &mut Hs<'_>, opt: u32, data: &[u8]) -> io::Result<Step> {
    let list = opt == proto::OPT_LIST_META_CONTEXT;
    if !hs.structured {
        hs.reply(
            opt,
            proto::REP_ERR_INVALID,
            b"negotiate structured replies first",
        )?;
        return Ok(Step::Next);
    }
    let req = match proto::parse_meta_request(data) {
        Ok(r) => r,
        Err(e) => {
            hs.reply(opt, proto::REP_ERR_INVALID, e.to_string().as_bytes())?;
            return Ok(Step::Next);
        }
    };
    if hs.srv.export(&req.name).is_none() {
        hs.reply(opt, proto::REP_ERR_UNKNOWN, b"no such export")?;
        return Ok(Step::Next);
    }
    let selected = if list && req.queries.is_empty() {
        true
    } else {
        req.queries
            .iter()
            .any(|q| proto::query_selects_base_allocation(q, list))
    };
    if !list {
        hs.base_allocation = selected;
    }
    if selected {
        let id = if list { 0 } else { proto::BASE_ALLOCATION_ID };
        hs.reply(
            opt,
            proto::REP_META_CONTEXT,
            &proto::rep_meta_context(id, proto::BASE_ALLOCATION),
        )?;
    }
    hs.reply(opt, proto::REP_ACK, &[])?;
    Ok(Step::Next)
}

/// Tell a client over the connection limit why it cannot be served: answer
/// its options with `NBD_REP_ERR_POLICY` (libnbd and qemu print the message),
/// then close. Bounded: a few seconds and a few options.
pub(super) fn refuse(stream: Stream, limit: usize) {
    let deadline = Instant::now() + Duration::from_secs(5);
    let _ = stream.set_write_timeout(Some(Duration::from_secs(2)));
    let Ok(mut wr) = stream.try_clone() else {
        return;
    };
    let mut rd = RecvBuf::new(stream, 4096);
    let msg = format!("too many connections: this server serves at most {limit}; try again later");
    let r = (|| -> io::Result<()> {
        wr.write_all(&proto::greeting())?;
        let mut cf = [0u8; 4];
        read_by(&mut rd, &mut cf, deadline)?;
        if proto::parse_client_flags(cf).is_err() {
            return Ok(());
        }
        for _ in 0..16 {
            let mut h = [0u8; proto::OPTION_HEADER_BYTES];
            read_by(&mut rd, &mut h, deadline)?;
            let Ok((opt, len)) = proto::parse_option_header(&h) else {
                return Ok(());
            };
            if opt == proto::OPT_EXPORT_NAME || len > proto::MAX_OPTION_BYTES {
                return Ok(());
            }
            skip_by(&mut rd, len as u64, deadline)?;
            if opt == proto::OPT_ABORT {
                wr.write_all(&proto::option_reply(opt, proto::REP_ACK, &[]))?;
                return Ok(());
            }
            wr.write_all(&proto::option_reply(
                opt,
                proto::REP_ERR_POLICY,
                msg.as_bytes(),
            ))?;
        }
        Ok(())
    })();
    if let Err(e) = r {
        tracing::debug!("nbd: refused client: {e}");
    }
    rd.get_ref().shutdown(Shutdown::Both);
}
