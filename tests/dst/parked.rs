//! Parked FLUSHes under power cuts (`dst_parked_flushes`, issue 18, §4.9 of
//! docs/intent-log.md). Client threads FLUSH through `Volume::flush_then`,
//! the NBD server's path: a FLUSH that finds a media flush running writes
//! its chunk or record, parks its answer and returns, and whichever thread
//! ends the flush that covers it (another client's FLUSH, a FUA write, the
//! housekeeper, the `sluice-flusher` thread) runs its `done`. The threads
//! that ship run (writers, housekeeper, flusher); the record run's SimMedia
//! holds every flush a little after it took effect (`SimMedia::hold_flushes`)
//! so that FLUSHes come while one runs, and a record written during the hold
//! stays in the volatile cache for the next flush.
//!
//! The run is recorded with a marker for every request's start, every
//! write's acknowledgment and every FLUSH's `done` (Ok), in the one order of
//! the media's operations. Power is then cut before chosen media operations
//! of the record (prefix replay, as `run_seed`: each device's flushed writes
//! durable, any subset of the cached ones kept, each torn at any sectors; a
//! quarter of the cuts also cut the recovery mount): right after each parked
//! FLUSH's answer (the point where an answer given too early shows), and at
//! a stride over the whole run. At a cut, a FLUSH counts as answered only
//! if its `done` ran before the cut; the oracle then requires every write
//! acknowledged before an answered FLUSH began, and every FUA write
//! acknowledged before the cut, and checks that nothing else reads back but
//! values the clients wrote, each client's writes surviving as a prefix.
//!
//! Threaded runs are seeded but not exactly reproducible (the threads
//! interleave as the machine runs them); a failure names the seed, the cut
//! and the loss, and the kinds of answers the run saw.

use super::*;
use std::sync::mpsc;

/// How a FLUSH's `done` was run.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Answered {
    /// Inside its own `flush_then` call, before it returned (not parked).
    InCall,
    /// Parked; answered by the `sluice-flusher` thread.
    Flusher,
    /// Parked in the fill's open group; answered by the `sluice-fill`
    /// thread leading it.
    Fill,
    /// Parked; answered by its own client thread during a later request.
    OwnLater,
    /// Parked; answered by another thread ending a media flush (another
    /// client's FLUSH or FUA write, or the housekeeper).
    Other,
}

thread_local! {
    /// The FLUSH (client, index) whose `flush_then` call this thread is in.
    static IN_FLUSH_THEN: std::cell::Cell<Option<(usize, usize)>> =
        const { std::cell::Cell::new(None) };
}

/// Record markers: a request began; a write was acknowledged; a FLUSH's
/// `done` ran with Ok.
const BEGIN: u64 = 0;
const ACKED: u64 = 1;
const ANSWERED: u64 = 2;

fn tag(client: usize, idx: usize, what: u64) -> u64 {
    ((client as u64) << 40) | ((idx as u64) << 2) | what
}

/// One client request as the run saw it.
struct Req {
    info: OpInfo,
    idx: usize,
    how: Option<Answered>,
    /// Refused for want of space (`Error::NoSpace`: never acknowledged).
    full: bool,
}

/// What a FLUSH's `done` sends its client: its index, Ok or the error
/// (`Error::NoSpace` or another), how it was run.
type Answer = (usize, Result<(), (bool, String)>, Answered);

/// Totals over the runs of `dst_parked_flushes`.
#[derive(Default)]
pub(crate) struct ParkedTally {
    pub t: Tally,
    pub runs: u64,
    pub flushes: u64,
    pub in_call: u64,
    pub by_flusher: u64,
    pub by_own_later: u64,
    pub by_other: u64,
    /// Parked in the fill's open group and answered by `sluice-fill`.
    pub by_fill: u64,
    /// `flushes_parked` of the record runs' volumes.
    pub parked_counter: u64,
    /// Of those, parked only after a wait of their own in the group commit
    /// (`flushes_parked_late`: a flush began while they waited).
    pub parked_late: u64,
    /// Crash points right after a parked FLUSH's answer.
    pub answer_points: u64,
    /// Requests refused with `Error::NoSpace` (the client stopped there, as
    /// in `threaded_run`: several clients' open chunks on a 64-block volume).
    pub no_space: u64,
}

/// The prefix of a record run's media operations as power is cut before op
/// `c`: each device's writes before its last flush are in `durable`, the
/// rest of `ops[..c]` is its cache (`run_seed` does the same inline).
struct Prefix<'a> {
    ops: &'a [SimEvent],
    bases: Vec<u64>,
    durable: Vec<u8>,
    flushed_upto: Vec<usize>,
    last_flush_of: Vec<usize>,
    at: usize,
}

