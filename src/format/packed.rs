//! Packed blocks: the format of compressed data (format v2, feature
//! `COMPRESSION`, docs/format-v2.md §5). Pure encode/decode, no IO.
//!
//! A packed block is a 4 KiB data block of a chunk whose payload holds LZ4
//! fragments, each the compressed image of one 4 KiB logical block:
//!
//! ```text
//! 0      u8   count     fragments that START in this block (0..=MAX_SLOTS)
//! 1      u8   reserved  0
//! 2      u16  spill     payload bytes at PAYLOAD_START that end the previous
//!                       block's last fragment (0 when it did not span)
//! 4      u32  reserved  0
//! 8      15 x { u16 offset, u16 len, u32 raw_crc }   the slot table
//! 128    payload (3968 bytes)
//! ```
//!
//! Fragments are laid end to end: slot 0 starts right after the spill, each
//! next slot right after the one before. Only the last fragment starting in a
//! block may run past its end, and then it continues at `PAYLOAD_START` of the
//! next packed block (whose `spill` says how many bytes). A fragment is at most
//! `MAX_FRAGMENT` bytes, so it touches at most two blocks and a 4 KiB read is
//! one media read of at most 8 KiB. `raw_crc` is the CRC32C of the 4 KiB the
//! fragment decompresses to: verified after decompression, so an offset or
//! length that is off, or a decoder fault, is an error and never data. (The
//! packed block itself is covered by its block CRC in the chunk header, like
//! any data block, and verified before it is parsed.)
//!
//! A logical block's place in a packed area is `(block, slot)`: the packed
//! block where its fragment starts and its slot there.
//!
//! Invariant: `Table::decode` accepts only tables whose fragments are end to
//! end inside the payload (all but the last inside the block), and `unpack`
//! returns only 4 KiB whose CRC32C is the slot's `raw_crc`.

use super::*;

/// Slot table plus fixed fields.
pub const PAYLOAD_START: usize = 128;
/// Payload bytes of one packed block.
pub const PAYLOAD_BYTES: usize = BLOCK_BYTES - PAYLOAD_START; // 3968
/// Fragments that may start in one block (the slot is 4 bits in a map value).
pub const MAX_SLOTS: usize = 15;
const SLOT_BYTES: usize = 8;
const SLOTS_AT: usize = 8;
/// Largest fragment the format can hold: it starts in one block and ends in
/// the next, never further.
pub const MAX_FRAGMENT: usize = PAYLOAD_BYTES;
/// Largest fragment the packer keeps. A block that compresses to more is
/// stored raw: it would save under 1/8 of its space (ZFS keeps a compressed
/// block only if it saves at least 12.5%), and decompressing it on every read
/// would cost more than the few bytes are worth.
pub const KEEP_MAX: usize = BLOCK_BYTES - BLOCK_BYTES / 8; // 3584

const _: () = assert!(SLOTS_AT + MAX_SLOTS * SLOT_BYTES <= PAYLOAD_START);
const _: () = assert!(KEEP_MAX <= MAX_FRAGMENT);

/// One slot of a packed block's table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// Byte offset in its block where the fragment starts (>= PAYLOAD_START).
    pub offset: u16,
    /// Compressed length in bytes (1..=MAX_FRAGMENT).
    pub len: u16,
    /// CRC32C of the 4 KiB the fragment decompresses to.
    pub raw_crc: u32,
}

impl Slot {
    /// Whether the fragment continues into the next packed block.
    pub fn spans(&self) -> bool {
        self.offset as usize + self.len as usize > BLOCK_BYTES
    }
}

/// The decoded table of one packed block (inline: a read decodes one or two
/// tables per fragment, and an allocation each cost more than the decode).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    pub spill: u16,
    count: usize,
    slots: [Slot; MAX_SLOTS],
}

const NO_SLOT: Slot = Slot {
    offset: 0,
    len: 0,
    raw_crc: 0,
};

