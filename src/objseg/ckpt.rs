//! Checkpoint objects of a volume in an object store (docs/objects.md §5.2):
//! after the engine made a checkpoint durable in the local metadata file
//! (checked every `ckpt_every` segment uploads, on an idle worker's tick and
//! at a clean close), this store captures it (the superblock naming it, its
//! image, the slot table as of a moment no later than the engine's next
//! slot reuse, and the written blocks of the open segments: slots with data
//! that are not full yet) and puts it as the write-once object `ckpt/N-E`
//! (N from a counter monotonic over the volume's life, E the lease's epoch).
//! A full segment still waiting for its upload is not carried: the capture
//! waits (`Pending`) until that life's object is stored and names it, so a
//! store that lags the writes costs no copies (issue 21 wave 12: carrying
//! them cost 1.77 store bytes per host byte). A host with an empty cache
//! directory mounts from the newest one (`recover.rs`).
//!
//! Invariants:
//! - a checkpoint object holds, for every slot whose data its image needs,
//!   the object holding that data or the data itself (a capture whose reads
//!   the engine's next superblock write overlapped is dropped);
//! - a checkpoint object is put only once every segment object it names is
//!   stored; a capture waiting for a full segment's upload is dropped if
//!   that slot starts another life first (its data is then nowhere);
//! - an object is deleted only after two checkpoint objects captured after
//!   the delete was asked for are stored, and while neither of the newest
//!   two stored ones nor the slot table names it: a mount from the newest
//!   checkpoint object, or from the one before it, finds every object it
//!   names, and roll-forward from either finds no hole made by a delete;
//! - checkpoint objects older than the newest two stored are deleted;
//! - store-durable mode: a capture's `log_start` is taken before it reads
//!   anything, so every FLUSH log record below it is reflected in it; log
//!   objects are deleted only below the older kept one's (`durable.rs`).

use super::{Inner, Job, ObjRef};
use crate::format::checkpoint::{body_bytes_with, CheckpointHeader};
use crate::format::objckpt::{ObjCheckpoint, SlotObject};
use crate::format::objname::ObjName;
use crate::format::superblock::NO_CHECKPOINT;
use crate::format::BLOCK_BYTES;
use crate::media::AlignedBuf;
use crate::store::SegmentStore;
use std::collections::{HashSet, VecDeque};
use std::sync::atomic::Ordering;

/// Checkpoint objects kept (the newest and the one a damaged newest falls
/// back to).
pub const KEEP: usize = 2;

/// At most this many waited-for segments are copied into a pending
/// capture when the engine reuses them before their upload (memory bound);
/// past it the capture is dropped and taken again.
pub const RESCUE_MAX: usize = 16;

/// A delete waiting for checkpoint objects that no longer need its object.
pub(super) struct Deferred {
    pub name: String,
    pub bytes: u64,
    /// The name number the next capture had when the delete was asked for:
    /// captures numbered >= this one were taken after it.
    pub after: u64,
}

/// A checkpoint object stored by this writer or found at attach.
pub(super) struct StoredCkpt {
    pub seq: u64,
    pub name: String,
    pub refs: HashSet<(u64, u64)>,
    /// The writer's epoch (from the name) and the FLUSH log record its
    /// capture starts at (store-durable mode).
    pub epoch: u64,
    pub log_start: Option<u64>,
}

#[derive(Default)]
pub(super) struct CkptState {
    /// `checkpoint_next_seq` of the last checkpoint stored (each is stored once).
    last_next_seq: Option<u64>,
    /// Segment uploads when the last checkpoint object was stored.
    uploads_at_last: u64,
    /// Oldest first, at most KEEP.
    pub stored: VecDeque<StoredCkpt>,
    /// A capture waiting for full segments' uploads (at most one).
    pub pending: Option<Pending>,
}

/// A capture that names full segments by the objects their uploads will
/// store: put once every one of them is stored (`Inner::complete`).
pub(super) struct Pending {
    pub seq: u64,
    obj: ObjCheckpoint,
    /// (slot, life) of each full segment it waits for.
    waits: Vec<(u32, u64)>,
    next_seq: u64,
    uploads: u64,
}

