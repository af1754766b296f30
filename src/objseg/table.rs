//! The slot table of a volume in an object store: for every segment slot of
//! the engine, which object (sequence, epoch) holds its current life, or
//! none (the slot's content is in the local staging file). One small file in
//! the cache directory (`objects.tab`), next to the local metadata file.
//!
//! Invariant: the file says "slot S is in object O" only while O holds S's
//! current content: a record is set after O was stored (put_new returned
//! Ok) and cleared, durably, before S's next life is written or O deleted.
//! Each `set` is one `pwrite` of a 32-byte record (never crossing a 512-byte
//! sector, so a crash leaves the old or the new record) followed by
//! `fdatasync`; each record carries its own CRC32C, so a damaged record is
//! an error naming the slot, never a wrong object.
//!
//! Layout: a 4 KiB header (magic `SLUICEOT`, version 1, segment count and
//! blocks, flags u32 at byte 20 (bit 0: the store-durable mode, a FLUSH is
//! durable in the store, `durable.rs`), the volume's uuid, the last writer epoch that held the volume
//! through this cache, CRC32C) then one record per slot: seq u64, epoch u64,
//! the object's CRC32C u32, 8 reserved zero bytes, the record's CRC32C u32
//! over its first 28 bytes. All zeros is "local" (seq 0 is never used).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

const MAGIC: [u8; 8] = *b"SLUICEOT";
const VERSION: u32 = 1;
const HEADER: u64 = 4096;
const REC: usize = 32;

/// Where a slot's current life is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjRef {
    pub seq: u64,
    pub epoch: u64,
    /// CRC32C of the whole object (checked by `sluice check`).
    pub crc: u32,
}

pub struct Table {
    file: File,
    path: PathBuf,
    pub uuid: [u8; 16],
    pub segment_count: u32,
    pub segment_blocks: u32,
    /// The newest epoch that wrote the volume through this cache.
    pub epoch: u64,
    /// Every sequence number handed out so far is below it (objects of an
    /// earlier life may be deleted: the listing alone cannot say).
    pub seq_floor: u64,
    pub slots: Vec<Option<ObjRef>>,
    /// The store-durable mode (`durable.rs`): recorded at create, honoured
    /// by every serve.
    pub store_durable: bool,
}

/// Header flag: the store-durable mode.
const FLAG_STORE_DURABLE: u32 = 1;

fn bad(path: &Path, why: String) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{}: {why}", path.display()),
    )
}

fn header_bytes(
    uuid: &[u8; 16],
    count: u32,
    blocks: u32,
    epoch: u64,
    floor: u64,
    flags: u32,
) -> [u8; 64] {
    let mut h = [0u8; 64];
    h[20..24].copy_from_slice(&flags.to_le_bytes());
    h[0..8].copy_from_slice(&MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h[12..16].copy_from_slice(&count.to_le_bytes());
    h[16..20].copy_from_slice(&blocks.to_le_bytes());
    h[24..40].copy_from_slice(uuid);
    h[40..48].copy_from_slice(&epoch.to_le_bytes());
    h[48..56].copy_from_slice(&floor.to_le_bytes());
    let crc = crc32c::crc32c(&h[..60]);
    h[60..64].copy_from_slice(&crc.to_le_bytes());
    h
}

/// A record's bytes (all zeros for a local slot).
pub fn encode(r: Option<ObjRef>) -> [u8; REC] {
    let mut b = [0u8; REC];
    if let Some(r) = r {
        assert!(
            r.seq > 0 && r.epoch > 0,
            "object refs have seq and epoch >= 1"
        );
        b[0..8].copy_from_slice(&r.seq.to_le_bytes());
        b[8..16].copy_from_slice(&r.epoch.to_le_bytes());
        b[16..20].copy_from_slice(&r.crc.to_le_bytes());
        let crc = crc32c::crc32c(&b[..28]);
        b[28..32].copy_from_slice(&crc.to_le_bytes());
    }
    b
}

/// A record, or why it is not one.
pub fn decode(b: &[u8]) -> Result<Option<ObjRef>, &'static str> {
    if b.iter().all(|&x| x == 0) {
        return Ok(None);
    }
    let crc = u32::from_le_bytes(b[28..32].try_into().unwrap());
    if crc32c::crc32c(&b[..28]) != crc {
        return Err("record fails its CRC");
    }
    let r = ObjRef {
        seq: u64::from_le_bytes(b[0..8].try_into().unwrap()),
        epoch: u64::from_le_bytes(b[8..16].try_into().unwrap()),
        crc: u32::from_le_bytes(b[16..20].try_into().unwrap()),
    };
    if r.seq == 0 || r.epoch == 0 || b[20..28].iter().any(|&x| x != 0) {
        return Err("record has seq or epoch 0 or reserved bytes set");
    }
    Ok(Some(r))
}