impl Table {
    /// Decode and check the table of `block` (exactly BLOCK_BYTES).
    pub fn decode(block: &[u8]) -> Result<Table, FormatError> {
        if block.len() != BLOCK_BYTES {
            return Err(FormatError::Short {
                need: BLOCK_BYTES,
                have: block.len(),
            });
        }
        let count = block[0] as usize;
        if count > MAX_SLOTS {
            return Err(invalid("packed.count", count.to_string()));
        }
        if block[1] != 0 || get_u32(block, 4) != 0 {
            return Err(invalid("packed.reserved", "not zero"));
        }
        let spill = get_u16(block, 2);
        if spill as usize > PAYLOAD_BYTES {
            return Err(invalid("packed.spill", spill.to_string()));
        }
        let mut next = PAYLOAD_START + spill as usize;
        let mut slots = [NO_SLOT; MAX_SLOTS];
        for (i, place) in slots[..count].iter_mut().enumerate() {
            let at = SLOTS_AT + i * SLOT_BYTES;
            let slot = Slot {
                offset: get_u16(block, at),
                len: get_u16(block, at + 2),
                raw_crc: get_u32(block, at + 4),
            };
            if slot.offset as usize != next {
                return Err(invalid(
                    "packed.offset",
                    format!("slot {i} starts at {}, expected {next}", slot.offset),
                ));
            }
            if slot.len == 0 || slot.len as usize > MAX_FRAGMENT {
                return Err(invalid("packed.len", format!("slot {i}: {}", slot.len)));
            }
            if slot.offset as usize >= BLOCK_BYTES {
                return Err(invalid("packed.offset", format!("slot {i} past the block")));
            }
            if slot.spans() && i + 1 != count {
                return Err(invalid(
                    "packed.len",
                    format!("slot {i} runs past the block but is not the last"),
                ));
            }
            next = slot.offset as usize + slot.len as usize;
            *place = slot;
        }
        // the unused part of the table is zero (so a table cannot hide bytes;
        // whole slots, a word each)
        if block[SLOTS_AT + count * SLOT_BYTES..PAYLOAD_START]
            .chunks_exact(SLOT_BYTES)
            .any(|w| u64::from_le_bytes(w.try_into().expect("8 bytes")) != 0)
        {
            return Err(invalid("packed.table", "unused slots not zero"));
        }
        Ok(Table {
            spill,
            count,
            slots,
        })
    }

    /// The slots in use, in order.
    pub fn slots(&self) -> &[Slot] {
        &self.slots[..self.count]
    }

    /// Bytes of the last fragment that continue in the next block.
    pub fn spill_out(&self) -> usize {
        self.slots().last().map_or(0, |s| {
            (s.offset as usize + s.len as usize).saturating_sub(BLOCK_BYTES)
        })
    }
}

/// One fragment of a run of packed blocks, as the tables say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    /// Where it is (block index from the run's first block, slot, spans).
    pub place: Place,
    /// Compressed length in bytes.
    pub len: u16,
    /// CRC32C of the 4 KiB it decompresses to.
    pub raw_crc: u32,
}

/// Every fragment of a chunk's packed blocks (`blocks`, a whole number of
/// blocks, each already verified against its block CRC), in order: the k-th
/// fragment of the chunk's Packed entries is the k-th found. Refuses a run
/// whose tables do not chain: the first block's `spill` must be 0, each
/// next block's `spill` what the block before it spilled out, and the last
/// block must spill nothing.
pub fn fragments_of(blocks: &[u8]) -> Result<Vec<Found>, FormatError> {
    if blocks.is_empty() || !blocks.len().is_multiple_of(BLOCK_BYTES) {
        return Err(invalid(
            "packed.blocks",
            format!("{} bytes, not whole blocks", blocks.len()),
        ));
    }
    let mut out = Vec::new();
    let mut spill_in = 0usize;
    for (b, block) in blocks.chunks_exact(BLOCK_BYTES).enumerate() {
        let t = Table::decode(block)?;
        // MUTANT: packed-chain-unchecked s|t.spill as usize != spill_in|false|
        if t.spill as usize != spill_in {
            return Err(invalid(
                "packed.spill",
                format!(
                    "block {b} says {}, the block before spilled {spill_in}",
                    t.spill
                ),
            ));
        }
        spill_in = t.spill_out();
        for (i, s) in t.slots().iter().enumerate() {
            out.push(Found {
                place: Place {
                    block: b as u32,
                    slot: i as u8,
                    spans: s.spans(),
                },
                len: s.len,
                raw_crc: s.raw_crc,
            });
        }
    }
    if spill_in != 0 {
        return Err(invalid("packed.spill", "the last block spills out"));
    }
    Ok(out)
}

/// Where the packer put a fragment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    /// Index of the packed block (from the first block the packer made).
    pub block: u32,
    pub slot: u8,
    /// The fragment continues in block + 1.
    pub spans: bool,
}

/// Builds a run of packed blocks from fragments, in order. Never waits for
/// company: whatever it holds when the chunk seals is written as it is.
#[derive(Default)]
pub struct Packer {
    buf: Vec<u8>,
    /// Write position in the last block; BLOCK_BYTES when no block is open.
    pos: usize,
}

