//! Capture: sluice's own trace format and the `Recorder` a live server calls once
//! per request (`sluice serve --record FILE`).
//!
//! Format (text, one request a line, replayable with `--format sluice`):
//! ```text
//! # sluice-trace v1
//! <time_us since start> <op> <offset bytes> <length bytes>
//! ```
//! `op` is one letter: W write, R read, T trim, Z write-zeroes, F flush (offset
//! and length 0). Lines starting with `#` are comments. A server also writes, right
//! after the header, the volume it recorded on:
//! ```text
//! # volume logical_bytes=N segment_bytes=N overprovision_pct=F gc=NAME live_bytes=N
//! ```
//! which `sluice replay` uses by default so a replay runs on the same geometry.
//!
//! Invariant: the recorder writes whole lines under one lock, so concurrent
//! callers never interleave within a line; `finish` (or drop) flushes them.

use super::{Op, Req};
use parking_lot::Mutex;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::time::Instant;

pub const HEADER: &str = "# sluice-trace v1";

/// Does a file starting with `head` hold a sluice trace (so `--record` may
/// replace it)?
pub fn is_trace(head: &[u8]) -> bool {
    head.starts_with(HEADER.as_bytes())
}

pub struct Recorder {
    out: Mutex<Option<BufWriter<Box<dyn Write + Send>>>>,
    start: Instant,
}

impl Recorder {
    /// Record to a file the caller opened (by the rules of `media::outfile`).
    pub fn to_file(f: std::fs::File) -> io::Result<Recorder> {
        Recorder::to_writer(Box::new(f))
    }

    pub fn to_writer(w: Box<dyn Write + Send>) -> io::Result<Recorder> {
        let mut b = BufWriter::with_capacity(1 << 20, w);
        writeln!(b, "{HEADER}")?;
        Ok(Recorder {
            out: Mutex::new(Some(b)),
            start: Instant::now(),
        })
    }

    /// Record one request (call it when the request arrives).
    pub fn record(&self, op: Op, offset: u64, len: u64) -> io::Result<()> {
        let us = self.start.elapsed().as_micros() as u64;
        match self.out.lock().as_mut() {
            Some(w) => writeln!(w, "{us} {} {offset} {len}", op.letter()),
            None => Err(io::Error::other("recorder already finished")),
        }
    }

    /// Write a comment line (`# text`), e.g. the recorded volume's geometry.
    pub fn comment(&self, text: &str) -> io::Result<()> {
        match self.out.lock().as_mut() {
            Some(w) => writeln!(w, "# {text}"),
            None => Err(io::Error::other("recorder already finished")),
        }
    }

    /// Flush buffered lines to the file.
    pub fn flush(&self) -> io::Result<()> {
        match self.out.lock().as_mut() {
            Some(w) => w.flush(),
            None => Ok(()),
        }
    }

    /// Flush and close; later `record` calls fail.
    pub fn finish(&self) -> io::Result<()> {
        match self.out.lock().take() {
            Some(mut w) => w.flush(),
            None => Ok(()),
        }
    }
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Recorder")
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

/// The volume a trace was recorded on (its `# volume ...` header line).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct VolumeInfo {
    pub logical_bytes: u64,
    pub segment_bytes: u64,
    pub overprovision_pct: f64,
    pub gc: String,
    /// Live data on the volume when recording started.
    pub live_bytes: u64,
}

impl VolumeInfo {
    pub fn of(vol: &crate::Volume) -> VolumeInfo {
        let g = vol.geometry();
        VolumeInfo {
            logical_bytes: vol.size_bytes(),
            segment_bytes: g.segment_bytes(),
            overprovision_pct: vol.superblock().overprovision_bp as i32 as f64 / 100.0,
            gc: vol.gc_policy().name().to_string(),
            live_bytes: vol.stats().live_data_blocks * 4096,
        }
    }
    /// The comment text (without `# `).
    pub fn line(&self) -> String {
        format!(
            "volume logical_bytes={} segment_bytes={} overprovision_pct={} gc={} live_bytes={}",
            self.logical_bytes,
            self.segment_bytes,
            self.overprovision_pct,
            self.gc,
            self.live_bytes
        )
    }
    /// Parse a `# volume ...` line; None if it is not one or a field is malformed.
    pub fn parse(line: &str) -> Option<VolumeInfo> {
        let rest = line.strip_prefix('#')?.trim().strip_prefix("volume ")?;
        let mut v = VolumeInfo {
            logical_bytes: 0,
            segment_bytes: 0,
            overprovision_pct: 0.0,
            gc: String::new(),
            live_bytes: 0,
        };
        for kv in rest.split_whitespace() {
            let (k, val) = kv.split_once('=')?;
            match k {
                "logical_bytes" => v.logical_bytes = val.parse().ok()?,
                "segment_bytes" => v.segment_bytes = val.parse().ok()?,
                "overprovision_pct" => v.overprovision_pct = val.parse().ok()?,
                "gc" => v.gc = val.to_string(),
                "live_bytes" => v.live_bytes = val.parse().ok()?,
                _ => {}
            }
        }
        (v.logical_bytes > 0 && v.segment_bytes > 0).then_some(v)
    }
}

