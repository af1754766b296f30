//! Line parsers, one per format. Each returns Ok(None) for lines that carry no
//! request (headers, comments, reads of other actions), Ok(Some(req)) for a
//! request, Err(message) for a malformed line (the caller adds the line number).
//!
//! Invariant: no parser panics on any input and no request has len 0.

use super::{Format, Op, ParseState, Req};

const SECTOR: u64 = 512;

fn num<T: std::str::FromStr>(field: Option<&str>, what: &str) -> Result<T, String> {
    let f = field.ok_or_else(|| format!("missing field {what}"))?.trim();
    f.parse::<T>()
        .map_err(|_| format!("field {what}: {f:?} is not a number"))
}

fn req(op: Op, dev: u32, offset: u64, len: u64) -> Result<Option<Req>, String> {
    if len == 0 && op != Op::Flush {
        return Ok(None);
    }
    offset
        .checked_add(len)
        .ok_or_else(|| format!("offset {offset} + length {len} overflows"))?;
    Ok(Some(Req {
        op,
        dev,
        offset,
        len,
    }))
}

fn sectors(v: u64, what: &str) -> Result<u64, String> {
    v.checked_mul(SECTOR)
        .ok_or_else(|| format!("{what} {v} sectors overflows"))
}

/// Parse one line of `fmt`.
pub fn parse_line(fmt: Format, st: &mut ParseState, line: &str) -> Result<Option<Req>, String> {
    let t = line.trim();
    if t.is_empty() || t.starts_with('#') {
        return Ok(None);
    }
    match fmt {
        Format::Msr => msr(t),
        Format::Spc => spc(t),
        Format::Disksim => disksim(t),
        Format::CloudPhysics => cloudphysics(t),
        Format::Blkparse => blkparse(st, t),
        Format::Fio => fio(st, t),
        Format::Sluice => super::capture::parse_line(t),
    }
}

fn msr(t: &str) -> Result<Option<Req>, String> {
    let f: Vec<&str> = t.split(',').collect();
    if f.len() < 6 {
        return Err(format!(
            "expected 7 comma-separated fields, found {}",
            f.len()
        ));
    }
    if f[0].trim().eq_ignore_ascii_case("timestamp") {
        return Ok(None);
    }
    let _ts: u64 = num(Some(f[0]), "Timestamp")?;
    let dev: u32 = num(Some(f[2]), "DiskNumber")?;
    let op = match f[3].trim().to_ascii_lowercase().as_str() {
        "read" | "r" => Op::Read,
        "write" | "w" => Op::Write,
        other => return Err(format!("field Type: {other:?} is not Read or Write")),
    };
    let offset: u64 = num(Some(f[4]), "Offset")?;
    let len: u64 = num(Some(f[5]), "Size")?;
    req(op, dev, offset, len)
}

fn spc(t: &str) -> Result<Option<Req>, String> {
    let f: Vec<&str> = t.split(',').collect();
    if f.len() < 4 {
        return Err(format!(
            "expected 5 comma-separated fields, found {}",
            f.len()
        ));
    }
    let asu: u32 = num(Some(f[0]), "ASU")?;
    let lba: u64 = num(Some(f[1]), "LBA")?;
    let len: u64 = num(Some(f[2]), "Size")?;
    let op = match f[3].trim() {
        "r" | "R" => Op::Read,
        "w" | "W" => Op::Write,
        other => return Err(format!("field Opcode: {other:?} is not r or w")),
    };
    if let Some(ts) = f.get(4) {
        num::<f64>(Some(ts), "Timestamp")?;
    }
    req(op, asu, sectors(lba, "LBA")?, len)
}

fn disksim(t: &str) -> Result<Option<Req>, String> {
    let f: Vec<&str> = t.split_whitespace().collect();
    if f.len() != 5 {
        return Err(format!("expected 5 fields, found {}", f.len()));
    }
    num::<f64>(Some(f[0]), "arrival time")?;
    let dev: u32 = num(Some(f[1]), "device")?;
    let lba: u64 = num(Some(f[2]), "LBA")?;
    let size: u64 = num(Some(f[3]), "size")?;
    let flags: u32 = num(Some(f[4]), "type")?;
    let op = if flags & 1 == 1 { Op::Read } else { Op::Write };
    req(op, dev, sectors(lba, "LBA")?, sectors(size, "size")?)
}

fn cloudphysics(t: &str) -> Result<Option<Req>, String> {
    let f: Vec<&str> = t.split(',').collect();
    if f.len() != 5 {
        return Err(format!(
            "expected 5 comma-separated fields, found {}",
            f.len()
        ));
    }
    if f[0].trim() == "version" {
        return Ok(None);
    }
    num::<u32>(Some(f[0]), "version")?;
    num::<u64>(Some(f[1]), "time")?;
    let opc = u8::from_str_radix(f[2].trim(), 16)
        .map_err(|_| format!("field op: {:?} is not a hex SCSI opcode", f[2].trim()))?;
    let len: u64 = num(Some(f[3]), "size")?;
    let lbn: u64 = num(Some(f[4]), "lbn")?;
    let op = match opc {
        0x08 | 0x28 | 0xa8 | 0x88 => Op::Read,
        0x0a | 0x2a | 0xaa | 0x8a => Op::Write,
        0x42 => Op::Trim,
        0x35 | 0x91 => Op::Flush,
        _ => return Ok(None),
    };
    req(op, 0, sectors(lbn, "lbn")?, len)
}

