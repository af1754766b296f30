//! ReplayMedia: an in-memory media for trace replay and simulation that does not
//! keep data blocks. Trace replay writes one fixed pattern block (`PATTERN`) for
//! every data block; the store remembers per 4 KiB block only a one-byte tag
//! (zeros / pattern / stored) and keeps the bytes of any other block (chunk
//! headers, superblocks, checkpoints) in a hash map. GC reads the victim and
//! verifies each chunk's CRC over header and data, which passes because a
//! pattern block reads back exactly as written.
//!
//! Invariant: every read returns exactly the bytes last written there (zeros if
//! never written), provided writers only ever write PATTERN or other content at
//! block granularity; unaligned IO is handled by read-modify-write of the block.

use super::{check_range, Media};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::io;

const BS: usize = 4096;

/// The data block replay writes: neither all-zero nor all-0xFF, so the engine
/// stores it as data, and it does not start with any format magic.
pub static PATTERN: [u8; BS] = make_pattern();

const fn make_pattern() -> [u8; BS] {
    let mut b = [0u8; BS];
    let mut i = 0;
    while i < BS {
        b[i] = (i as u32).wrapping_mul(2654435761).rotate_right(13) as u8 | 1;
        i += 1;
    }
    b
}

const ZERO: u8 = 0;
const PAT: u8 = 1;
const STORED: u8 = 2;

/// Tag store: the content model shared by ReplayMedia and FlashSim.
pub struct Store {
    tags: Vec<u8>,
    stored: HashMap<u64, Box<[u8]>>,
    len: u64,
}

impl Store {
    pub fn new(len: u64) -> Store {
        Store {
            tags: vec![ZERO; (len as usize).div_ceil(BS)],
            stored: HashMap::new(),
            len,
        }
    }
    pub fn len(&self) -> u64 {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Bytes held for non-pattern blocks (memory cost of the store).
    pub fn stored_bytes(&self) -> u64 {
        self.stored.len() as u64 * BS as u64
    }

    fn put_block(&mut self, b: u64, data: &[u8]) {
        let tag = if data == &PATTERN[..] {
            PAT
        } else if data.iter().all(|&x| x == 0) {
            ZERO
        } else {
            STORED
        };
        if tag == STORED {
            match self.stored.get_mut(&b) {
                Some(v) => v.copy_from_slice(data),
                None => {
                    self.stored.insert(b, data.into());
                }
            }
        } else if self.tags[b as usize] == STORED {
            self.stored.remove(&b);
        }
        self.tags[b as usize] = tag;
    }

    fn get_block(&self, b: u64, out: &mut [u8]) {
        match self.tags[b as usize] {
            PAT => out.copy_from_slice(&PATTERN),
            STORED => out.copy_from_slice(&self.stored[&b]),
            _ => out.fill(0),
        }
    }

    pub fn write(&mut self, buf: &[u8], offset: u64) -> io::Result<()> {
        check_range(self.len, offset, buf.len())?;
        let mut pos = 0usize;
        while pos < buf.len() {
            let at = offset + pos as u64;
            let b = at / BS as u64;
            let inb = (at % BS as u64) as usize;
            let n = (BS - inb).min(buf.len() - pos);
            if n == BS {
                self.put_block(b, &buf[pos..pos + BS]);
            } else {
                let mut tmp = [0u8; BS];
                self.get_block(b, &mut tmp);
                tmp[inb..inb + n].copy_from_slice(&buf[pos..pos + n]);
                self.put_block(b, &tmp);
            }
            pos += n;
        }
        Ok(())
    }

    pub fn read(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        check_range(self.len, offset, buf.len())?;
        let mut pos = 0usize;
        while pos < buf.len() {
            let at = offset + pos as u64;
            let b = at / BS as u64;
            let inb = (at % BS as u64) as usize;
            let n = (BS - inb).min(buf.len() - pos);
            if n == BS {
                self.get_block(b, &mut buf[pos..pos + BS]);
            } else {
                let mut tmp = [0u8; BS];
                self.get_block(b, &mut tmp);
                buf[pos..pos + n].copy_from_slice(&tmp[inb..inb + n]);
            }
            pos += n;
        }
        Ok(())
    }
}

pub struct ReplayMedia {
    store: Mutex<Store>,
}

impl ReplayMedia {
    pub fn new(len: u64) -> ReplayMedia {
        ReplayMedia {
            store: Mutex::new(Store::new(len)),
        }
    }
    pub fn stored_bytes(&self) -> u64 {
        self.store.lock().stored_bytes()
    }
}

impl Media for ReplayMedia {
    fn len(&self) -> u64 {
        self.store.lock().len()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.store.lock().read(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.store.lock().write(buf, offset)
    }
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
    fn describe(&self) -> String {
        format!("replay memory ({} bytes, data not kept)", self.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_back_what_was_written() {
        let m = ReplayMedia::new(64 * 4096);
        let mut other = vec![7u8; 4096];
        other[0] = 1;
        m.write_at(&PATTERN, 4096).unwrap();
        m.write_at(&other, 8192).unwrap();
        m.write_at(&[9u8; 10], 3 * 4096 + 100).unwrap();
        let mut r = vec![0u8; 4 * 4096];
        m.read_at(&mut r, 0).unwrap();
        assert!(r[..4096].iter().all(|&b| b == 0));
        assert_eq!(&r[4096..8192], &PATTERN[..]);
        assert_eq!(&r[8192..12288], &other[..]);
        assert_eq!(&r[12288 + 100..12288 + 110], &[9u8; 10]);
        assert_eq!(r[12288 + 99], 0);
        assert_eq!(m.stored_bytes(), 2 * 4096);
        m.write_at(&[0u8; 4096], 8192).unwrap();
        assert_eq!(m.stored_bytes(), 4096);
        assert!(m.write_at(&PATTERN, 64 * 4096).is_err());
        assert!(!PATTERN.iter().all(|&b| b == PATTERN[0]));
    }
}