/// What the first lines of a trace file say about it.
#[derive(Debug, Clone, Default)]
pub struct Header {
    /// Starts with `# sluice-trace v1`.
    pub sluice: bool,
    pub volume: Option<VolumeInfo>,
}

/// Read the leading comment lines of a trace file (`.gz` decompressed).
pub fn read_header(path: &Path) -> io::Result<Header> {
    use std::io::BufRead;
    let f = std::fs::File::open(path)?;
    let r: Box<dyn BufRead> = if path.extension().is_some_and(|e| e == "gz") {
        Box::new(io::BufReader::new(flate2::read::MultiGzDecoder::new(f)))
    } else {
        Box::new(io::BufReader::new(f))
    };
    let mut h = Header::default();
    for (i, line) in r.split(b'\n').take(16).enumerate() {
        let Ok(line) = line else { break };
        let s = String::from_utf8_lossy(&line);
        let s = s.trim_end();
        if i == 0 {
            h.sluice = s == HEADER;
            if !h.sluice {
                break;
            }
        } else if !s.starts_with('#') {
            break;
        } else if let Some(v) = VolumeInfo::parse(s) {
            h.volume = Some(v);
        }
    }
    Ok(h)
}

pub(super) fn parse_line(t: &str) -> Result<Option<Req>, String> {
    let f: Vec<&str> = t.split_whitespace().collect();
    if f.len() != 4 {
        return Err(format!(
            "expected `time op offset length`, found {} fields",
            f.len()
        ));
    }
    f[0].parse::<u64>()
        .map_err(|_| format!("time {:?} is not a number", f[0]))?;
    let op = match f[1] {
        "W" => Op::Write,
        "R" => Op::Read,
        "T" => Op::Trim,
        "Z" => Op::Zero,
        "F" => Op::Flush,
        o => return Err(format!("op {o:?} is not one of W R T Z F")),
    };
    let offset: u64 = f[2]
        .parse()
        .map_err(|_| format!("offset {:?} is not a number", f[2]))?;
    let len: u64 = f[3]
        .parse()
        .map_err(|_| format!("length {:?} is not a number", f[3]))?;
    offset
        .checked_add(len)
        .ok_or_else(|| "offset + length overflows".to_string())?;
    if len == 0 && op != Op::Flush {
        return Ok(None);
    }
    Ok(Some(Req {
        op,
        dev: 0,
        offset,
        len,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{parse_file, Format, TraceError};

    #[test]
    fn recorder_round_trips_through_the_parser() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.sltr");
        let r = Recorder::to_file(std::fs::File::create(&p).unwrap()).unwrap();
        r.record(Op::Write, 4096, 8192).unwrap();
        r.record(Op::Trim, 0, 4096).unwrap();
        r.record(Op::Flush, 0, 0).unwrap();
        r.record(Op::Zero, 1 << 20, 4096).unwrap();
        r.finish().unwrap();
        assert!(r.record(Op::Read, 0, 1).is_err());
        let t = parse_file(Format::Sluice, &p, false).unwrap();
        let ops: Vec<Op> = t.reqs.iter().map(|q| q.op).collect();
        assert_eq!(ops, vec![Op::Write, Op::Trim, Op::Flush, Op::Zero]);
        assert_eq!((t.reqs[0].offset, t.reqs[0].len), (4096, 8192));
        std::fs::write(&p, format!("{HEADER}\n1 W 0 4096\n2 Q 0 4096\n")).unwrap();
        match parse_file(Format::Sluice, &p, false) {
            Err(TraceError::Malformed { line: 3, .. }) => {}
            o => panic!("expected error at line 3, got {o:?}"),
        }
        assert_eq!(parse_file(Format::Sluice, &p, true).unwrap().skipped, 1);
    }

    #[test]
    fn header_carries_the_format_and_the_volume() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("work.trace");
        let r = Recorder::to_file(std::fs::File::create(&p).unwrap()).unwrap();
        let v = VolumeInfo {
            logical_bytes: 64 << 20,
            segment_bytes: 4 << 20,
            overprovision_pct: 10.0,
            gc: "greedy".into(),
            live_bytes: 8192,
        };
        r.comment(&v.line()).unwrap();
        r.record(Op::Write, 0, 4096).unwrap();
        r.finish().unwrap();
        let h = read_header(&p).unwrap();
        assert!(h.sluice);
        assert_eq!(h.volume, Some(v));
        // Comments do not disturb the parser.
        assert_eq!(parse_file(Format::Sluice, &p, false).unwrap().reqs.len(), 1);
        std::fs::write(&p, "0 0 8 8 0\n").unwrap();
        let h = read_header(&p).unwrap();
        assert!(!h.sluice && h.volume.is_none());
    }
}
