//! Chunk codec: the one iteration over a decoded chunk header's entries, each
//! with the *place* of every block record it names (docs/format-v2.md §8).
//! Replay, GC's relocation, `sluice check` and the scrub read a chunk's
//! entries through it, so the block-index arithmetic (the k-th data block of
//! the chunk, in entry order, is chunk block `1 + k`; its CRC is
//! `block_crcs[k]`) lives here once. Pure: no IO, nothing above `format`.
//!
//! Invariant: for a header `ChunkHeader::decode` accepted, the data indexes
//! handed out are exactly `0..raw_blocks`, each once, in entry order, and
//! virtual entries (zero, ones, trim) take none; Packed entries' records are
//! fragments `0..` in entry order, placed by the packed blocks' tables
//! (`fragments`), which follow the raw blocks.

use super::chunk::{ChunkHeader, Entry, Kind};
use super::FormatError;

/// Where one block record's contents are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// A data block stored whole: data block `data` of the chunk (chunk block
    /// `1 + data`), physical block `phys`, whose CRC32C is `crc`.
    Block { phys: u64, data: u32, crc: u32 },
    /// No stored data: the record reads as zeros (`Zero`, `Trim`) or ones.
    Virtual(Kind),
    /// Fragment `k` of the chunk (its Packed entries' records counted in
    /// entry order), in the packed blocks after the raw ones: where exactly
    /// only their tables say (`fragments`).
    Fragment { k: u32 },
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
    /// Index of the entry's first fragment (Packed entries).
    first_fragment: u32,
    /// Physical block of the chunk's header block.
    chunk_phys: u64,
    crcs: &'a [u32],
}

impl<'a> Placed<'a> {
    /// The entry's block records, in order.
    pub fn records(&self) -> impl Iterator<Item = Record> + 'a {
        let (e, first_data, first_fragment, chunk_phys, crcs) = (
            *self.entry,
            self.first_data,
            self.first_fragment,
            self.chunk_phys,
            self.crcs,
        );
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
                Kind::Packed => Place::Fragment {
                    k: first_fragment + k,
                },
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
    let (mut next_data, mut next_fragment) = (0u32, 0u32);
    h.entries.iter().map(move |entry| {
        let (first_data, first_fragment) = (next_data, next_fragment);
        next_data += entry.data_blocks();
        next_fragment += entry.fragments();
        Placed {
            entry,
            first_data,
            first_fragment,
            chunk_phys,
            crcs: &h.block_crcs,
        }
    })
}

/// Where fragment `k` of a chunk lives, resolved through its packed tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FragmentPlace {
    /// Physical block of the packed block where it starts.
    pub phys: u64,
    pub slot: u8,
    /// It continues in `phys + 1`.
    pub spans: bool,
    pub len: u16,
    pub raw_crc: u32,
}

/// The chunk's fragments, in order (index = `Place::Fragment::k`), from
/// `data`: the chunk's data area (`data_blocks` blocks after the header,
/// verified against the block CRCs). Refuses packed blocks whose tables do
/// not chain (`packed::fragments_of`) or hold another number of fragments
/// than the Packed entries name. Empty for a chunk without Packed entries.
pub fn fragments(
    h: &ChunkHeader,
    chunk_phys: u64,
    data: &[u8],
) -> Result<Vec<FragmentPlace>, FormatError> {
    let want: u64 = h.entries.iter().map(|e| e.fragments() as u64).sum();
    if want == 0 {
        return Ok(Vec::new());
    }
    let (raw, packed) = (h.raw_blocks() as usize, h.packed_blocks() as usize);
    let bs = crate::format::BLOCK_BYTES;
    let run = data.get(raw * bs..(raw + packed) * bs).ok_or_else(|| {
        crate::format::invalid("packed", "data area shorter than its header says")
    })?;
    let found = super::packed::fragments_of(run)?;
    if found.len() as u64 != want {
        return Err(crate::format::invalid(
            "packed",
            format!(
                "{} fragments in the packed blocks, entries name {want}",
                found.len()
            ),
        ));
    }
    // MUTANT: fragment-place-off-by-one s|chunk_phys + 1 + raw as u64|chunk_phys + raw as u64|
    let first = chunk_phys + 1 + raw as u64;
    Ok(found
        .into_iter()
        .map(|f| FragmentPlace {
            phys: first + f.place.block as u64,
            slot: f.place.slot,
            spans: f.place.spans,
            len: f.len,
            raw_crc: f.raw_crc,
        })
        .collect())
}