/// `  8,0    3        1     0.000000000   697  Q   W 223490 + 8 [kjournald]`
fn blkparse(st: &mut ParseState, t: &str) -> Result<Option<Req>, String> {
    if st.blkparse_done {
        return Ok(None);
    }
    // The per-CPU summary that ends blkparse output.
    if t.starts_with("CPU") || t.starts_with("Total") {
        st.blkparse_done = true;
        return Ok(None);
    }
    let f: Vec<&str> = t.split_whitespace().collect();
    if f.len() < 7 {
        return Err(format!("expected at least 7 fields, found {}", f.len()));
    }
    let dev = f[0]
        .split_once(',')
        .and_then(|(a, b)| Some((a.parse::<u32>().ok()?, b.parse::<u32>().ok()?)))
        .ok_or_else(|| format!("field device: {:?} is not major,minor", f[0]))?;
    num::<f64>(Some(f[3]), "time")?;
    if f[5] != "Q" {
        return Ok(None);
    }
    let rwbs = f[6];
    let op = if rwbs.contains('D') {
        Op::Trim
    } else if rwbs.contains('W') {
        Op::Write
    } else if rwbs.contains('R') {
        Op::Read
    } else if rwbs.contains('F') {
        return Ok(Some(Req {
            op: Op::Flush,
            dev: dev.0 << 20 | dev.1,
            offset: 0,
            len: 0,
        }));
    } else {
        return Ok(None);
    };
    if f.len() < 10 || f[8] != "+" {
        return Err("expected `sector + count` after RWBS".into());
    }
    let sector: u64 = num(Some(f[7]), "sector")?;
    let count: u64 = num(Some(f[9]), "sector count")?;
    req(
        op,
        dev.0 << 20 | dev.1,
        sectors(sector, "sector")?,
        sectors(count, "count")?,
    )
}

/// fio iolog v2: `fio version 2 iolog`, then `file action [offset length]`.
/// v3 prefixes each line with a timestamp in ms.
fn fio(st: &mut ParseState, t: &str) -> Result<Option<Req>, String> {
    if let Some(v) = t.strip_prefix("fio version ") {
        let v = v.trim_end_matches("iolog").trim();
        let v: u32 = v
            .parse()
            .map_err(|_| format!("bad fio iolog header {t:?}"))?;
        if v != 2 && v != 3 {
            return Err(format!("fio iolog version {v} is not supported (2 or 3)"));
        }
        st.fio_version = Some(v);
        return Ok(None);
    }
    let v = st
        .fio_version
        .ok_or("fio iolog without a `fio version N iolog` header")?;
    let mut f: Vec<&str> = t.split_whitespace().collect();
    if v == 3 {
        if f.is_empty() {
            return Ok(None);
        }
        num::<u64>(Some(f[0]), "timestamp")?;
        f.remove(0);
    }
    if f.len() < 2 {
        return Err(format!(
            "expected `file action ...`, found {} fields",
            f.len()
        ));
    }
    let op = match f[1] {
        "add" | "open" | "close" | "wait" => return Ok(None),
        "read" => Op::Read,
        "write" => Op::Write,
        "trim" => Op::Trim,
        "sync" | "datasync" => {
            return Ok(Some(Req {
                op: Op::Flush,
                dev: 0,
                offset: 0,
                len: 0,
            }))
        }
        other => return Err(format!("unknown fio action {other:?}")),
    };
    if f.len() != 4 {
        return Err(format!("{} needs offset and length", f[1]));
    }
    let offset: u64 = num(Some(f[2]), "offset")?;
    let len: u64 = num(Some(f[3]), "length")?;
    req(op, 0, offset, len)
}

#[cfg(test)]
mod tests {
    use super::super::{parse_str, Format, Op, TraceError};

    fn err_line(fmt: Format, s: &str) -> u64 {
        match parse_str(fmt, s, false) {
            Err(TraceError::Malformed { line, .. }) => line,
            other => panic!("expected a malformed-line error, got {other:?}"),
        }
    }

    #[test]
    fn msr_cambridge() {
        let s = "128166372003061629,wdev,0,Read,3115590144,4096,10682\n\
                 128166372016382155,wdev,0,Write,3926052864,8192,14573\n";
        let t = parse_str(Format::Msr, s, false).unwrap();
        assert_eq!(t.reqs.len(), 2);
        assert_eq!(t.reqs[1].op, Op::Write);
        assert_eq!(t.reqs[1].offset, 3926052864);
        assert_eq!(t.reqs[1].len, 8192);
        let bad = format!("{s}128166372016382155,wdev,0,Scribble,0,4096,1\n");
        assert_eq!(err_line(Format::Msr, &bad), 3);
        let l = parse_str(Format::Msr, &bad, true).unwrap();
        assert_eq!((l.reqs.len(), l.skipped), (2, 1));
    }

