//! MemMedia: a media held in RAM, for tests, simulation and trace replay.

use super::{check_range, Media};
use parking_lot::RwLock;
use std::io;

pub struct MemMedia {
    bytes: RwLock<Vec<u8>>,
}

impl MemMedia {
    pub fn new(len: u64) -> MemMedia {
        MemMedia {
            bytes: RwLock::new(vec![0u8; len as usize]),
        }
    }
    pub fn from_image(image: Vec<u8>) -> MemMedia {
        MemMedia {
            bytes: RwLock::new(image),
        }
    }
    /// A copy of the whole content.
    pub fn image(&self) -> Vec<u8> {
        self.bytes.read().clone()
    }
    /// Overwrite bytes directly, bypassing the engine (corruption tests).
    pub fn poke(&self, offset: u64, data: &[u8]) {
        let o = offset as usize;
        self.bytes.write()[o..o + data.len()].copy_from_slice(data);
    }
}

impl Media for MemMedia {
    fn len(&self) -> u64 {
        self.bytes.read().len() as u64
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let b = self.bytes.read();
        check_range(b.len() as u64, offset, buf.len())?;
        buf.copy_from_slice(&b[offset as usize..offset as usize + buf.len()]);
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut b = self.bytes.write();
        check_range(b.len() as u64, offset, buf.len())?;
        b[offset as usize..offset as usize + buf.len()].copy_from_slice(buf);
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
    fn discard(&self, offset: u64, len: u64) -> io::Result<bool> {
        let mut b = self.bytes.write();
        check_range(b.len() as u64, offset, len as usize)?;
        b[offset as usize..(offset + len) as usize].fill(0);
        Ok(true)
    }
    fn describe(&self) -> String {
        format!("memory ({} bytes)", self.len())
    }
}
