//! A volume on a stripe set (issue 20): create one over member devices, open
//! one from its members in any order, and pick the set's segment store at
//! mount. The engine sees the set through `stripe_set::media::SetMedia`
//! (metadata mirrored, one flat geometry) and writes segment data through a
//! `StripeStore`; nothing else in the volume knows about members.
//!
//! Invariant: a volume mounted with `OpenOptions::stripe_set` has that set
//! under its media, with the geometry its superblock records (checked here).

use super::{CreateOptions, OpenOptions, Volume};
use crate::error::{Error, Result};
use crate::geometry::Geometry;
use crate::media::Media;
use crate::store::SegmentStore;
use crate::stripe_set::media::SetMedia;
use crate::stripe_set::open::{self, PlanOptions};
use crate::stripe_set::store::StripeStore;
use crate::stripe_set::StripeSet;
use std::sync::Arc;

/// The segment store of a mount on `set`, refused when the superblock's
/// geometry is not the set's.
pub(super) fn store(set: &Arc<StripeSet>, geo: &Geometry) -> Result<Arc<dyn SegmentStore>> {
    let s = set.shape;
    if s.segment_count != geo.segment_count
        || s.segment_bytes != geo.segment_bytes()
        || s.data_offset != geo.data_offset
    {
        return Err(Error::Corrupt(format!(
            "the superblock's geometry ({} segments of {} bytes at {}) is not the stripe set's ({} of {} at {})",
            geo.segment_count,
            geo.segment_bytes(),
            geo.data_offset,
            s.segment_count,
            s.segment_bytes,
            s.data_offset
        )));
    }
    Ok(Arc::new(StripeStore::new(set.clone())))
}

/// The store recovery scans a mount on `set` through (`recovery::
/// mount_store`'s `scan`): its reads of a damaged block find the block's
/// right bytes from the rest of its row. The geometry is checked after the
/// mount (`store`).
pub(super) fn scan_store(set: &Arc<StripeSet>) -> Arc<dyn SegmentStore> {
    Arc::new(StripeStore::new(set.clone()))
}

impl Volume {
    /// Format a new volume on a stripe set over `devices` (slot order =
    /// the order given) with `parity` parity members and stripe unit `unit`;
    /// `create`'s segment size is rounded to whole rows and its size (None:
    /// as large as the smallest member allows) checked against the members.
    pub fn format_striped(
        devices: Vec<(String, Arc<dyn Media>)>,
        parity: u32,
        unit: u64,
        create: &CreateOptions,
    ) -> Result<Arc<StripeSet>> {
        // every set this build makes: headers a rebuild from stale parity
        // cannot forge (docs/stripes.md §0, finding 1)
        // MUTANT: set-without-mixed-check s|create, true)|create, false)|
        Self::format_striped_with(devices, parity, unit, create, true)
    }

    /// `format_striped`; `mixed_check` false makes the set as builds before
    /// `MIXED_HEADER_CHECK` did (linear chunk header checks), for the tests
    /// that such sets keep mounting.
    #[doc(hidden)]
    pub fn format_striped_with(
        devices: Vec<(String, Arc<dyn Media>)>,
        parity: u32,
        unit: u64,
        create: &CreateOptions,
        mixed_check: bool,
    ) -> Result<Arc<StripeSet>> {
        let planned = open::plan(
            devices,
            &PlanOptions {
                parity,
                unit,
                segment_bytes: create.segment_bytes,
                logical_bytes: create.logical_bytes,
                overprovision: create.overprovision,
                log_bytes: if create.log_devices.is_empty() {
                    create.intent_log.unwrap_or(0)
                } else {
                    0
                },
                set_uuid: create.uuid.map(|u| {
                    let mut s = u;
                    s[0] ^= 0xa5;
                    s
                }),
            },
        )
        .map_err(|e| Error::InvalidArgument(e.to_string()))?;
        let mut c = create.clone();
        c.logical_bytes = Some(planned.logical_bytes);
        c.segment_bytes = planned.segment_bytes;
        Volume::format_with(&SetMedia::new(planned.set.clone()), &c, mixed_check)?;
        planned.set.set_formatting(false);
        Ok(planned.set)
    }