/// What became of a pending capture.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    /// Put (or none was pending).
    Stored,
    /// Still waiting for an upload.
    Waiting,
    /// A slot it waits for started another life: dropped.
    Dropped,
    /// The put failed: tried again later.
    Failed,
}

impl CkptState {
    pub fn protects(&self, seq: u64, epoch: u64) -> bool {
        self.stored.iter().any(|c| c.refs.contains(&(seq, epoch)))
    }
}

/// The (seq, epoch) pairs a decoded checkpoint object names.
pub(super) fn refs_of(c: &ObjCheckpoint) -> HashSet<(u64, u64)> {
    c.slots.iter().flatten().map(|s| (s.seq, s.epoch)).collect()
}

impl Inner {
    /// Store the engine's newest checkpoint as an object if it is new and
    /// `ckpt_every` segments were uploaded since the last one (`force`: any
    /// new one: a clean close). Never waits for another caller (one at a
    /// time); errors are logged and tried again at the next call. true: the
    /// engine's current checkpoint is stored as an object.
    pub(super) fn try_checkpoint(&self, force: bool) -> bool {
        if self.read_only || self.state.lock().failed.is_some() {
            return false;
        }
        let Some(mut ck) = self.ckpt.try_lock() else {
            return false;
        };
        match self.complete(&mut ck) {
            Outcome::Waiting | Outcome::Failed => return false,
            Outcome::Stored | Outcome::Dropped => {}
        }
        let uploads = self.stats.uploaded_objects.load(Ordering::Relaxed);
        if !force && uploads < ck.uploads_at_last + self.opts.ckpt_every.max(1) as u64 {
            return false;
        }
        self.capture(&mut ck, uploads, false)
    }

    /// `try_checkpoint` of the local file as it is now, stored even when
    /// the engine made no checkpoint since the last one (`checkpoint_now`).
    pub(super) fn try_checkpoint_fresh(&self) -> bool {
        if self.read_only || self.state.lock().failed.is_some() {
            return false;
        }
        let mut ck = self.ckpt.lock();
        // a fresh capture carries every slot it needs and supersedes a
        // pending one (names stay in capture order)
        ck.pending = None;
        {
            let mut st = self.state.lock();
            st.ckpt_waits.clear();
            st.rescued.clear();
        }
        let uploads = self.stats.uploaded_objects.load(Ordering::Relaxed);
        self.capture(&mut ck, uploads, true)
    }

    /// The pending capture, put if every upload it waits for is stored.
    pub(super) fn complete(&self, ck: &mut CkptState) -> Outcome {
        let Some(p) = ck.pending.as_mut() else {
            return Outcome::Stored;
        };
        {
            let mut st = self.state.lock();
            if st.failed.is_some() {
                return Outcome::Failed;
            }
            let mut ready = true;
            for &(slot, life) in &p.waits {
                match st.ckpt_waits.get(&slot) {
                    // that life's object, recorded by its upload (the slot
                    // may have moved on since: the object's delete waits for
                    // captures taken after it was asked for, this one is
                    // older)
                    Some(&(l, Some(r))) if l == life => {
                        p.obj.slots[slot as usize] = Some(SlotObject {
                            seq: r.seq,
                            epoch: r.epoch,
                            crc: r.crc,
                        })
                    }
                    _ if st.rescued.iter().any(|x| (x.0, x.1) == (slot, life)) => {}
                    _ if st.slots[slot as usize].life != life => {
                        // the engine moved on before that life was stored,
                        // and its blocks could not be kept: the capture's
                        // data for that slot is nowhere; a later capture
                        // (the next try) takes its place
                        st.ckpt_waits.clear();
                        st.rescued.clear();
                        drop(st);
                        ck.pending = None;
                        self.stats
                            .checkpoint_waits_dropped
                            .fetch_add(1, Ordering::Relaxed);
                        return Outcome::Dropped;
                    }
                    _ => ready = false,
                }
            }
            // MUTANT: ckpt-put-before-its-uploads s|if !ready {|if !ready && false {|
            if !ready {
                return Outcome::Waiting;
            }
            // the rescued lives that no object holds are carried
            let named: Vec<u32> = p
                .waits
                .iter()
                .filter(|(slot, _)| p.obj.slots[*slot as usize].is_some())
                .map(|w| w.0)
                .collect();
            st.ckpt_waits.clear();
            for (slot, life, bytes) in std::mem::take(&mut st.rescued) {
                if p.waits.contains(&(slot, life)) && !named.contains(&slot) {
                    self.stats
                        .checkpoint_rescued
                        .fetch_add(1, Ordering::Relaxed);
                    p.obj.partials.push((slot, bytes));
                }
            }
        }
        let p = ck.pending.take().expect("pending");
        if self.put_capture(ck, p.seq, p.obj, p.next_seq, p.uploads) {
            Outcome::Stored
        } else {
            Outcome::Failed
        }
    }

