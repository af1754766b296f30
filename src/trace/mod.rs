//! Trace: block IO traces read from the formats the WA lab replays (MSR Cambridge,
//! SPC/UMass, DiskSim/MQSim ASCII, CloudPhysics CSV, blkparse text, fio iolog v2/v3
//! and sluice's own capture format), turned into one request type.
//!
//! Invariant: a parser never panics on input; a malformed line is either an error
//! naming its 1-based line number or, with `lenient`, skipped and counted. Every
//! request it yields has `len > 0` and an offset/length in bytes.

pub mod capture;
mod parsers;

pub use capture::{is_trace, read_header, Header, Recorder, VolumeInfo};
pub use parsers::parse_line;

use std::io::BufRead;
use std::path::Path;

/// What a request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Op {
    Read,
    Write,
    Trim,
    /// Write zeroes (capture format only).
    Zero,
    Flush,
}

impl Op {
    pub fn letter(self) -> char {
        match self {
            Op::Read => 'R',
            Op::Write => 'W',
            Op::Trim => 'T',
            Op::Zero => 'Z',
            Op::Flush => 'F',
        }
    }
}

/// One request, addresses in bytes within device `dev`'s space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Req {
    pub op: Op,
    pub dev: u32,
    pub offset: u64,
    pub len: u64,
}

/// The trace formats understood.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// MSR Cambridge CSV: Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime.
    Msr,
    /// SPC / UMass: ASU,LBA(512 B),Size(bytes),Opcode(r/w),Timestamp.
    Spc,
    /// DiskSim / MQSim ASCII: time dev LBA(512 B) size(512 B) flags (bit 0 set = read).
    Disksim,
    /// CloudPhysics vSCSI CSV: version,time,op(SCSI opcode hex),size(bytes),lbn(512 B).
    CloudPhysics,
    /// blkparse default text output (Q events are used).
    Blkparse,
    /// fio iolog version 2 or 3 (detected from the header line).
    Fio,
    /// sluice capture (`sluice serve --record`).
    Sluice,
}

impl Format {
    pub fn parse(s: &str) -> Result<Format, String> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "msr" | "msr-cambridge" => Format::Msr,
            "spc" | "umass" => Format::Spc,
            "disksim" | "mqsim" => Format::Disksim,
            "cloudphysics" | "cp" | "vscsi-csv" => Format::CloudPhysics,
            "blkparse" | "blktrace" => Format::Blkparse,
            "fio" | "iolog" | "fio-iolog" => Format::Fio,
            "sluice" | "capture" => Format::Sluice,
            _ => {
                return Err(format!(
                    "unknown trace format {s:?} (msr, spc, disksim, mqsim, cloudphysics, blkparse, fio, sluice)"
                ))
            }
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            Format::Msr => "msr",
            Format::Spc => "spc",
            Format::Disksim => "disksim",
            Format::CloudPhysics => "cloudphysics",
            Format::Blkparse => "blkparse",
            Format::Fio => "fio",
            Format::Sluice => "sluice",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("line {line}: {msg}")]
    Malformed { line: u64, msg: String },
    #[error("reading trace: {0}")]
    Io(std::io::Error),
}

impl From<std::io::Error> for TraceError {
    fn from(e: std::io::Error) -> Self {
        TraceError::Io(e)
    }
}

/// A parsed trace.
#[derive(Debug, Default, Clone)]
pub struct Trace {
    pub reqs: Vec<Req>,
    /// Lines skipped as malformed (lenient mode only).
    pub skipped: u64,
    /// Lines read (including headers and comments).
    pub lines: u64,
}

impl Trace {
    pub fn bytes(&self, op: Op) -> u64 {
        self.reqs.iter().filter(|r| r.op == op).map(|r| r.len).sum()
    }
    pub fn count(&self, op: Op) -> u64 {
        self.reqs.iter().filter(|r| r.op == op).count() as u64
    }
}

/// Per-stream parser state (header seen, fio version, first timestamp).
#[derive(Debug, Default, Clone)]
pub struct ParseState {
    pub fio_version: Option<u32>,
    pub blkparse_done: bool,
}

/// Parse a whole trace from a reader.
pub fn parse_reader(fmt: Format, r: impl BufRead, lenient: bool) -> Result<Trace, TraceError> {
    let mut t = Trace::default();
    let mut st = ParseState::default();
    let mut no = 0u64;
    for line in r.split(b'\n') {
        let line = line?;
        no += 1;
        let s = String::from_utf8_lossy(&line);
        match parse_line(fmt, &mut st, s.trim_end_matches('\r')) {
            Ok(Some(req)) => t.reqs.push(req),
            Ok(None) => {}
            Err(msg) => {
                if lenient {
                    t.skipped += 1;
                } else {
                    return Err(TraceError::Malformed { line: no, msg });
                }
            }
        }
    }
    t.lines = no;
    Ok(t)
}

/// Parse a string (tests, small samples).
pub fn parse_str(fmt: Format, s: &str, lenient: bool) -> Result<Trace, TraceError> {
    parse_reader(fmt, s.as_bytes(), lenient)
}

/// Open a trace file; `.gz` files are decompressed on the fly.
pub fn parse_file(fmt: Format, path: &Path, lenient: bool) -> Result<Trace, TraceError> {
    let f = std::fs::File::open(path)?;
    if path.extension().is_some_and(|e| e == "gz") {
        let r = std::io::BufReader::with_capacity(1 << 20, flate2::read::MultiGzDecoder::new(f));
        parse_reader(fmt, r, lenient)
    } else {
        parse_reader(fmt, std::io::BufReader::with_capacity(1 << 20, f), lenient)
    }
}

/// Guess a format from a file name (used when --format is not given).
pub fn guess_format(path: &Path) -> Option<Format> {
    let n = path.file_name()?.to_string_lossy().to_ascii_lowercase();
    let n = n.trim_end_matches(".gz");
    if n.contains("cloudphysics") {
        Some(Format::CloudPhysics)
    } else if n.ends_with(".trace") || n.ends_with(".disksim") {
        Some(Format::Disksim)
    } else if n.ends_with(".spc") {
        Some(Format::Spc)
    } else if n.ends_with(".blkparse") {
        Some(Format::Blkparse)
    } else if n.ends_with(".iolog") || n.ends_with(".log") && n.contains("iolog") {
        Some(Format::Fio)
    } else if n.ends_with(".sltr") || n.ends_with(".sluice") {
        Some(Format::Sluice)
    } else if n.ends_with(".csv") {
        Some(Format::Msr)
    } else {
        None
    }
}