    /// Assemble the stripe set `devices` make (any order, up to `parity`
    /// members missing) and mount the volume on it.
    pub fn open_striped(
        devices: Vec<(String, Arc<dyn Media>)>,
        opts: &OpenOptions,
    ) -> Result<Volume> {
        let set = open::open(devices).map_err(|e| Error::InvalidArgument(e.to_string()))?;
        Volume::open_set(set, opts)
    }

    /// Mount the volume on an assembled set.
    pub fn open_set(set: Arc<StripeSet>, opts: &OpenOptions) -> Result<Volume> {
        // (rows partial at the last shutdown get their parity in place
        // again in `Volume::open`, after recovery: see `resync_after_mount`)
        // a superblock copy torn on one member (not the one the engine
        // reads) is put right before the engine writes the other copy
        // (docs/stripes.md §0, finding 4)
        if !opts.read_only {
            set.repair_superblocks()?;
        }
        // recovery's checked reads rewrite a member's failing copy of a
        // checkpoint or intent-log record from a good one (not read-only)
        set.set_meta_repair(!opts.read_only);
        // MUTANT: resync-before-recovery-heal s|let mut o = opts.clone();|if !opts.read_only { set.resync(&[], &[])?; } let mut o = opts.clone();|
        let mut o = opts.clone();
        o.stripe_set = Some(set.clone());
        Volume::open(Arc::new(SetMedia::new(set)), &o)
    }

    /// Put `new` into slot `slot` of the set `devices` make (the member it
    /// replaces left out of them) and mount the volume on the set with it
    /// being rebuilt (`rebuild_member` does the work). When `new` already is
    /// that slot's member, part rebuilt (a run cut short), the rebuild
    /// resumes from its record instead: nothing is attached again.
    pub fn replace_member(
        devices: Vec<(String, Arc<dyn Media>)>,
        slot: u32,
        new: (String, Arc<dyn Media>),
        opts: &OpenOptions,
    ) -> Result<Volume> {
        let mut all = devices.clone();
        all.push(new.clone());
        if let Ok(set) = open::open(all.clone()) {
            let held = set.members()[slot as usize]
                .media
                .as_ref()
                .is_some_and(|m| Arc::ptr_eq(m, &new.1));
            if held && set.rebuilding_slot() == Some(slot) {
                return Volume::open_set(set, opts);
            }
            if held {
                return Err(Error::InvalidArgument(format!(
                    "{} already is member {slot} of the set, whole: nothing to rebuild",
                    new.0
                )));
            }
        }
        let set = open::open(devices).map_err(|e| Error::InvalidArgument(e.to_string()))?;
        set.attach(slot, &new.0, &new.1)?;
        drop(set);
        let set = open::open(all).map_err(|e| Error::InvalidArgument(e.to_string()))?;
        if set.rebuilding_slot() != Some(slot) {
            return Err(Error::Corrupt(format!(
                "{} was attached as member {slot} but the set does not see it being rebuilt",
                new.0
            )));
        }
        Volume::open_set(set, opts)
    }

    /// Rebuild the set's member being rebuilt, from its record's cursor to
    /// the end, on the caller's thread (`sluice replace`; `start_rebuild`
    /// runs the same walk on a thread of its own): segments the engine
    /// holds free are only marked, the others copied
    /// (`StripeSet::rebuild_segments`) under a share of the reuse lock (a
    /// segment is not reused while it is copied) and the set's fence (no
    /// write lands in their rows meanwhile), each marked done only after
    /// its pieces are flushed. Safe while the volume takes writes. `rate`:
    /// bytes of member pieces per second at most (None: as fast as it
    /// goes). `progress` sees every step. Stops early (Ok, the cursor
    /// short of the end, the record kept: the next mount resumes) when the
    /// volume closes.
    pub fn rebuild_member(
        &self,
        rate: Option<u64>,
        progress: &mut dyn FnMut(&crate::stripe_set::rebuild::Progress),
    ) -> Result<crate::stripe_set::rebuild::Progress> {
        let Some(set) = self.stripe.clone() else {
            return Err(Error::InvalidArgument("not a stripe set".into()));
        };
        rebuild_walk(&self.sh, &set, rate, &self.rebuilder.stop, progress)
    }