impl<'a> Prefix<'a> {
    fn new(ops: &'a [SimEvent], bases: Vec<u64>, base: Vec<u8>) -> Self {
        let n = bases.len();
        Prefix {
            ops,
            bases,
            durable: base,
            flushed_upto: vec![0; n],
            last_flush_of: vec![0; n],
            at: 0,
        }
    }
    /// Move to the cut before op `c` (never backwards).
    fn advance(&mut self, c: usize) {
        assert!(c >= self.at, "cuts in order");
        while self.at < c {
            self.at += 1;
            match self.ops[self.at - 1] {
                SimEvent::Flush => self.last_flush_of.iter_mut().for_each(|l| *l = self.at),
                SimEvent::FlushPart { base, .. } => {
                    self.last_flush_of[part_of(&self.bases, base)] = self.at
                }
                _ => {}
            }
        }
        for d in 0..self.bases.len() {
            while self.flushed_upto[d] < self.last_flush_of[d] {
                if let SimEvent::Write { offset, data } = &self.ops[self.flushed_upto[d]] {
                    if part_of(&self.bases, *offset) == d {
                        self.durable[*offset as usize..*offset as usize + data.len()]
                            .copy_from_slice(data);
                    }
                }
                self.flushed_upto[d] += 1;
            }
        }
    }
    /// The writes in the devices' caches at the cut, in completion order.
    fn cached(&self) -> Vec<(u64, &'a [u8])> {
        let from = *self.last_flush_of.iter().min().expect("a device");
        self.ops[from..self.at]
            .iter()
            .enumerate()
            .filter_map(|(j, e)| match e {
                SimEvent::Write { offset, data }
                    if from + j >= self.last_flush_of[part_of(&self.bases, *offset)] =>
                {
                    Some((*offset, data.as_slice()))
                }
                _ => None,
            })
            .collect()
    }
}

/// One client: writes (some FUA) and FLUSHes through `flush_then`, waiting
/// for half of its FLUSHes' answers (fsync) and going on past the others
/// (a pipelining NBD client); at the end it waits for every answer.
fn client(
    vol: &Volume,
    media: &Arc<SimMedia>,
    sh: Shape,
    c: usize,
    (lo, hi): (u64, u64),
    cseed: u64,
    stop: &AtomicBool,
) -> Result<Vec<Req>, String> {
    let mut rng = SmallRng::seed_from_u64(cseed);
    let mut r = Reference::new(sh.blocks);
    let mut reqs: Vec<Req> = Vec::new();
    let (tx, rx) = mpsc::channel::<Answer>();
    let mut outstanding = 0usize;
    let me = std::thread::current().id();
    // a request refused for want of space stops the client
    let mut full = false;
    // Ok(true): this FLUSH was refused for want of space
    let take = |reqs: &mut Vec<Req>, (idx, res, how): Answer| {
        reqs[idx].how = Some(how);
        match res {
            Ok(()) => Ok(false),
            Err((true, _)) => {
                reqs[idx].full = true;
                Ok(true)
            }
            Err((false, e)) => Err(format!(
                "client {c} FLUSH {idx} answered with an error: {e}"
            )),
        }
    };
    while !stop.load(Ordering::Relaxed) && !full {
        let idx = reqs.len();
        media.mark(tag(c, idx, BEGIN));
        if rng.gen_ratio(1, 4) {
            let (m, tx) = (media.clone(), tx.clone());
            IN_FLUSH_THEN.with(|f| f.set(Some((c, idx))));
            vol.flush_then(Box::new(move |res| {
                if res.is_ok() {
                    m.mark(tag(c, idx, ANSWERED));
                }
                let t = std::thread::current();
                let how = if t.id() == me {
                    match IN_FLUSH_THEN.with(|f| f.get()) == Some((c, idx)) {
                        true => Answered::InCall,
                        false => Answered::OwnLater,
                    }
                } else if t.name() == Some("sluice-flusher") {
                    Answered::Flusher
                } else if t.name() == Some("sluice-fill") {
                    Answered::Fill
                } else {
                    Answered::Other
                };
                let res = res.map_err(|e| (matches!(e, sluice::Error::NoSpace), e.to_string()));
                let _ = tx.send((idx, res, how));
            }));
            IN_FLUSH_THEN.with(|f| f.set(None));
            reqs.push(Req {
                info: OpInfo {
                    client: c,
                    kind: Kind::Flush,
                    fua: false,
                    blocks: Vec::new(),
                },
                idx,
                how: None,
                full: false,
            });
            outstanding += 1;
            if rng.gen_bool(0.5) {
                while reqs[idx].how.is_none() {
                    let a = rx
                        .recv_timeout(std::time::Duration::from_secs(60))
                        .map_err(|_| format!("client {c} FLUSH {idx} never answered"))?;
                    full |= take(&mut reqs, a)?;
                    outstanding -= 1;
                }
            }
        } else {
            let random = random_phase(idx / 2);
            let op = for_shape(random_io(&mut rng, lo, hi), sh, random);
            let fua = rng.gen_ratio(1, 12);
            // (refused for want of space: not acknowledged, its values
            // still candidates; the client stops, as in `threaded_run`)
            let no_space = match common::issue(vol, &op, fua) {
                Ok(()) => false,
                Err(sluice::Error::NoSpace) => {
                    if std::env::var_os("SLUICE_DST_DUMP_NOSPACE").is_some() {
                        eprintln!(
                            "client {c} request {idx} ({op:?}): NoSpace\n{}",
                            vol.debug_segments()
                        );
                    }
                    true
                }
                Err(e) => return Err(format!("client {c} request {idx} ({op:?}) failed: {e}")),
            };
            if !no_space {
                media.mark(tag(c, idx, ACKED));
            }
            reqs.push(Req {
                info: OpInfo {
                    client: c,
                    kind: Kind::Write,
                    fua,
                    blocks: Oracle::op_blocks(&mut r, &op),
                },
                idx,
                how: None,
                full: no_space,
            });
            full |= no_space;
        }
        while let Ok(a) = rx.try_recv() {
            full |= take(&mut reqs, a)?;
            outstanding -= 1;
        }
    }
    while outstanding > 0 {
        let a = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .map_err(|_| format!("client {c}: {outstanding} parked FLUSHes never answered"))?;
        take(&mut reqs, a)?;
        outstanding -= 1;
    }
    Ok(reqs)
}

