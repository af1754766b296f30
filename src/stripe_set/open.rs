//! Making and finding stripe sets: `plan` lays a new set over member devices
//! (the geometry the engine will format, every member's identity), `open`
//! reads the members' superblocks, assembles them in their slots whatever
//! order they were given in (`stripe::assemble`), and refuses by name a
//! device that is no member, of another set, in a slot already filled, or
//! stale, or too many missing members.
//!
//! Invariant: a set `open` returns has every member in the slot its own
//! identity names, all of one set uuid and shape, at most `parity` missing,
//! and the flat view's geometry is the one its superblocks record.

use super::{Member, Shape, StripeSet};
use crate::format::stripe::{Layout, StripeIdentity};
use crate::format::superblock::{Superblock, TAIL_AREA_BYTES};
use crate::format::BLOCK_BYTES;
use crate::geometry::Geometry;
use crate::media::Media;
use crate::stripe::{assemble, StripeLayout};
use std::io;
use std::sync::Arc;

const BS: u64 = BLOCK_BYTES as u64;

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// What a new set asks of `Volume::format` (through its `SetMedia`).
pub struct Planned {
    pub set: Arc<StripeSet>,
    /// Pass these as `CreateOptions::logical_bytes` and `segment_bytes`:
    /// the geometry the set was laid out for.
    pub logical_bytes: u64,
    pub segment_bytes: u64,
}

/// Parameters of a new set.
#[derive(Debug, Clone)]
pub struct PlanOptions {
    pub parity: u32,
    pub unit: u64,
    /// Segment size aimed at (rounded to whole rows).
    pub segment_bytes: u64,
    /// Exported size; None = as large as the members allow.
    pub logical_bytes: Option<u64>,
    pub overprovision: f64,
    /// In-volume intent log ring bytes (0: none).
    pub log_bytes: u64,
    /// Set uuid; None = random (the simulator fixes it).
    pub set_uuid: Option<[u8; 16]>,
}

/// Lay a new set over `devices` (slot order = the order given). The set
/// comes back in format mode: run `Volume::format` on its `SetMedia`, then
/// `set.set_formatting(false)`.
pub fn plan(devices: Vec<(String, Arc<dyn Media>)>, o: &PlanOptions) -> io::Result<Planned> {
    let n = devices.len() as u32;
    let rps = StripeLayout::rows_for_segment_bytes(n, o.parity, o.unit, o.segment_bytes);
    // validates members, parity, unit and the segment size
    let probe =
        StripeLayout::new(n, o.parity, o.unit, rps, 0).map_err(|e| invalid(e.to_string()))?;
    let seg_bytes = probe.segment_bytes();
    let seg_blocks = (seg_bytes / BS) as u32;
    if seg_blocks < crate::format::chunk::MIN_SEGMENT_BLOCKS {
        return Err(invalid(format!(
            "segments of {seg_bytes} bytes ({rps} rows) are too small: raise the segment size or the stripe unit"
        )));
    }
    let smallest = devices.iter().map(|d| d.1.len()).min().unwrap_or(0);
    let member_need = |g: &Geometry| {
        g.data_offset
            + g.segment_count as u64 * rps * o.unit
            + TAIL_AREA_BYTES
            + super::scratch::area_bytes(o.unit)
    };
    let geo = |l: u64| Geometry::for_logical_log(l, seg_blocks, o.overprovision, o.log_bytes);
    let logical = match o.logical_bytes {
        Some(b) => {
            if b == 0 || !b.is_multiple_of(BS) {
                return Err(invalid(format!(
                    "volume size {b} must be a positive multiple of 4 KiB"
                )));
            }
            let g = geo(b / BS);
            if member_need(&g) > smallest {
                return Err(invalid(format!(
                    "a {b} byte volume needs {} bytes on every member; the smallest holds {smallest}",
                    member_need(&g)
                )));
            }
            b / BS
        }
        None => {
            let (mut lo, mut hi) = (0u64, smallest / BS * probe.data_members() as u64);
            while lo < hi {
                let mid = (lo + hi).div_ceil(2);
                if member_need(&geo(mid)) <= smallest {
                    lo = mid;
                } else {
                    hi = mid - 1;
                }
            }
            if lo == 0 {
                return Err(invalid(format!(
                    "members of {smallest} bytes are too small for a stripe set"
                )));
            }
            lo
        }
    };
    let g = geo(logical);
    let layout = StripeLayout::new(n, o.parity, o.unit, rps, g.data_offset)
        .map_err(|e| invalid(e.to_string()))?;
    let shape = Shape {
        data_offset: g.data_offset,
        segment_bytes: seg_bytes,
        segment_count: g.segment_count,
        tail_offset: g.data_end(),
        len: g.data_end() + TAIL_AREA_BYTES,
    };
    let set_uuid = o.set_uuid.unwrap_or_else(rand::random);
    let mut members = Vec::new();
    for (i, (name, media)) in devices.into_iter().enumerate() {
        let ident = StripeIdentity {
            set_uuid,
            member_uuid: match o.set_uuid {
                Some(u) => {
                    let mut m = u;
                    m[15] ^= (i as u8).wrapping_add(1);
                    m
                }
                None => rand::random(),
            },
            member_index: i as u16,
            member_count: n as u16,
            parity: o.parity as u8,
            layout: Layout::LeftSymmetric,
            stripe_unit: o.unit as u32,
            rows_per_segment: rps as u32,
            rows: g.segment_count as u64 * rps,
            generation: 1,
        };
        StripeIdentity::decode(&ident.encode()).map_err(|e| invalid(e.to_string()))?;
        members.push(Member::new(name, Some(media), ident));
    }
    let set = StripeSet::new(layout, shape, members)?;
    set.set_formatting(true);
    Ok(Planned {
        set: Arc::new(set),
        logical_bytes: logical * BS,
        segment_bytes: seg_bytes,
    })
}