    /// Start rebuilding the member being rebuilt on a thread of its own
    /// (`sluice-rebuild`, owned by this volume) while the volume serves:
    /// `close` (and drop) stops it between two batches and waits for it,
    /// the record left at the last mark (the next mount resumes there).
    /// Progress is in the set's status (metrics, `top`, `info`).
    pub fn start_rebuild(&self, rate: Option<u64>) -> Result<()> {
        let Some(set) = self.stripe.clone() else {
            return Err(Error::InvalidArgument("not a stripe set".into()));
        };
        if set.rebuilding_slot().is_none() {
            return Err(Error::InvalidArgument(
                "no member of the stripe set is being rebuilt".into(),
            ));
        }
        if self.sh.opts.read_only {
            return Err(Error::InvalidArgument(
                "a read-only mount does not rebuild".into(),
            ));
        }
        let mut h = self.rebuilder.handle.lock();
        if h.is_some() {
            return Err(Error::InvalidArgument(
                "a rebuild is running already".into(),
            ));
        }
        let (sh, stop) = (self.sh.clone(), self.rebuilder.stop.clone());
        *h = Some(
            std::thread::Builder::new()
                .name("sluice-rebuild".into())
                .spawn(move || {
                    let r = rebuild_walk(&sh, &set, rate, &stop, &mut |p| {
                        tracing::info!(
                            "stripe set: rebuilding member {}: {} of {} segments",
                            p.slot,
                            p.next_segment,
                            p.segment_count
                        )
                    });
                    match &r {
                        Ok(p) if p.next_segment < p.segment_count => tracing::warn!(
                            "stripe set: rebuild of member {} stopped at segment {} of {} (resumes at the next mount)",
                            p.slot,
                            p.next_segment,
                            p.segment_count
                        ),
                        Ok(p) => tracing::warn!(
                            "stripe set: member {} rebuilt: {} segments copied, {} free ones only marked",
                            p.slot,
                            p.copied,
                            p.skipped
                        ),
                        Err(e) => tracing::error!("stripe set: rebuild failed: {e}"),
                    }
                    r
                })
                .map_err(Error::Io)?,
        );
        Ok(())
    }

    /// Wait for the rebuild `start_rebuild` started and take its outcome
    /// (None: none was started, or its outcome was taken already).
    pub fn wait_rebuild(&self) -> Option<Result<crate::stripe_set::rebuild::Progress>> {
        let h = self.rebuilder.handle.lock().take()?;
        Some(
            h.join()
                .unwrap_or_else(|_| Err(Error::Corrupt("the rebuild thread panicked".into()))),
        )
    }

    /// Check the parity of every full row of every closed segment against
    /// its data (`sluice check --device`); on a read-write mount the rows
    /// that disagree get their parity rewritten (`--repair`). One line per
    /// row that disagrees (none on a volume that is not a stripe set).
    pub fn scrub_parity_all(&self) -> Vec<String> {
        let mut out = Vec::new();
        for seg in 0..self.sh.geo.segment_count {
            let _r = self.sh.reuse.read();
            let (fill, uuid) = {
                let c = self.sh.core.lock();
                let s = &c.segs.segs[seg as usize];
                match s.state {
                    crate::segments::SegState::Closed | crate::segments::SegState::Damaged => {
                        (s.fill, c.uuid)
                    }
                    _ => continue,
                }
            };
            out.extend(self.sh.scrub_redundancy(seg, fill, &uuid));
        }
        out
    }

