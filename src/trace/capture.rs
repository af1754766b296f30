//! Capture: sluice's own trace format and the `Recorder` a live server calls once
//! per request (`sluice serve --record FILE`).
//!
//! Format (text, one request a line, replayable with `--format sluice`):
//! ```text
//! # sluice-trace v1
//! <time_us since start> <op> <offset bytes> <length bytes>
//! ```
//! `op` is one letter: W write, R read, T trim, Z write-zeroes, F flush (offset
//! and length 0). Lines starting with `#` are comments.
//!
//! Invariant: the recorder writes whole lines under one lock, so concurrent
//! callers never interleave within a line; `finish` (or drop) flushes them.

use super::{Op, Req};
use parking_lot::Mutex;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::time::Instant;

pub const HEADER: &str = "# sluice-trace v1";

pub struct Recorder {
    out: Mutex<Option<BufWriter<Box<dyn Write + Send>>>>,
    start: Instant,
}

impl Recorder {
    /// Create (truncate) `path` and write the header.
    pub fn create(path: &Path) -> io::Result<Recorder> {
        Recorder::to_writer(Box::new(std::fs::File::create(path)?))
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

impl Drop for Recorder {
    fn drop(&mut self) {
        let _ = self.finish();
    }
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
        let r = Recorder::create(&p).unwrap();
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
}
