//! Crash sweep: a workload with GC and checkpoints active runs on fault-injecting
//! media, and power is cut before every media write index N in turn. Unflushed
//! writes are then kept or dropped at random and the last one is torn at a 512-byte
//! boundary. After remount the volume must equal the state after some prefix of the
//! accepted writes that includes everything acknowledged before the last completed
//! FLUSH (or with FUA), and `sluice check` must find it consistent.
//!
//! Two sweeps: the default GC policy, and sepbit-cb, whose three GC output classes
//! exercise the ordering rule of src/volume/core.rs (a user record superseding a
//! block held by any open GC chunk seals that chunk first) across open chunks.
//! Debug knobs: SLUICE_TEST_CUT=N runs only that cut.

mod common;

use common::*;
use rand::{rngs::SmallRng, Rng, SeedableRng};
use sluice::media::{CrashPolicy, FaultMedia, Media, MemMedia};
use sluice::{GcPolicy, Volume};
use std::sync::Arc;

const BLOCKS: u64 = 256;

fn workload(seed: u64, n: usize) -> Vec<(Op, bool)> {
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..n)
        .map(|_| (random_op(&mut rng, BLOCKS), rng.gen_bool(0.03)))
        .collect()
}

/// Run the workload with power cut before media write `cut` (counted after create).
/// Returns the media, the reference, and whether the cut was reached.
fn run(
    ops: &[(Op, bool)],
    cut: Option<u64>,
    gc: GcPolicy,
) -> (Arc<FaultMedia>, Reference, u64, sluice::Stats) {
    let (mut create, media_bytes) = small_create(BLOCKS, 0.10);
    create.gc_policy = gc;
    let opts = det_open(96 << 10);
    let media = Arc::new(FaultMedia::new(media_bytes));
    let vol = Volume::create(media.clone() as Arc<dyn Media>, &create, &opts).unwrap();
    let base = media.writes_issued();
    if let Some(c) = cut {
        media.cut_power_after_writes(base + c);
    }
    let mut r = Reference::new(BLOCKS);
    for (op, fua) in ops {
        match issue(&vol, op, *fua) {
            Ok(()) => {
                r.apply(op);
                if *fua {
                    r.flushed();
                }
            }
            Err(_) => {
                // Not acknowledged, but some of its blocks may have reached the
                // media. A failed flush or FUA promises nothing.
                if !matches!(op, Op::Flush) {
                    r.apply(op);
                }
                break;
            }
        }
    }
    let stats = vol.stats();
    drop(vol);
    let writes = media.writes_issued() - base;
    (media, r, writes, stats)
}

fn sweep(seed: u64, ops: usize, policies: &[(f64, bool)], gc: GcPolicy) -> (u64, u64) {
    let w = workload(seed, ops);
    let (_, _, total_writes, stats) = run(&w, None, gc);
    assert!(
        stats.gc_runs > 0,
        "the workload must make GC run (stats: {stats:?})"
    );
    assert!(stats.checkpoints > 0, "the workload must write checkpoints");
    let mut points = 0;
    let only: Option<u64> = std::env::var("SLUICE_TEST_CUT")
        .ok()
        .and_then(|c| c.parse().ok());
    for cut in 0..total_writes {
        if only.is_some_and(|o| o != cut) {
            continue;
        }
        let (media, r, _, _) = run(&w, Some(cut), gc);
        assert!(media.is_power_cut(), "cut {cut} was not reached");
        for (pi, &(drop_probability, tear)) in policies.iter().enumerate() {
            let image = media.crash_image(CrashPolicy {
                drop_probability,
                tear_last: tear,
                seed: seed ^ cut ^ (pi as u64) << 40,
            });
            let m2: Arc<dyn Media> = Arc::new(MemMedia::from_image(image));
            let vol = Volume::open(m2.clone(), &det_open(96 << 10))
                .unwrap_or_else(|e| panic!("seed {seed} cut {cut} policy {pi}: mount failed: {e}"));
            let actual = read_all(&vol);
            if let Err(e) = r.matching_prefix(&actual) {
                panic!("seed {seed} cut {cut} policy {pi}: {e}");
            }
            // Every recovered volume is internally consistent: each live block lies
            // in a chunk that verifies (a reused segment's data would not).
            let rep = sluice::check::check(&*m2);
            assert!(
                rep.is_clean(),
                "seed {seed} cut {cut} policy {pi}: check after mount: {:?}",
                rep.damage
            );
            if cut % 97 == 0 {
                // the recovered volume keeps working and stays consistent
                vol.write(4096, &[0x5a; 8192], true).unwrap();
                vol.close().unwrap();
                let rep = sluice::check::check(&*m2);
                assert!(
                    rep.is_clean(),
                    "seed {seed} cut {cut}: check after recovery: {:?}",
                    rep.damage
                );
            }
            points += 1;
        }
    }
    (total_writes, points)
}

#[test]
fn crash_after_any_write_keeps_a_flushed_prefix() {
    let policies = [(0.0, true), (0.35, true), (1.0, false)];
    let seeds = [11u64, 12, 13];
    let results: Vec<(u64, u64)> = std::thread::scope(|s| {
        let hs: Vec<_> = seeds
            .iter()
            .map(|&seed| s.spawn(move || sweep(seed, 1500, &policies, GcPolicy::Greedy)))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let writes: u64 = results.iter().map(|r| r.0).sum();
    let points: u64 = results.iter().map(|r| r.1).sum();
    println!("crash sweep: {writes} distinct write indices, {points} crash images checked (policies: keep+tear, drop 35%+tear, drop all)");
    assert!(
        writes >= 1000,
        "want thousands of crash points, got {writes} write indices"
    );
}

#[test]
fn crash_with_gc_output_classes_keeps_a_flushed_prefix() {
    let policies = [(0.35, true), (1.0, false)];
    let (writes, points) = sweep(21, 1200, &policies, GcPolicy::SepbitCb);
    println!("sepbit-cb crash sweep: {writes} write indices, {points} crash images checked");
    assert!(writes >= 300, "want hundreds of crash points, got {writes}");
}