    /// The stripe set under this volume, if any.
    pub fn stripe_set(&self) -> Option<&Arc<StripeSet>> {
        self.stripe.as_ref()
    }
}

impl super::Shared {
    /// A read-write mount of a stripe set, after recovery and its repairs:
    /// the rows partial at the last shutdown, and the rows holding the
    /// chunks recovery found past the checkpoint (`replayed`: physical
    /// extents), get their parity in place from their data
    /// (`StripeSet::resync`), durable before the mount's checkpoint adopts
    /// those chunks. Not before recovery: the resync computes parity from
    /// the data as it is on the members, so a bit flipped in a durable
    /// block of such a row would be baked into it, and recovery could no
    /// longer read the block right from the row's scratch copy
    /// (docs/stripes.md §0 finding 4).
    pub(crate) fn resync_after_mount(&self, replayed: &[(u64, u32)]) -> Result<()> {
        if let (Some(set), false) = (&self.opts.stripe_set, self.opts.read_only) {
            let keep = self.rows_failing_checks(set, replayed);
            set.resync(replayed, &keep)?;
        }
        Ok(())
    }

    /// Every block of the rows the mount's resync recomputes (rows a scratch
    /// tag names, rows holding a chunk found past the checkpoint) that
    /// fails its check (by the segment's chunk headers, below its fill) is
    /// healed first (`heal`: from the row's scratch copy or its parity):
    /// parity recomputed from the data as it is would bake the wrong bytes
    /// in, and the block could never be read right again (found by the
    /// DST: a bit flipped in a flushed block of an old chunk, which
    /// recovery's walk does not check, answered EIO after the resync of
    /// its row: docs/stripes.md §0 finding 4, the flip). Returns the
    /// untagged rows where that fails: their parity stays as it is.
    fn rows_failing_checks(&self, set: &StripeSet, replayed: &[(u64, u32)]) -> Vec<u64> {
        let tagged = set.tagged_rows();
        let mut rows = set.replayed_rows(replayed);
        rows.extend(tagged.iter().copied());
        // (with the member being rebuilt the only one down, rows are
        // resynced too, `StripeSet::resync`: a block failing
        // its check cannot be healed then, and keeps its row as it is)
        if rows.is_empty() || (set.status().degraded() && set.rebuilding_alone().is_none()) {
            return Vec::new();
        }
        let sb = self.geo.segment_blocks;
        let rb = set.layout.write_unit() / crate::format::BLOCK_BYTES as u64;
        let mut known_of: std::collections::HashMap<u32, Option<Known>> = Default::default();
        let mut buf = crate::media::AlignedBuf::new(crate::format::BLOCK_BYTES);
        let mut keep = Vec::new();
        for row in rows {
            let mut bad = false;
            for p in row * rb..(row + 1) * rb {
                let seg = (p / sb as u64) as u32;
                let (fill, uuid) = {
                    let c = self.core.lock();
                    (c.segs.segs[seg as usize].fill, c.uuid)
                };
                let known = known_of.entry(seg).or_insert_with(|| {
                    let (k, end) = self.blocks_known(seg, fill, &uuid)?;
                    if end >= fill {
                        return Some(k);
                    }
                    // The walk stopped at a header that fails its check
                    // (a bit flipped on one member): everything from it on
                    // counts as unknown and would be baked into the parity
                    // as it is. Heal it first (`heal` heals the headers its
                    // walk stops at), then walk again (docs/stripes.md §0
                    // finding 10).
                    let hp = seg as u64 * sb as u64 + end as u64;
                    // MUTANT: resync-skips-header-heal s|self.heal(None, hp as u32, false);|let _ = hp;|
                    self.heal(None, hp as u32, false);
                    self.blocks_known(seg, fill, &uuid).map(|k| k.0)
                });
                let Some(known) = known else {
                    continue;
                };
                let judged = match self.store.read(p, &mut buf) {
                    Ok(()) => judge(known, seg, sb, &uuid, p, &buf),
                    Err(_) => Some(false),
                };
                // MUTANT: resync-bakes-failing-block s|if judged == Some(false) && !self.heal(None, p as u32, false) {|if false {|
                if judged == Some(false) && !self.heal(None, p as u32, false) {
                    bad = true;
                }
            }
            // a row a tag names is resynced all the same (its tags are
            // voided with every other); healed first where it can be
            if bad && !tagged.contains(&row) {
                tracing::warn!(
                    "{}: row {row} holds a block that fails its check and cannot be healed: its parity is not resynced",
                    self.store.describe()
                );
                keep.push(row);
            }
        }
        keep
    }