/// One threaded run of `seed` (non-stripe shapes: `shape_for`), then
/// `points` crash points of its record (about: the answers of parked
/// FLUSHes first, up to half, then a stride).
pub(crate) fn parked_run(seed: u64, points: u64, pt: &mut ParkedTally) -> Result<(), String> {
    let sh = shape_for(seed);
    assert_eq!(sh.members, 0, "not a stripe seed");
    let mut rng = SmallRng::seed_from_u64(seed ^ 0x9a4c_ed00);
    let clients = rng.gen_range(2..=4usize);
    let media = Arc::new(SimMedia::new(media_bytes(sh)));
    // even seeds with the fill (a FLUSH coming while a group is in flight
    // parks in the next group, answered by its leader or `sluice-fill`),
    // odd ones without (it writes its record and parks in the commit stage)
    let mut oo = open_opts(sh, true);
    oo.flush_fill = seed.is_multiple_of(2);
    let vol = create_vol(&media, sh, gc_for(seed), oo).map_err(|e| format!("create: {e}"))?;
    let base = media.current_image();
    media.hold_flushes(rng.gen_range(30..400));
    media.record();
    let stop = AtomicBool::new(false);
    let per = sh.blocks / clients as u64;
    let cseeds: Vec<u64> = (0..clients).map(|_| rng.gen()).collect();
    let ms = rng.gen_range(5..40);
    let logs: Vec<Result<Vec<Req>, String>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..clients)
            .map(|c| {
                let (vol, media, stop) = (&vol, &media, &stop);
                let range = (c as u64 * per, (c as u64 + 1) * per);
                let cseed = cseeds[c];
                s.spawn(move || client(vol, media, sh, c, range, cseed, stop))
            })
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(ms));
        stop.store(true, Ordering::Relaxed);
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let parked_counter = vol.stats().flushes_parked;
    let parked_late = vol.stats().flushes_parked_late;
    drop(vol);
    media.hold_flushes(0);
    let logs = logs
        .into_iter()
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("parked seed {seed}: {e}"))?;

    // where each marker fell: (index in the record, media ops before it)
    let mut at: std::collections::HashMap<u64, (usize, u64)> = Default::default();
    let mut media_ops = Vec::new();
    for (i, e) in media.take_events().into_iter().enumerate() {
        match e {
            SimEvent::Mark(m) => {
                at.insert(m, (i, media_ops.len() as u64));
            }
            e => media_ops.push(e),
        }
    }
    let total = media_ops.len() as u64;
    // flatten client-major (per block the owning client's order)
    let mut ops = Vec::new();
    // per op: a write's acknowledgment (record index, media ops before it)
    let mut acked: Vec<(usize, u64)> = Vec::new();
    // per answered FLUSH: (media ops before its answer, its begin's record
    // index, parked)
    let mut answers: Vec<(u64, usize, bool)> = Vec::new();
    let (mut n_in_call, mut n_flusher, mut n_own, mut n_other) = (0u64, 0u64, 0u64, 0u64);
    let mut n_fill = 0u64;
    for (c, reqs) in logs.into_iter().enumerate() {
        for q in reqs {
            let mark = |w| at.get(&tag(c, q.idx, w)).copied();
            pt.no_space += q.full as u64;
            match q.info.kind {
                Kind::Flush => {
                    let how = q.how.expect("every FLUSH answered");
                    match how {
                        Answered::InCall => n_in_call += 1,
                        Answered::Flusher => n_flusher += 1,
                        Answered::OwnLater => n_own += 1,
                        Answered::Other => n_other += 1,
                        Answered::Fill => n_fill += 1,
                    }
                    acked.push((usize::MAX, u64::MAX));
                    ops.push(q.info);
                    if q.full {
                        // answered with NoSpace: never acknowledged
                        continue;
                    }
                    let (ans, begin) = (mark(ANSWERED), mark(BEGIN));
                    let (Some(ans), Some(begin)) = (ans, begin) else {
                        return Err(format!(
                            "parked seed {seed}: client {c} FLUSH {} answered Ok without its markers",
                            q.idx
                        ));
                    };
                    answers.push((ans.1, begin.0, how != Answered::InCall));
                }
                _ => {
                    let a = match (q.full, mark(ACKED)) {
                        // refused for want of space: never acknowledged
                        (true, _) => (usize::MAX, u64::MAX),
                        (false, Some(a)) => a,
                        (false, None) => {
                            return Err(format!(
                                "parked seed {seed}: client {c} write {} acknowledged without its marker",
                                q.idx
                            ))
                        }
                    };
                    acked.push(a);
                    ops.push(q.info);
                }
            }
        }
    }
    let parked = n_flusher + n_own + n_other + n_fill;
    if parked != parked_counter {
        return Err(format!(
            "parked seed {seed}: the volume counted {parked_counter} parked FLUSHes, the clients saw {parked} answered off their call"
        ));
    }
    pt.runs += 1;
    pt.flushes += n_in_call + parked;
    pt.in_call += n_in_call;
    pt.by_flusher += n_flusher;
    pt.by_own_later += n_own;
    pt.by_other += n_other;
    pt.by_fill += n_fill;
    pt.parked_counter += parked_counter;
    pt.parked_late += parked_late;
    let o = Oracle::new(sh.blocks, ops, clients);

    // the crash points: after parked FLUSHes' answers, then a stride
    let mut risky: Vec<u64> = answers.iter().filter(|a| a.2).map(|a| a.0).collect();
    risky.sort_unstable();
    risky.dedup();
    let half = (points / 2).max(1) as usize;
    while risky.len() > half {
        risky.swap_remove(rng.gen_range(0..risky.len()));
    }
    let rest = points.saturating_sub(risky.len() as u64).max(1);
    let stride = (total / rest).max(1);
    let phase = rng.gen_range(0..stride);
    let mut cuts: Vec<(u64, bool)> = risky.iter().map(|&c| (c, true)).collect();
    cuts.extend((phase..=total).step_by(stride as usize).map(|c| (c, false)));
    cuts.sort_unstable();
    cuts.dedup_by_key(|c| c.0);
    answers.sort_unstable();

    let mut prefix = Prefix::new(&media_ops, part_bases(sh), base);
    let mut next_answer = 0usize;
    let mut latest_begin: Option<usize> = None;
    let n = o.ops.len();
    for (cut, after_answer) in cuts {
        prefix.advance(cut as usize);
        while next_answer < answers.len() && answers[next_answer].0 <= cut {
            let b = answers[next_answer].1;
            latest_begin = Some(latest_begin.map_or(b, |l: usize| l.max(b)));
            next_answer += 1;
        }
        let required = |i: usize| {
            o.ops[i].kind == Kind::Write
                && (latest_begin.is_some_and(|b| acked[i].0 < b)
                    || (o.ops[i].fua && acked[i].1 <= cut))
        };
        let cached = prefix.cached();
        let variants: &[Loss] = if cached.is_empty() {
            &[Loss::KeepAll]
        } else if after_answer {
            &[Loss::DropAll, Loss::Subset]
        } else if cut % 2 == 0 {
            &[Loss::Subset, Loss::KeepAll]
        } else {
            &[Loss::Subset, Loss::DropAll]
        };
        for &loss in variants {
            let mut img = prefix.durable.clone();
            crash_apply_opts(
                &mut img,
                cached.iter().copied(),
                loss,
                rng.gen(),
                torn_wipes(),
            );
            let mount_cut = rng.gen_ratio(1, 4);
            check_image(img, sh, &o, n, &required, &mut rng, mount_cut, &mut pt.t, &[]).map_err(
                |e| {
                    format!(
                        "parked seed {seed} cut before media op {cut} of {total}{}, loss {loss:?} ({clients} clients; FLUSHes answered: {n_in_call} in their call, {n_flusher} by the flusher, {n_other} by another thread's flush, {n_own} by their own thread later): {e}",
                        if after_answer { " (right after a parked FLUSH's answer)" } else { "" }
                    )
                },
            )?;
            if after_answer {
                pt.answer_points += 1;
            }
        }
    }
    Ok(())
}