/// Bytes each of `members` members needs for a `logical_bytes` volume
/// (what `plan` will ask of the smallest).
pub fn member_bytes_for(
    members: u32,
    parity: u32,
    unit: u64,
    segment_bytes: u64,
    logical_bytes: u64,
    overprovision: f64,
    log_bytes: u64,
) -> io::Result<u64> {
    let rps = StripeLayout::rows_for_segment_bytes(members, parity, unit, segment_bytes);
    let l = StripeLayout::new(members, parity, unit, rps, 0).map_err(|e| invalid(e.to_string()))?;
    let g = Geometry::for_logical_log(
        logical_bytes / BS,
        (l.segment_bytes() / BS) as u32,
        overprovision,
        log_bytes,
    );
    Ok(g.data_offset
        + g.segment_count as u64 * rps * unit
        + TAIL_AREA_BYTES
        + super::scratch::area_bytes(unit))
}

/// The member identity and (as the engine wrote it) superblock on `media`:
/// the newer valid head copy carrying `STRIPE_SET`.
pub fn read_member(media: &dyn Media) -> io::Result<Option<(StripeIdentity, Superblock)>> {
    let mut best: Option<(StripeIdentity, Superblock)> = None;
    if media.len() < 2 * BS {
        return Ok(None);
    }
    let mut head = crate::media::AlignedBuf::new(2 * BLOCK_BYTES);
    media.read_at(&mut head, 0)?;
    for b in head.chunks(BLOCK_BYTES) {
        let Ok(Some(id)) = StripeIdentity::from_superblock(b) else {
            continue;
        };
        if !super::meta::is_superblock(b) {
            continue;
        }
        let mut plain = b.to_vec();
        super::meta::from_member(&mut plain);
        let Ok(sb) = Superblock::decode(&plain) else {
            continue;
        };
        if best
            .as_ref()
            .is_none_or(|(_, s)| sb.generation > s.generation)
        {
            best = Some((id, sb));
        }
    }
    Ok(best)
}

/// Assemble the set `devices` make (any order; `None` media: a device that
/// could not be opened, named in the refusal if it matters).
pub fn open(devices: Vec<(String, Arc<dyn Media>)>) -> io::Result<Arc<StripeSet>> {
    let mut found = Vec::new();
    let mut sbs = Vec::new();
    for (name, media) in &devices {
        match read_member(&**media)? {
            Some((id, sb)) => {
                found.push((name.clone(), id));
                sbs.push(sb);
            }
            None => {
                return Err(invalid(format!(
                    "{name} is not a member of a stripe set (no valid superblock with STRIPE_SET at its head)"
                )))
            }
        }
    }
    let a = assemble(&found).map_err(|e| invalid(e.to_string()))?;
    // the geometry as the newest member's superblock says
    let newest = (0..found.len())
        .filter(|&k| found[k].1.set_uuid == a.set.set_uuid)
        .max_by_key(|&k| sbs[k].generation)
        .expect("the set has a member");
    let sb = &sbs[newest];
    let layout =
        StripeLayout::from_identity(&a.set, sb.data_offset).map_err(|e| invalid(e.to_string()))?;
    let seg_bytes = sb.segment_blocks as u64 * BS;
    if layout.segment_bytes() != seg_bytes
        || sb.segment_count as u64 * layout.rows_per_segment != a.set.rows
        || sb.tail_offset == 0
    {
        return Err(invalid(format!(
            "{}: its superblock's geometry ({} segments of {seg_bytes} bytes) does not match its stripe identity ({} rows of {})",
            found[newest].0, sb.segment_count, a.set.rows, layout.write_unit()
        )));
    }
    let shape = Shape {
        data_offset: sb.data_offset,
        segment_bytes: seg_bytes,
        segment_count: sb.segment_count,
        tail_offset: sb.tail_offset,
        len: sb.tail_offset + TAIL_AREA_BYTES,
    };
    let member_bytes = sb.data_offset
        + a.set.rows * layout.unit
        + TAIL_AREA_BYTES
        + super::scratch::area_bytes(layout.unit);
    type Slot = Option<(String, Arc<dyn Media>, StripeIdentity)>;
    let mut slots: Vec<Slot> = (0..layout.members).map(|_| None).collect();
    for (slot, k) in a.slots.iter().enumerate() {
        if let Some(k) = *k {
            let (name, media) = &devices[k];
            if media.len() < member_bytes {
                return Err(invalid(format!(
                    "{name} holds {} bytes, member {slot} of the set needs {member_bytes} (truncated?)",
                    media.len()
                )));
            }
            slots[slot] = Some((name.clone(), media.clone(), found[k].1));
        }
    }
    let members = slots
        .into_iter()
        .enumerate()
        .map(|(i, s)| match s {
            Some((name, media, id)) => Member::new(name, Some(media), id),
            None => {
                let mut id = a.set;
                id.member_index = i as u16;
                Member::new(format!("(slot {i} not given)"), None, id)
            }
        })
        .collect();
    let set = StripeSet::new(layout, shape, members)?;
    set.find_rebuild()?;
    set.load_scratch()?;
    if set.status().degraded() {
        tracing::warn!("{}: {}", set.describe(), set.status().describe());
    }
    Ok(Arc::new(set))
}