    /// Rewrite in place the blocks recovery read right from their rows
    /// (`recovery::Healed`: they still fail their check on the members),
    /// through the store's self-healing (`SegmentStore::damaged`), judged
    /// by the check recovery held them to. A block that cannot be healed
    /// now is left as it is (a read of it heals or answers EIO later).
    pub(crate) fn repair_healed(&self, healed: &[crate::recovery::Healed], uuid: &[u8; 16]) {
        for h in healed {
            let sb = self.geo.segment_blocks;
            let mut check = |q: u64, b: &[u8]| h.judge(q, b, uuid, sb);
            let r = self.store.damaged(h.phys, &mut check);
            tracing::info!(
                "{}: block {} (segment {}) read right from its row at mount: {r:?}",
                self.store.describe(),
                h.phys,
                h.segment
            );
        }
    }

    /// Physical block `p`, which logical block `lba` maps to, failed its
    /// CRC: ask the store to heal it (a stripe set finds its right bytes
    /// from the rest of the row and rewrites them; docs/stripes.md §5).
    /// True when the store says a read again returns verified bytes. The
    /// check it is given knows every block of `p`'s segment from the
    /// segment's chunk headers (read again here, on this error path): a
    /// data block by its CRC, a header by its own check. Never on a
    /// read-only mount (it writes). `nested`: the caller holds a share of
    /// the reuse lock.
    pub(crate) fn heal(&self, lba: Option<u64>, p: u32, nested: bool) -> bool {
        if self.opts.read_only || self.store.members() < 2 {
            return false;
        }
        // the segment stays this incarnation while its blocks are judged
        // and rewritten
        let _r = if nested {
            self.reuse.read_recursive()
        } else {
            self.reuse.read()
        };
        let sb = self.geo.segment_blocks;
        let seg = p / sb;
        let (fill, uuid) = {
            let c = self.core.lock();
            if lba.is_some_and(|lba| c.map.get(lba) != crate::map::Loc::Data(p)) {
                // overwritten meanwhile: not damage, read again
                return true;
            }
            (c.segs.segs[seg as usize].fill, c.uuid)
        };
        let Some((mut known, mut end)) = self.blocks_known(seg, fill, &uuid) else {
            return false;
        };
        // A chunk header that fails its check (a bit flipped on one member)
        // ends the walk, and nothing after it can be judged (nor verified
        // by reads: the CRC index stops there too): heal the header first,
        // then walk again (docs/stripes.md §0 finding 4).
        let mut rounds = 0;
        while end < fill && rounds < sb {
            rounds += 1;
            let hp = seg as u64 * sb as u64 + end as u64;
            let mut check = |q: u64, b: &[u8]| {
                if q != hp {
                    return judge(&known, seg, sb, &uuid, q, b);
                }
                Some(crate::format::chunk::ChunkHeader::decode(b).is_ok_and(|h| {
                    h.uuid == uuid && h.segment == seg && end + h.total_blocks() <= fill
                }))
            };
            // MUTANT: runtime-header-heal-skipped s|self.store.damaged(hp, &mut check)|crate::store::Repair::Undecidable|
            let r = self.store.damaged(hp, &mut check);
            if !matches!(r, crate::store::Repair::Healed { .. }) {
                break;
            }
            let _ = self.crc_index.load_segment(&*self.store, seg, fill);
            let Some(again) = self.blocks_known(seg, fill, &uuid) else {
                return false;
            };
            if again.1 <= end {
                break;
            }
            (known, end) = again;
        }
        let mut check = |q: u64, b: &[u8]| judge(&known, seg, sb, &uuid, q, b);
        matches!(
            self.store.damaged(p as u64, &mut check),
            crate::store::Repair::Healed { .. }
        )
    }