    fn capture(&self, ck: &mut CkptState, uploads: u64, fresh: bool) -> bool {
        // before any read: every FLUSH log record below it is in the capture
        let log_start = self.log.as_ref().map(|l| l.mark());
        let a = match crate::recovery::read_superblocks(&*self.media) {
            Ok(r) => r.sb,
            Err(e) => {
                tracing::warn!("checkpoint object: reading the superblock: {e}");
                return false;
            }
        };
        if a.checkpoint_slot == NO_CHECKPOINT {
            // none made yet: nothing to store
            return true;
        }
        if ck.last_next_seq == Some(a.checkpoint_next_seq) && !fresh {
            return true;
        }
        // The slot table as of now: the checkpoint `a` names was made before
        // this point, and (checked below: the superblock did not change
        // until after the reads) no slot it needs started a new life since.
        let (seq, seg_start, refs, partial, waits) = {
            let st = self.state.lock();
            let seq = self.ckpt_next.fetch_add(1, Ordering::SeqCst);
            let refs: Vec<Option<ObjRef>> = st.slots.iter().map(|s| s.stored).collect();
            // full segments waiting for their upload: named once stored
            // (a fresh capture, which must not wait: carried)
            // MUTANT: queued-segments-carried s|let carry_queued = fresh;|let carry_queued = true;|
            let carry_queued = fresh;
            let waits: Vec<(u32, u64)> = if carry_queued {
                Vec::new()
            } else {
                st.slots
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| s.stored.is_none() && s.local && s.queued)
                    .map(|(i, s)| (i as u32, s.life))
                    .collect()
            };
            let partial: Vec<(u32, u32)> = st
                .slots
                .iter()
                .enumerate()
                .filter(|(_, s)| s.stored.is_none() && s.local)
                .filter(|(_, s)| carry_queued || !s.queued)
                .filter_map(|(i, s)| {
                    // blocks up to the highest written in this life; a slot
                    // queued from an earlier mount: all of it
                    let hi = s
                        .written
                        .iter()
                        .enumerate()
                        .rev()
                        .find(|(_, &w)| w != 0)
                        .map(|(j, &w)| j as u32 * 64 + 64 - w.leading_zeros());
                    match (hi, s.queued) {
                        (_, true) => Some((i as u32, self.geo.segment_blocks)),
                        (Some(h), false) => Some((i as u32, h)),
                        (None, false) => None,
                    }
                })
                .collect();
            (
                seq,
                self.next_seq.load(Ordering::SeqCst),
                refs,
                partial,
                waits,
            )
        };
        let body = body_bytes_with(
            self.geo.logical_blocks,
            self.geo.segment_count,
            self.geo.map_value_bytes,
        ) as usize;
        let len = (BLOCK_BYTES + body).div_ceil(BLOCK_BYTES) * BLOCK_BYTES;
        let mut img = AlignedBuf::new(len);
        let at = a.checkpoint_offset[a.checkpoint_slot as usize & 1];
        if let Err(e) = self.media.read_at(&mut img, at) {
            tracing::warn!("checkpoint object: reading the checkpoint image: {e}");
            return false;
        }
        let ok = CheckpointHeader::decode(&img).is_ok_and(|h| {
            h.uuid == a.uuid
                && h.next_seq == a.checkpoint_next_seq
                && crc32c::crc32c(&img[BLOCK_BYTES..BLOCK_BYTES + body]) == h.body_crc
        });
        if !ok {
            return false;
        }
        let mut partials = Vec::new();
        for (seg, blocks) in partial {
            let mut buf = AlignedBuf::new(blocks as usize * BLOCK_BYTES);
            // a slot with no object is never punched
            let _g = self.evict.read();
            if let Err(e) = self.local.read_segment(seg, 0, &mut buf) {
                tracing::warn!("checkpoint object: reading segment {seg} from staging: {e}");
                return false;
            }
            partials.push((seg, buf.to_vec()));
        }
        let b = crate::recovery::read_superblocks(&*self.media).map(|r| r.sb);
        if b.as_ref().map_or(true, |b| b.generation != a.generation) {
            // the engine moved on under the reads: the next call tries anew
            self.stats.checkpoint_races.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let obj = ObjCheckpoint {
            uuid: a.uuid,
            segment_blocks: self.geo.segment_blocks,
            seg_start,
            slots: refs
                .iter()
                .map(|r| {
                    r.map(|r| SlotObject {
                        seq: r.seq,
                        epoch: r.epoch,
                        crc: r.crc,
                    })
                })
                .collect(),
            superblock: a.encode(),
            image: img[..BLOCK_BYTES + body].to_vec(),
            partials,
            log_start,
        };
        if !waits.is_empty() {
            {
                let mut st = self.state.lock();
                // a life stored during the reads: its object (recorded at
                // its upload, kept across the slot's later lives)
                let known: Vec<(u32, (u64, Option<ObjRef>))> = waits
                    .iter()
                    .map(|&(slot, life)| {
                        let s = &st.slots[slot as usize];
                        let r = s.last_stored.filter(|(l, _)| *l == life).map(|x| x.1);
                        (slot, (life, r))
                    })
                    .collect();
                if known
                    .iter()
                    .any(|&(slot, (life, r))| r.is_none() && st.slots[slot as usize].life != life)
                {
                    // one moved on during the reads (before new_life could
                    // know to keep its blocks): taken again later
                    self.stats
                        .checkpoint_waits_dropped
                        .fetch_add(1, Ordering::Relaxed);
                    return false;
                }
                st.rescued.clear();
                st.ckpt_waits = known.into_iter().collect();
            }
            ck.pending = Some(Pending {
                seq,
                obj,
                waits,
                next_seq: a.checkpoint_next_seq,
                uploads,
            });
            return matches!(self.complete(ck), Outcome::Stored);
        }
        self.put_capture(ck, seq, obj, a.checkpoint_next_seq, uploads)
    }