impl Table {
    /// A new table (every slot local); refuses an existing file.
    pub fn create(
        path: &Path,
        uuid: [u8; 16],
        count: u32,
        blocks: u32,
        epoch: u64,
    ) -> io::Result<Table> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)?;
        file.set_len(HEADER + count as u64 * REC as u64)?;
        file.write_all_at(&header_bytes(&uuid, count, blocks, epoch, 1, 0), 0)?;
        file.sync_all()?;
        if let Some(dir) = path.parent() {
            File::open(dir)?.sync_all()?;
        }
        Ok(Table {
            file,
            path: path.to_path_buf(),
            uuid,
            segment_count: count,
            segment_blocks: blocks,
            epoch,
            seq_floor: 1,
            slots: vec![None; count as usize],
            store_durable: false,
        })
    }

    pub fn open(path: &Path) -> io::Result<Table> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        let mut h = [0u8; 64];
        file.read_exact_at(&mut h, 0)
            .map_err(|e| bad(path, format!("header unreadable: {e}")))?;
        if h[0..8] != MAGIC {
            return Err(bad(path, "not a sluice object slot table".into()));
        }
        if crc32c::crc32c(&h[..60]) != u32::from_le_bytes(h[60..64].try_into().unwrap()) {
            return Err(bad(path, "header fails its CRC".into()));
        }
        let v = u32::from_le_bytes(h[8..12].try_into().unwrap());
        if v != VERSION {
            return Err(bad(
                path,
                format!("version {v}, this build reads {VERSION}"),
            ));
        }
        let count = u32::from_le_bytes(h[12..16].try_into().unwrap());
        let blocks = u32::from_le_bytes(h[16..20].try_into().unwrap());
        let uuid: [u8; 16] = h[24..40].try_into().unwrap();
        let epoch = u64::from_le_bytes(h[40..48].try_into().unwrap());
        let seq_floor = u64::from_le_bytes(h[48..56].try_into().unwrap());
        let flags = u32::from_le_bytes(h[20..24].try_into().unwrap());
        if flags & !FLAG_STORE_DURABLE != 0 {
            return Err(bad(path, format!("unknown flags {flags:#x}")));
        }
        let mut body = vec![0u8; count as usize * REC];
        file.read_exact_at(&mut body, HEADER)
            .map_err(|e| bad(path, format!("records unreadable ({count} slots): {e}")))?;
        let mut slots = Vec::with_capacity(count as usize);
        for (i, r) in body.chunks(REC).enumerate() {
            slots.push(decode(r).map_err(|why| bad(path, format!("slot {i}: {why}")))?);
        }
        Ok(Table {
            file,
            path: path.to_path_buf(),
            uuid,
            segment_count: count,
            segment_blocks: blocks,
            epoch,
            seq_floor,
            slots,
            store_durable: flags & FLAG_STORE_DURABLE != 0,
        })
    }

    /// Durably record where slot `seg` lives (None: in the staging file).
    pub fn set(&mut self, seg: u32, r: Option<ObjRef>) -> io::Result<()> {
        let off = HEADER + seg as u64 * REC as u64;
        self.file.write_all_at(&encode(r), off)?;
        self.file.sync_data()?;
        self.slots[seg as usize] = r;
        Ok(())
    }

    /// Durably record every slot at once (one sync: a rebuilt table).
    pub fn set_all(&mut self, refs: &[Option<ObjRef>]) -> io::Result<()> {
        assert_eq!(refs.len(), self.slots.len(), "one record per slot");
        let mut body = Vec::with_capacity(refs.len() * REC);
        for r in refs {
            body.extend_from_slice(&encode(*r));
        }
        self.file.write_all_at(&body, HEADER)?;
        self.file.sync_data()?;
        self.slots = refs.to_vec();
        Ok(())
    }

    /// Durably record the epoch now writing through this cache.
    pub fn set_epoch(&mut self, epoch: u64) -> io::Result<()> {
        self.set_header(epoch, self.seq_floor)
    }

    /// Durably raise the floor of sequence numbers to `floor`.
    pub fn set_floor(&mut self, floor: u64) -> io::Result<()> {
        self.set_header(self.epoch, floor.max(self.seq_floor))
    }

    /// Durably record the store-durable mode (create, restore).
    pub fn set_store_durable(&mut self, on: bool) -> io::Result<()> {
        self.store_durable = on;
        self.set_header(self.epoch, self.seq_floor)
    }

    fn set_header(&mut self, epoch: u64, floor: u64) -> io::Result<()> {
        let h = header_bytes(
            &self.uuid,
            self.segment_count,
            self.segment_blocks,
            epoch,
            floor,
            if self.store_durable {
                FLAG_STORE_DURABLE
            } else {
                0
            },
        );
        self.file.write_all_at(&h, 0)?;
        self.file.sync_data()?;
        self.epoch = epoch;
        self.seq_floor = floor;
        Ok(())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_damage_is_refused() {
        let r = ObjRef {
            seq: 7,
            epoch: 3,
            crc: 0xdead_beef,
        };
        assert_eq!(decode(&encode(Some(r))), Ok(Some(r)));
        assert_eq!(decode(&encode(None)), Ok(None));
        for i in 0..REC {
            let mut b = encode(Some(r));
            b[i] ^= 0x10;
            assert!(decode(&b).is_err(), "flip in byte {i} accepted");
        }
    }

    #[test]
    fn a_table_survives_reopen_and_refuses_overwrite() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("objects.tab");
        let mut t = Table::create(&p, [9; 16], 5, 8, 1).unwrap();
        let r = ObjRef {
            seq: 11,
            epoch: 1,
            crc: 5,
        };
        t.set(3, Some(r)).unwrap();
        t.set_epoch(2).unwrap();
        t.set_floor(100).unwrap();
        drop(t);
        assert!(
            Table::create(&p, [9; 16], 5, 8, 1).is_err(),
            "existing table overwritten"
        );
        let t = Table::open(&p).unwrap();
        assert_eq!(t.slots, vec![None, None, None, Some(r), None]);
        assert_eq!(
            (t.epoch, t.uuid, t.segment_count, t.segment_blocks),
            (2, [9; 16], 5, 8)
        );
        assert_eq!(t.seq_floor, 100);
        let f = OpenOptions::new().write(true).open(&p).unwrap();
        f.write_all_at(&[1], HEADER + 3 * REC as u64 + 2).unwrap();
        let e = Table::open(&p).err().unwrap().to_string();
        assert!(e.contains("slot 3"), "{e}");
    }
}