    /// Each block of `seg` below `fill` its chunk headers describe (read
    /// again here): Some(crc) for a data block, None for a header block;
    /// and the block where the walk of verified headers ended. None when
    /// the segment cannot be read.
    fn blocks_known(&self, seg: u32, fill: u32, uuid: &[u8; 16]) -> Option<(Known, u32)> {
        let mut known = Known::default();
        let end = crate::crc_index::walk(&*self.store, uuid, seg, fill, |at, h| {
            known.insert(at.pos, None);
            for (i, &crc) in h.block_crcs.iter().enumerate() {
                known.insert(at.pos + 1 + i as u32, Some(crc));
            }
        })
        .ok()?;
        Some((known, end))
    }

    /// The store's redundancy check of closed segment `seg` (a stripe set:
    /// every full row's parity against its data), rewriting what is wrong
    /// unless the mount is read-only; the caller holds a share of the reuse
    /// lock. One line per disagreement.
    pub(crate) fn scrub_redundancy(&self, seg: u32, fill: u32, uuid: &[u8; 16]) -> Vec<String> {
        if self.store.members() < 2 {
            return Vec::new();
        }
        let Some((known, end)) = self.blocks_known(seg, fill, uuid) else {
            return vec![format!(
                "segment {seg}: its chunk headers cannot be read; parity not checked"
            )];
        };
        let sb = self.geo.segment_blocks;
        let mut check = |q: u64, b: &[u8]| judge(&known, seg, sb, uuid, q, b);
        // only rows below the last header that verifies: past a damaged
        // header nothing can judge the data, and parity rewritten from it
        // would lose what could heal it
        self.store
            .scrub_redundancy(seg, end.min(fill), &mut check, !self.opts.read_only)
            .unwrap_or_else(|e| vec![format!("segment {seg}: parity check failed: {e}")])
    }
}

/// Blocks of a segment its chunk headers describe: Some(crc) for a data
/// block, None for a header block.
type Known = std::collections::HashMap<u32, Option<u32>>;

/// Judge physical block `q` holding `b` by what `seg`'s chunk headers say
/// (`blocks_known`): a data block by its CRC, a header by its own check,
/// anything else (another segment, padding, past the last chunk) unknown.
fn judge(known: &Known, seg: u32, sb: u32, uuid: &[u8; 16], q: u64, b: &[u8]) -> Option<bool> {
    let k = u32::try_from(q.checked_sub(seg as u64 * sb as u64)?).ok()?;
    if k >= sb {
        return None;
    }
    match known.get(&k)? {
        Some(crc) => Some(crate::format::chunk::block_crc(b) == *crc),
        None => Some(
            crate::format::chunk::ChunkHeader::decode(b)
                .is_ok_and(|h| &h.uuid == uuid && h.segment == seg),
        ),
    }
}

/// The rebuild thread a volume owns (`Volume::start_rebuild`) and the flag
/// that stops it (and a walk on the caller's thread) between two batches.
#[derive(Default)]
pub(super) struct Rebuilder {
    stop: Arc<std::sync::atomic::AtomicBool>,
    handle: parking_lot::Mutex<
        Option<std::thread::JoinHandle<Result<crate::stripe_set::rebuild::Progress>>>,
    >,
}