    #[test]
    fn spc_umass() {
        let s = "0,303567,3584,w,0.000000\n1,55590,3072,r,0.000150\n";
        let t = parse_str(Format::Spc, s, false).unwrap();
        assert_eq!(t.reqs[0].offset, 303567 * 512);
        assert_eq!(t.reqs[0].len, 3584);
        assert_eq!(t.reqs[0].op, Op::Write);
        assert_eq!(t.reqs[1].dev, 1);
        assert_eq!(err_line(Format::Spc, "0,1,512,w,0.0\n0,x,512,w,0.1\n"), 2);
    }

    #[test]
    fn disksim_mqsim() {
        let s = "938513000 4 264719034 16 0\n11413000 0 657728 16 1\n";
        let t = parse_str(Format::Disksim, s, false).unwrap();
        assert_eq!(t.reqs[0].op, Op::Write);
        assert_eq!(t.reqs[0].dev, 4);
        assert_eq!(t.reqs[0].offset, 264719034 * 512);
        assert_eq!(t.reqs[0].len, 8192);
        assert_eq!(t.reqs[1].op, Op::Read);
        assert_eq!(err_line(Format::Disksim, "1 0 0 8 0\n2 0 0 8\n"), 2);
        let l = parse_str(Format::Disksim, "1 0 0 8 0\n2 0 0 8\nzz\n3 0 8 8 0\n", true).unwrap();
        assert_eq!((l.reqs.len(), l.skipped), (2, 2));
    }

    #[test]
    fn cloudphysics_csv() {
        let s = "version,time,op,size,lbn\n1,5633898,2a,512,42932745\n1,5633898,28,4096,8\n1,5,42,4096,16\n";
        let t = parse_str(Format::CloudPhysics, s, false).unwrap();
        assert_eq!(t.reqs.len(), 3);
        assert_eq!(t.reqs[0].op, Op::Write);
        assert_eq!(t.reqs[0].offset, 42932745 * 512);
        assert_eq!(t.reqs[0].len, 512);
        assert_eq!(t.reqs[1].op, Op::Read);
        assert_eq!(t.reqs[2].op, Op::Trim);
        assert_eq!(
            err_line(
                Format::CloudPhysics,
                "version,time,op,size,lbn\n1,2,zz,512,1\n"
            ),
            2
        );
    }

    #[test]
    fn blkparse_text() {
        let s = "  8,0    3        1     0.000000000   697  Q   W 223490 + 8 [kjournald]\n\
                 \x20 8,0    3        2     0.000001000   697  G   W 223490 + 8 [kjournald]\n\
                 \x20 8,0    0        3     0.000100000   700  Q   D 1000 + 64 [fstrim]\n\
                 \x20 8,0    0        4     0.000200000   700  Q  RA 5000 + 16 [cat]\n\
                 CPU0 (8,0):\n Reads Queued:  1, 8KiB\n";
        let t = parse_str(Format::Blkparse, s, false).unwrap();
        assert_eq!(t.reqs.len(), 3);
        assert_eq!(t.reqs[0].op, Op::Write);
        assert_eq!(t.reqs[0].offset, 223490 * 512);
        assert_eq!(t.reqs[0].len, 4096);
        assert_eq!(t.reqs[1].op, Op::Trim);
        assert_eq!(t.reqs[2].op, Op::Read);
        assert_eq!(
            err_line(Format::Blkparse, "  8,0 3 1 0.0 697 Q W 223490 + x [k]\n"),
            1
        );
    }

    #[test]
    fn fio_iolog_v2_v3() {
        let v2 = "fio version 2 iolog\n/dev/sdb add\n/dev/sdb open\n/dev/sdb write 4096 8192\n/dev/sdb trim 0 4096\n/dev/sdb close\n";
        let t = parse_str(Format::Fio, v2, false).unwrap();
        assert_eq!(t.reqs.len(), 2);
        assert_eq!(
            (t.reqs[0].op, t.reqs[0].offset, t.reqs[0].len),
            (Op::Write, 4096, 8192)
        );
        assert_eq!(t.reqs[1].op, Op::Trim);
        let v3 = "fio version 3 iolog\n0 /dev/sdb add\n10 /dev/sdb open\n15 /dev/sdb read 0 4096\n20 /dev/sdb write 8192 4096\n";
        let t = parse_str(Format::Fio, v3, false).unwrap();
        assert_eq!(t.reqs.len(), 2);
        assert_eq!(t.reqs[1].offset, 8192);
        assert_eq!(
            err_line(Format::Fio, "fio version 2 iolog\n/dev/sdb write 4096\n"),
            2
        );
        assert_eq!(err_line(Format::Fio, "/dev/sdb write 0 4096\n"), 1);
        let l = parse_str(
            Format::Fio,
            "fio version 2 iolog\n/dev/sdb frob 1 2\n/dev/sdb write 0 4096\n",
            true,
        )
        .unwrap();
        assert_eq!((l.reqs.len(), l.skipped), (1, 1));
    }
}