    /// Put a capture whose named segment objects are all stored as
    /// `ckpt/seq-E`; then trim the older ones and release deletes.
    fn put_capture(
        &self,
        ck: &mut CkptState,
        seq: u64,
        obj: ObjCheckpoint,
        next_seq: u64,
        uploads: u64,
    ) -> bool {
        let log_start = obj.log_start;
        let name = ObjName::Checkpoint {
            seq,
            epoch: self.lease.epoch,
        }
        .encode();
        let bytes = obj.encode();
        if !self.lease_fresh() {
            return false;
        }
        if let Err(e) = self.objects.put_new(&name, &bytes) {
            tracing::warn!(
                "{}: checkpoint object {name} (log below {next_seq}): {e}; trying again later",
                self.objects.describe(),
            );
            return false;
        }
        self.stats
            .checkpoints_stored
            .fetch_add(1, Ordering::Relaxed);
        self.stats
            .checkpoint_bytes
            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
        ck.last_next_seq = Some(next_seq);
        ck.uploads_at_last = uploads;
        ck.stored.push_back(StoredCkpt {
            seq,
            name,
            refs: refs_of(&obj),
            epoch: self.lease.epoch,
            log_start,
        });
        while ck.stored.len() > KEEP {
            let old = ck.stored.pop_front().expect("more than KEEP");
            self.state.lock().jobs.push_back(Job::Delete {
                name: old.name,
                bytes: 0,
            });
        }
        // MUTANT: log-deleted-before-ckpt s|ck.stored.front()|ck.stored.back()|
        if let (Some(log), Some(oldest)) = (&self.log, ck.stored.front()) {
            // the FLUSH log below the older kept checkpoint object's start
            if let Some(from) = oldest.log_start {
                let gone = log.deletable(oldest.epoch, from);
                let mut st = self.state.lock();
                for name in gone {
                    st.jobs.push_back(Job::Delete { name, bytes: 0 });
                }
                self.work.notify_all();
            }
        }
        self.release_deferred(ck);
        true
    }

