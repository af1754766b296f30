//! Chunk codec: the one iteration over a decoded chunk header's entries, each
//! with the *place* of every block record it names (docs/format-v2.md §8).
//! Replay, GC's relocation, `sluice check` and the scrub read a chunk's
//! entries through it, so the block-index arithmetic (the k-th data block of
//! the chunk, in entry order, is chunk block `1 + k`; its CRC is
//! `block_crcs[k]`) lives here once. Pure: no IO, nothing above `format`.
//!
//! Invariant: for a header `ChunkHeader::decode` accepted, the data indexes
//! handed out are exactly `0..data_blocks`, each once, in entry order, and
//! virtual entries (zero, ones, trim) take none.

use super::chunk::{ChunkHeader, Entry, Kind};

/// Where one block record's contents are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// A data block stored whole: data block `data` of the chunk (chunk block
    /// `1 + data`), physical block `phys`, whose CRC32C is `crc`.
    Block { phys: u64, data: u32, crc: u32 },
    /// No stored data: the record reads as zeros (`Zero`, `Trim`) or ones.
    Virtual(Kind),
    // Compression (docs/format-v2.md §5) adds `Fragment { block, slot, .. }`:
    // a Packed entry's records live in packed blocks after the raw ones.
}

/// One logical block named by an entry, and its place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    pub lba: u64,
    pub place: Place,
}

/// One entry of a chunk with what it needs to place its records.
#[derive(Debug, Clone, Copy)]
pub struct Placed<'a> {
    pub entry: &'a Entry,
    /// Data index of the entry's first data block (data entries).
    first_data: u32,
    /// Physical block of the chunk's header block.
    chunk_phys: u64,
    crcs: &'a [u32],
}

impl<'a> Placed<'a> {
    /// The entry's block records, in order.
    pub fn records(&self) -> impl Iterator<Item = Record> + 'a {
        let (e, first_data, chunk_phys, crcs) =
            (*self.entry, self.first_data, self.chunk_phys, self.crcs);
        (0..e.count).map(move |k| Record {
            lba: e.lba + k as u64,
            place: match e.kind {
                Kind::Data => {
                    let data = first_data + k;
                    Place::Block {
                        phys: chunk_phys + 1 + data as u64,
                        data,
                        crc: crcs[data as usize],
                    }
                }
                v => Place::Virtual(v),
            },
        })
    }
}

/// The entries of `h`, each placed; `chunk_phys` is the physical block of the
/// chunk's header (0 when only data indexes matter).
pub fn entries(h: &ChunkHeader, chunk_phys: u64) -> impl Iterator<Item = Placed<'_>> {
    assert_eq!(
        h.block_crcs.len(),
        h.data_blocks as usize,
        "a chunk header has one CRC per data block"
    );
    let mut next_data = 0u32;
    h.entries.iter().map(move |entry| {
        let first_data = next_data;
        next_data += entry.data_blocks();
        Placed {
            entry,
            first_data,
            chunk_phys,
            crcs: &h.block_crcs,
        }
    })
}

/// Every block record of `h`, in entry order (`entries` flattened).
pub fn records(h: &ChunkHeader, chunk_phys: u64) -> impl Iterator<Item = Record> + '_ {
    entries(h, chunk_phys).flat_map(|p| p.records())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::chunk::{Stream, NO_SRC};

    fn header() -> ChunkHeader {
        let e = |lba, count, kind| Entry {
            lba,
            count,
            kind,
            src: NO_SRC,
        };
        ChunkHeader {
            uuid: [1; 16],
            seq: 5,
            segment: 2,
            stream: Stream::User,
            timestamp_ns: 0,
            durable_seq: 0,
            data_blocks: 4,
            entries: vec![
                e(10, 2, Kind::Data),
                e(50, 3, Kind::Trim),
                e(20, 1, Kind::Data),
                e(7, 1, Kind::Ones),
                e(30, 1, Kind::Data),
            ],
            block_crcs: vec![100, 101, 102, 103],
            lsn: None,
        }
    }

    #[test]
    fn data_blocks_are_numbered_in_entry_order_and_virtual_entries_take_none() {
        let h = header();
        let got: Vec<Record> = records(&h, 1000).collect();
        let b = |lba, data: u32| Record {
            lba,
            place: Place::Block {
                phys: 1001 + data as u64,
                data,
                crc: 100 + data,
            },
        };
        let v = |lba, k| Record {
            lba,
            place: Place::Virtual(k),
        };
        assert_eq!(
            got,
            [
                b(10, 0),
                b(11, 1),
                v(50, Kind::Trim),
                v(51, Kind::Trim),
                v(52, Kind::Trim),
                b(20, 2),
                v(7, Kind::Ones),
                b(30, 3),
            ]
        );
        let per_entry: Vec<usize> = entries(&h, 0).map(|p| p.records().count()).collect();
        assert_eq!(per_entry, [2, 3, 1, 1, 1]);
    }

    #[test]
    fn a_decoded_header_places_every_data_block_once() {
        let h = header();
        let mut block = vec![0u8; crate::format::BLOCK_BYTES];
        h.encode_into(&mut block);
        crate::format::chunk::seal_crc(&mut block);
        let d = ChunkHeader::decode(&block).unwrap();
        let data: Vec<u32> = records(&d, 0)
            .filter_map(|r| match r.place {
                Place::Block { data, .. } => Some(data),
                Place::Virtual(_) => None,
            })
            .collect();
        assert_eq!(data, (0..d.data_blocks).collect::<Vec<_>>());
    }
}