impl Packer {
    pub fn new() -> Packer {
        Packer {
            buf: Vec::new(),
            pos: BLOCK_BYTES,
        }
    }

    /// Packed blocks made so far (the last one may still take fragments).
    pub fn blocks(&self) -> usize {
        self.buf.len() / BLOCK_BYTES
    }

    /// Packed block `j` as it is now (the last one may still take fragments).
    pub fn block(&self, j: usize) -> &[u8] {
        &self.buf[j * BLOCK_BYTES..(j + 1) * BLOCK_BYTES]
    }

    /// Whether no fragment has been pushed.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    fn open_block(&mut self, spill: usize) {
        let start = self.buf.len();
        self.buf.resize(start + BLOCK_BYTES, 0);
        put_u16(&mut self.buf[start..], 2, spill as u16);
        self.pos = PAYLOAD_START + spill;
    }

    /// Append a fragment (1..=MAX_FRAGMENT bytes of LZ4) with the CRC32C of
    /// the 4 KiB it decompresses to.
    pub fn push(&mut self, fragment: &[u8], raw_crc: u32) -> Place {
        assert!(
            !fragment.is_empty() && fragment.len() <= MAX_FRAGMENT,
            "fragment of {} bytes",
            fragment.len()
        );
        let count = if self.buf.is_empty() {
            MAX_SLOTS
        } else {
            self.buf[self.buf.len() - BLOCK_BYTES] as usize
        };
        if self.pos >= BLOCK_BYTES || count == MAX_SLOTS {
            // a fragment that spanned out of the last block already opened
            // the next one; otherwise open a fresh block
            self.open_block(0);
        }
        let block = self.blocks() - 1;
        let start = block * BLOCK_BYTES;
        let slot = self.buf[start] as usize;
        let at = start + SLOTS_AT + slot * SLOT_BYTES;
        put_u16(&mut self.buf, at, self.pos as u16);
        put_u16(&mut self.buf, at + 2, fragment.len() as u16);
        put_u32(&mut self.buf, at + 4, raw_crc);
        self.buf[start] += 1;
        let here = (BLOCK_BYTES - self.pos).min(fragment.len());
        self.buf[start + self.pos..start + self.pos + here].copy_from_slice(&fragment[..here]);
        let spans = here < fragment.len();
        if spans {
            let rest = fragment.len() - here;
            self.open_block(rest);
            let next = self.buf.len() - BLOCK_BYTES;
            self.buf[next + PAYLOAD_START..next + PAYLOAD_START + rest]
                .copy_from_slice(&fragment[here..]);
        } else {
            self.pos += here;
        }
        Place {
            block: block as u32,
            slot: slot as u8,
            spans,
        }
    }

    /// The packed blocks, `blocks() * BLOCK_BYTES` bytes.
    pub fn finish(self) -> Vec<u8> {
        self.buf
    }
}

/// The compressed bytes of `slot`, from its block and (when it spans) the
/// next packed block. Both must already be verified against their block CRCs.
pub fn fragment<'a>(
    block: &'a [u8],
    next: Option<&'a [u8]>,
    slot: u8,
    out: &'a mut Vec<u8>,
) -> Result<(&'a [u8], u32), FormatError> {
    let table = Table::decode(block)?;
    let s = *table
        .slots()
        .get(slot as usize)
        .ok_or_else(|| invalid("packed.slot", format!("{slot} of {}", table.count)))?;
    let start = s.offset as usize;
    let end = start + s.len as usize;
    if !s.spans() {
        return Ok((&block[start..end], s.raw_crc));
    }
    let next = next.ok_or_else(|| invalid("packed.next", "fragment spans, next block missing"))?;
    let rest = end - BLOCK_BYTES;
    let next_table = Table::decode(next)?;
    if next_table.spill as usize != rest {
        return Err(invalid(
            "packed.spill",
            format!(
                "next block says {}, fragment needs {rest}",
                next_table.spill
            ),
        ));
    }
    out.clear();
    out.reserve_exact(s.len as usize);
    out.extend_from_slice(&block[start..]);
    out.extend_from_slice(&next[PAYLOAD_START..PAYLOAD_START + rest]);
    Ok((out.as_slice(), s.raw_crc))
}