/// Fragment `fp` verifies in `chunk`, the chunk's image from its header
/// block on, `fp.phys` counted from `chunk_phys` (the header's physical
/// block; 0 when places are relative to the header): its packed block(s)
/// match their block CRCs and it unpacks (which checks its raw CRC) into
/// `raw`. `check` and scrub judge fragments with it.
pub fn fragment_verifies(
    h: &ChunkHeader,
    chunk_phys: u64,
    chunk: &[u8],
    fp: &FragmentPlace,
    raw: &mut [u8],
) -> bool {
    let bs = crate::format::BLOCK_BYTES;
    let rel = (fp.phys - chunk_phys) as usize;
    let n = 1 + fp.spans as usize;
    let Some(bytes) = chunk.get(rel * bs..(rel + n) * bs) else {
        return false;
    };
    let crcs_ok = (0..n).all(|j| {
        h.block_crcs.get(rel - 1 + j)
            == Some(&crate::format::chunk::block_crc(
                &bytes[j * bs..(j + 1) * bs],
            ))
    });
    let (first, next) = bytes.split_at(bs);
    crcs_ok && super::packed::unpack(first, fp.spans.then_some(next), fp.slot, raw).is_ok()
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
            chain: None,
            mixed_check: false,
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
                Place::Virtual(_) | Place::Fragment { .. } => None,
            })
            .collect();
        assert_eq!(data, (0..d.data_blocks).collect::<Vec<_>>());
    }

    #[test]
    fn fragments_are_numbered_in_entry_order_and_placed_by_the_packed_tables() {
        use crate::format::packed::{Compressor, Packer};
        use crate::format::BLOCK_BYTES;
        let e = |lba, count, kind| Entry {
            lba,
            count,
            kind,
            src: NO_SRC,
        };
        // raw blocks 0 (lba 1) and 1 (lba 9); fragments 0-1 (lba 3, 4) and
        // 2 (lba 8), each half random, half zero: about 2 KiB of LZ4 each
        let raw_of = |i: u8| {
            let mut b = vec![0u8; BLOCK_BYTES];
            let mut x = 0x9e37_79b9u32.wrapping_mul(i as u32 + 1);
            for v in &mut b[..BLOCK_BYTES / 2] {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                *v = x as u8;
            }
            b
        };
        let mut packer = Packer::new();
        let mut z = Compressor::default();
        let mut places = Vec::new();
        for i in 0..3 {
            let raw = raw_of(i);
            let f = z.compress(&raw).expect("half-zero block compresses");
            places.push(packer.push(f, crc32c::crc32c(&raw)));
        }
        let packed = packer.finish();
        let p = (packed.len() / BLOCK_BYTES) as u32;
        assert!((2..=3).contains(&p), "three ~2 KiB fragments span a block");
        let mut data = vec![0x11u8; 2 * BLOCK_BYTES];
        data.extend_from_slice(&packed);
        let h = ChunkHeader {
            uuid: [1; 16],
            seq: 5,
            segment: 2,
            stream: Stream::User,
            timestamp_ns: 0,
            durable_seq: 0,
            data_blocks: 2 + p,
            entries: vec![
                e(1, 1, Kind::Data),
                e(3, 2, Kind::Packed),
                e(50, 1, Kind::Trim),
                e(8, 1, Kind::Packed),
                e(9, 1, Kind::Data),
            ],
            block_crcs: (0..2 + p as usize)
                .map(|i| crc32c::crc32c(&data[i * BLOCK_BYTES..(i + 1) * BLOCK_BYTES]))
                .collect(),
            lsn: None,
            chain: None,
            mixed_check: false,
        };
        let got: Vec<(u64, Place)> = records(&h, 1000).map(|r| (r.lba, r.place)).collect();
        assert_eq!(
            got,
            [
                (
                    1,
                    Place::Block {
                        phys: 1001,
                        data: 0,
                        crc: h.block_crcs[0]
                    }
                ),
                (3, Place::Fragment { k: 0 }),
                (4, Place::Fragment { k: 1 }),
                (50, Place::Virtual(Kind::Trim)),
                (8, Place::Fragment { k: 2 }),
                (
                    9,
                    Place::Block {
                        phys: 1002,
                        data: 1,
                        crc: h.block_crcs[1]
                    }
                ),
            ]
        );
        let frags = fragments(&h, 1000, &data).unwrap();
        assert_eq!(frags.len(), 3);
        for (k, (f, place)) in frags.iter().zip(&places).enumerate() {
            // packed blocks start after the header and the 2 raw blocks
            assert_eq!(f.phys, 1003 + place.block as u64, "fragment {k}");
            assert_eq!((f.slot, f.spans), (place.slot, place.spans));
            assert_eq!(f.raw_crc, crc32c::crc32c(&raw_of(k as u8)));
            // and it reads back from there
            let at = (f.phys - 1001) as usize * BLOCK_BYTES;
            let next = f
                .spans
                .then(|| &data[at + BLOCK_BYTES..at + 2 * BLOCK_BYTES]);
            let mut out = vec![0u8; BLOCK_BYTES];
            crate::format::packed::unpack(&data[at..at + BLOCK_BYTES], next, f.slot, &mut out)
                .unwrap();
            assert_eq!(out, raw_of(k as u8));
        }
        // entries naming one fragment more than the tables hold: refused
        let mut more = h.clone();
        more.entries[3].count = 2;
        assert!(fragments(&more, 1000, &data).is_err());
        // a data area shorter than the header says: refused, never read past
        assert!(fragments(&h, 1000, &data[..data.len() - BLOCK_BYTES]).is_err());
        // no Packed entries: nothing to place
        assert!(fragments(&header(), 0, &[]).unwrap().is_empty());
    }
}