impl Rebuilder {
    /// Stop the walk at its next batch and wait for the thread (the
    /// record stays at its last mark). The outcome stays for `wait_rebuild`
    /// only if the thread had ended on its own; a stopped one is logged.
    pub(super) fn stop(&self) {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
        if let Some(h) = self.handle.lock().take() {
            let _ = h.join();
        }
    }
}

/// Sleep until `until` from `t0`, in slices, returning early when `stop`.
fn pace(t0: std::time::Instant, due: std::time::Duration, stop: &std::sync::atomic::AtomicBool) {
    while let Some(wait) = due.checked_sub(t0.elapsed()) {
        if stop.load(std::sync::atomic::Ordering::Acquire) {
            return;
        }
        std::thread::sleep(wait.min(std::time::Duration::from_millis(50)));
    }
}

/// `Volume::rebuild_member`'s walk (docs/stripes.md §6), on any thread.
fn rebuild_walk(
    sh: &super::Shared,
    set: &Arc<StripeSet>,
    rate: Option<u64>,
    stop: &std::sync::atomic::AtomicBool,
    progress: &mut dyn FnMut(&crate::stripe_set::rebuild::Progress),
) -> Result<crate::stripe_set::rebuild::Progress> {
    let Some(p) = set.status().rebuild else {
        return Err(Error::InvalidArgument(
            "no member of the stripe set is being rebuilt".into(),
        ));
    };
    let count = p.segment_count;
    let seg_piece = set.layout.rows_per_segment * set.layout.unit;
    let batch = set.rebuild_batch_segments();
    let mut bufs = crate::stripe_set::rebuild::RebuildBufs::default();
    let t0 = std::time::Instant::now();
    let mut bytes = 0u64;
    // the cursor moves every MARK_EVERY live segments (and at the end):
    // one member flush and record write for the batch, not one each
    const MARK_EVERY: u32 = 16;
    let (mut copied, mut skipped) = (0u32, 0u32);
    let mut seg = p.next_segment;
    while seg < count {
        if stop.load(std::sync::atomic::Ordering::Acquire) {
            // closing: what is copied since the last mark is marked (its
            // pieces flushed first), the rest waits for the next mount
            if copied + skipped > 0 {
                set.mark_rebuilt(seg, copied, skipped)?;
            }
            return Ok(set.status().rebuild.unwrap_or(p));
        }
        // a run of segments alike (live: at most `batch` of them), under
        // a share of the reuse lock: none of them is reused meanwhile
        let (live, end) = {
            let _r = sh.reuse.read();
            let (live, end) = {
                let c = sh.core.lock();
                let is_live = |s: u32| {
                    !matches!(
                        c.segs.segs[s as usize].state,
                        crate::segments::SegState::Free
                    )
                };
                let live = is_live(seg);
                let limit = if live {
                    batch.min(MARK_EVERY - copied)
                } else {
                    count
                };
                let mut end = seg + 1;
                while end < count && end - seg < limit && is_live(end) == live {
                    end += 1;
                }
                (live, end)
            };
            // MUTANT: rebuild-marks-before-data s|if live {|if live { set.mark_rebuilt(end, 0, 0)?;|
            if live {
                set.rebuild_segments(seg, end, &mut bufs)?;
            }
            (live, end)
        };
        let done = end - seg;
        if live {
            copied += done;
        } else {
            skipped += done;
        }
        seg = end;
        if seg == count || copied >= MARK_EVERY {
            set.mark_rebuilt(seg, copied, skipped)?;
            (copied, skipped) = (0, 0);
            if let Some(p) = set.status().rebuild {
                progress(&p);
            }
        }
        if live {
            bytes += seg_piece * done as u64;
            if let Some(rate) = rate {
                let due = std::time::Duration::from_secs_f64(bytes as f64 / rate.max(1) as f64);
                pace(t0, due, stop);
            }
        }
    }
    let done = set.status().rebuild.unwrap_or(p);
    set.finish_rebuild()?;
    Ok(done)
}