/// Decompress `slot` into `raw` (exactly BLOCK_BYTES) and verify its CRC.
pub fn unpack(
    block: &[u8],
    next: Option<&[u8]>,
    slot: u8,
    raw: &mut [u8],
) -> Result<(), FormatError> {
    assert_eq!(raw.len(), BLOCK_BYTES, "unpack fills one block");
    let mut joined = Vec::new();
    let (bytes, crc) = fragment(block, next, slot, &mut joined)?;
    // (our decoder, not lz4_flex's: a run of one byte is a fill there, not a
    // byte loop; `format::lz4`)
    super::lz4::decode(bytes, raw).map_err(|e| invalid("packed.fragment", e.to_string()))?;
    // MUTANT: fragment-raw-crc-unchecked s|crc32c::crc32c(raw) != crc|false|
    if crc32c::crc32c(raw) != crc {
        return Err(FormatError::Checksum);
    }
    Ok(())
}

/// Compresses 4 KiB blocks into fragments. One per thread that compresses:
/// it keeps LZ4's hash table and output buffer between blocks (a fresh table
/// per block costs more instructions than the compression itself).
pub struct Compressor {
    table: lz4_flex::block::CompressTable,
    out: Box<[u8; COMPRESS_BUF]>,
}

impl Default for Compressor {
    fn default() -> Self {
        Compressor {
            table: lz4_flex::block::CompressTable::small(),
            out: Box::new([0u8; COMPRESS_BUF]),
        }
    }
}

impl Compressor {
    /// The fragment of one 4 KiB block, or None when it would not be kept
    /// (longer than KEEP_MAX).
    pub fn compress(&mut self, raw: &[u8]) -> Option<&[u8]> {
        assert_eq!(raw.len(), BLOCK_BYTES, "compress takes one block");
        let n = lz4_flex::block::compress_into_with_table(raw, &mut self.out[..], &mut self.table)
            .ok()?;
        (n <= KEEP_MAX).then(|| &self.out[..n])
    }
}