    /// Queue the deferred deletes the stored checkpoint objects allow.
    pub(super) fn release_deferred(&self, ck: &CkptState) {
        if ck.stored.len() < KEEP {
            return;
        }
        let oldest_kept = ck.stored[0].seq;
        let mut st = self.state.lock();
        let named: HashSet<(u64, u64)> = st
            .slots
            .iter()
            .filter_map(|s| s.stored.map(|r| (r.seq, r.epoch)))
            .collect();
        let mut keep = Vec::new();
        for d in std::mem::take(&mut st.deferred) {
            let id = match ObjName::parse(&d.name) {
                Ok(ObjName::Segment { seq, epoch }) => (seq, epoch),
                _ => (0, 0),
            };
            if d.after <= oldest_kept && !ck.protects(id.0, id.1) && !named.contains(&id) {
                st.jobs.push_back(Job::Delete {
                    name: d.name,
                    bytes: d.bytes,
                });
            } else {
                keep.push(d);
            }
        }
        st.deferred = keep;
        self.work.notify_all();
    }
}

/// At attach: the newest `KEEP` checkpoint objects that decode (their refs
/// protect objects from deletion); older ones are queued for deletion
/// (damaged ones are left for `recover` to name). Returns the state and
/// the name number the next capture takes.
pub(super) fn load_stored(
    objects: &dyn crate::media::objects::ObjectStore,
    uuid: &[u8; 16],
    jobs: &mut VecDeque<Job>,
    rep: &mut super::AttachReport,
) -> std::io::Result<(CkptState, u64)> {
    let listed = objects.list(crate::format::objname::ObjKind::Checkpoint.dir())?;
    let mut names: Vec<(u64, String)> = Vec::new();
    for o in &listed {
        match ObjName::parse(&o.name) {
            Ok(ObjName::Checkpoint { seq, .. }) => names.push((seq, o.name.clone())),
            _ => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!(
                        "{}: {} is not a checkpoint object name: something else writes under ckpt/",
                        objects.describe(),
                        o.name
                    ),
                ))
            }
        }
    }
    names.sort();
    let next = names.last().map_or(1, |(s, _)| s + 1);
    let mut st = CkptState::default();
    let mut kept = 0;
    for (seq, name) in names.iter().rev() {
        if kept == KEEP {
            jobs.push_back(Job::Delete {
                name: name.clone(),
                bytes: 0,
            });
            continue;
        }
        match objects
            .get(name)
            .map_err(|e| e.to_string())
            .and_then(|b| ObjCheckpoint::decode(&b).map_err(|e| e.to_string()))
        {
            Ok(c) if &c.uuid == uuid => {
                st.stored.push_front(StoredCkpt {
                    seq: *seq,
                    name: name.clone(),
                    refs: refs_of(&c),
                    epoch: ObjName::parse(name).map_or(0, |n| n.epoch()),
                    log_start: c.log_start,
                });
                kept += 1;
            }
            Ok(_) => rep
                .notes
                .push(format!("{name} belongs to another volume: ignored")),
            Err(e) => rep.notes.push(format!("{name} is unusable ({e}): ignored")),
        }
    }
    Ok((st, next))
}