/// Output buffer LZ4 needs for one block (its worst-case bound).
const COMPRESS_BUF: usize = lz4_flex::block::get_maximum_output_size(BLOCK_BYTES);

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    fn block_of(rng: &mut rand::rngs::SmallRng, compressibility: f64) -> Vec<u8> {
        // runs of one byte for the compressible share, random bytes otherwise
        let mut b = vec![0u8; BLOCK_BYTES];
        let mut i = 0;
        while i < BLOCK_BYTES {
            let run = rng.gen_range(16..256).min(BLOCK_BYTES - i);
            if rng.gen_bool(compressibility) {
                b[i..i + run].fill(rng.gen());
            } else {
                rng.fill(&mut b[i..i + run]);
            }
            i += run;
        }
        b
    }

    fn pack_all(raws: &[Vec<u8>]) -> (Vec<u8>, Vec<Option<Place>>) {
        let mut p = Packer::new();
        let mut z = Compressor::default();
        let places = raws
            .iter()
            .map(|r| z.compress(r).map(|f| p.push(f, crc32c::crc32c(r))))
            .collect();
        (p.finish(), places)
    }

    fn read(packed: &[u8], place: Place) -> Result<Vec<u8>, FormatError> {
        let b = place.block as usize;
        let block = &packed[b * BLOCK_BYTES..(b + 1) * BLOCK_BYTES];
        let next = place
            .spans
            .then(|| &packed[(b + 1) * BLOCK_BYTES..(b + 2) * BLOCK_BYTES]);
        let mut raw = vec![0u8; BLOCK_BYTES];
        unpack(block, next, place.slot, &mut raw)?;
        Ok(raw)
    }

    #[test]
    fn every_fragment_reads_back_and_the_tables_decode() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        for round in 0..50 {
            let c = [0.3, 0.6, 0.95, 1.0][round % 4];
            let raws: Vec<_> = (0..rng.gen_range(1..80))
                .map(|_| block_of(&mut rng, c))
                .collect();
            let (packed, places) = pack_all(&raws);
            let mut spanned = false;
            for (raw, place) in raws.iter().zip(&places) {
                if let Some(place) = place {
                    spanned |= place.spans;
                    assert_eq!(&read(&packed, *place).unwrap(), raw);
                }
            }
            for block in packed.chunks(BLOCK_BYTES) {
                Table::decode(block).unwrap();
            }
            if c < 0.7 && places.iter().flatten().count() > 4 {
                assert!(spanned, "round {round}: half-compressible data never spans");
            }
        }
    }

    #[test]
    fn a_block_holds_at_most_max_slots_and_tiny_fragments_fill_it() {
        let raws: Vec<_> = (0..40u8).map(|i| vec![i; BLOCK_BYTES]).collect();
        let (packed, places) = pack_all(&raws);
        let places: Vec<_> = places.into_iter().map(Option::unwrap).collect();
        assert_eq!(places[MAX_SLOTS - 1].block, 0);
        assert_eq!(places[MAX_SLOTS].block, 1);
        assert_eq!(places[MAX_SLOTS].slot, 0);
        assert_eq!(packed.len() / BLOCK_BYTES, 40usize.div_ceil(MAX_SLOTS));
    }

    #[test]
    fn random_data_is_not_kept() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
        let raw = block_of(&mut rng, 0.0);
        assert_eq!(Compressor::default().compress(&raw), None);
    }

    #[test]
    fn a_wrong_offset_length_or_byte_is_an_error_never_data() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(3);
        let raws: Vec<_> = (0..30).map(|_| block_of(&mut rng, 0.5)).collect();
        let (packed, places) = pack_all(&raws);
        for (i, place) in places.iter().enumerate() {
            let Some(place) = *place else { continue };
            let at = place.block as usize * BLOCK_BYTES;
            let slot_at = at + SLOTS_AT + place.slot as usize * SLOT_BYTES;
            // length one short, offset one on, a payload byte flipped
            for (field, delta) in [(slot_at + 2, -1i32), (slot_at, 1)] {
                let mut bad = packed.clone();
                let v = get_u16(&bad, field) as i32 + delta;
                put_u16(&mut bad, field, v as u16);
                assert!(
                    read(&bad, place).is_err(),
                    "fragment {i}: field {field} changed"
                );
            }
            // every byte of the fragment inside its first block, flipped in
            // turn (a flipped literal decodes to 4 KiB: only the CRC sees it)
            let off = get_u16(&packed, slot_at) as usize;
            let len = get_u16(&packed, slot_at + 2) as usize;
            for b in off..(off + len).min(BLOCK_BYTES) {
                let mut bad = packed.clone();
                bad[at + b] ^= 0x10;
                // (a flipped match offset inside a run of one byte may
                // decode to the same bytes: right data is fine, wrong never)
                if let Ok(raw) = read(&bad, place) {
                    assert!(
                        raw == raws[i],
                        "fragment {i}: byte {b} flipped read as data"
                    );
                }
            }
        }
    }

    #[test]
    fn fragments_of_lists_what_the_packer_placed_and_refuses_broken_chains() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(11);
        for round in 0..30 {
            let raws: Vec<_> = (0..rng.gen_range(1..60))
                .map(|_| block_of(&mut rng, [0.4, 0.7, 1.0][round % 3]))
                .collect();
            let (packed, places) = pack_all(&raws);
            let kept: Vec<(Place, u32)> = raws
                .iter()
                .zip(&places)
                .filter_map(|(r, p)| p.map(|p| (p, crc32c::crc32c(r))))
                .collect();
            if kept.is_empty() {
                continue;
            }
            let found = fragments_of(&packed).unwrap();
            assert_eq!(found.len(), kept.len());
            for (f, (p, crc)) in found.iter().zip(&kept) {
                assert_eq!((f.place, f.raw_crc), (*p, *crc));
            }
            // a chunk's packed blocks are never more than its fragments
            assert!(packed.len() / BLOCK_BYTES <= kept.len());
            // a block missing from the run breaks the chain or the count
            let n = packed.len() / BLOCK_BYTES;
            if n > 1 {
                let short = &packed[..(n - 1) * BLOCK_BYTES];
                assert!(fragments_of(short).map_or(true, |f| f.len() < kept.len()));
                let mut skip = packed[..BLOCK_BYTES].to_vec();
                skip.extend_from_slice(&packed[2 * BLOCK_BYTES..]);
                let spans_out = Table::decode(&packed[..BLOCK_BYTES]).unwrap().spill_out() > 0;
                if spans_out {
                    assert!(
                        fragments_of(&skip).is_err(),
                        "round {round}: chain not checked"
                    );
                }
            }
        }
        assert!(fragments_of(&[]).is_err());
        assert!(fragments_of(&[0u8; 100]).is_err());
    }

    #[test]
    fn garbage_tables_never_panic() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(9);
        let mut raw = vec![0u8; BLOCK_BYTES];
        for _ in 0..2000 {
            let mut b = vec![0u8; BLOCK_BYTES];
            rng.fill(&mut b[..PAYLOAD_START]);
            b[0] %= 17;
            let mut n = vec![0u8; BLOCK_BYTES];
            rng.fill(&mut n[..]);
            let _ = unpack(&b, Some(&n), rng.gen_range(0..16), &mut raw);
            let _ = unpack(&b, None, 0, &mut raw);
        }
    }
}
