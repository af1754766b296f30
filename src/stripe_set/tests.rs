//! Unit tests of the stripe set's rows, parity and degraded reads, on
//! memory members.

use super::open::{plan, PlanOptions, Planned};
use super::store::StripeStore;
use super::*;
use crate::media::MemMedia;
use crate::store::SegmentStore;
use rand::{Rng, SeedableRng};

const UNIT: u64 = 16 << 10;

fn members(n: usize, bytes: u64) -> Vec<(String, Arc<dyn Media>)> {
    (0..n)
        .map(|i| {
            (
                format!("m{i}"),
                Arc::new(MemMedia::new(bytes)) as Arc<dyn Media>,
            )
        })
        .collect()
}

fn planned(n: usize, parity: u32) -> Planned {
    plan_on(members(n, 8 << 20), parity, *b"unit-test-set-01")
}

/// `plan` with the unit tests' options (`UNIT` units, 256 KiB segments, no
/// ring), formatting mode off.
fn plan_on(devs: Vec<(String, Arc<dyn Media>)>, parity: u32, uuid: [u8; 16]) -> Planned {
    let p = plan(
        devs,
        &PlanOptions {
            parity,
            unit: UNIT,
            segment_bytes: 256 << 10,
            logical_bytes: None,
            overprovision: 0.1,
            log_bytes: 0,
            set_uuid: Some(uuid),
        },
    )
    .unwrap();
    p.set.set_formatting(false);
    p
}

/// The same members with the slots in `lost` missing.
fn without(set: &StripeSet, lost: &[u32]) -> StripeSet {
    let members = set
        .members()
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let media = (!lost.contains(&(i as u32))).then(|| m.media.clone().unwrap());
            Member::new(m.name.clone(), media, m.ident)
        })
        .collect();
    let s = StripeSet::new(set.layout, set.shape, members).unwrap();
    s.load_scratch().unwrap();
    s
}

/// Every way to lose up to `p` of `n` members (the empty loss included).
fn losses(n: u32, p: u32) -> Vec<Vec<u32>> {
    let mut out = vec![vec![]];
    for a in 0..n {
        if p >= 1 {
            out.push(vec![a]);
        }
        for b in a + 1..n {
            if p >= 2 {
                out.push(vec![a, b]);
            }
        }
    }
    out
}

/// Append random-sized writes to a few segments (some left with a partial
/// last row), flush, and return what each written block holds.
fn fill(store: &StripeStore, set: &StripeSet, seed: u64) -> Vec<(u64, Vec<u8>)> {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let sb = store.segment_blocks();
    let mut written = Vec::new();
    for seg in 0..3u32.min(store.segment_count()) {
        let stop = rng.gen_range(1..=sb);
        let mut b = 0;
        while b < stop {
            let k = rng.gen_range(1..=40).min(stop - b);
            let mut buf = vec![0u8; k as usize * BLOCK_BYTES];
            rng.fill(&mut buf[..]);
            store.write(seg, b, &buf).unwrap();
            for i in 0..k {
                let s = i as usize * BLOCK_BYTES;
                written.push((store.phys(seg, b + i), buf[s..s + BLOCK_BYTES].to_vec()));
            }
            b += k;
            if rng.gen_bool(0.3) {
                set.flush().unwrap();
            }
        }
    }
    set.flush().unwrap();
    written
}

fn check_all(set: &StripeSet, written: &[(u64, Vec<u8>)], what: &str) {
    for (p, want) in written {
        let mut got = vec![0u8; BLOCK_BYTES];
        set.read_area(p * BS, &mut got).unwrap();
        assert!(got == *want, "{what}: block {p} reads back wrong");
    }
}

#[test]
fn every_flushed_block_is_rebuilt_with_any_members_lost() {
    for (n, p) in [(5usize, 1u32), (6, 2), (3, 0), (3, 1)] {
        for seed in 0..4 {
            let pl = planned(n, p);
            let store = StripeStore::new(pl.set.clone());
            let written = fill(&store, &pl.set, seed);
            check_all(&pl.set, &written, "healthy");
            for lost in losses(n as u32, p) {
                let deg = without(&pl.set, &lost);
                check_all(
                    &deg,
                    &written,
                    &format!("{n}+{p} seed {seed} lost {lost:?}"),
                );
                if !lost.is_empty() {
                    assert!(deg.status().reconstructed > 0, "{lost:?}");
                    assert!(deg.status().degraded());
                }
            }
        }
    }
}

#[test]
fn a_write_only_workload_reads_no_member() {
    for (n, p) in [(5usize, 1u32), (6, 2), (4, 0)] {
        let pl = planned(n, p);
        let store = StripeStore::new(pl.set.clone());
        fill(&store, &pl.set, 7);
        let st = pl.set.status();
        assert!(st.member_writes > 0);
        assert_eq!(st.member_reads, 0, "{n}+{p}");
        assert_eq!(st.rows_loaded, 0);
    }
}

#[test]
fn writes_go_on_degraded_and_read_back_from_the_survivors() {
    let pl = planned(5, 1);
    let deg = Arc::new(without(&pl.set, &[2]));
    let store = StripeStore::new(deg.clone());
    let written = fill(&store, &deg, 3);
    check_all(&deg, &written, "degraded writes");
    assert_eq!(deg.status().describe(), "degraded (member 2 missing: m2)");
}

#[test]
fn an_evicted_row_is_read_back_before_it_takes_more_data() {
    let pl = planned(5, 1);
    let store = StripeStore::new(pl.set.clone());
    let sb = store.segment_blocks();
    // one partial row in each of many segments: more states than are kept
    let segs = (rows::KEEP_ROWS as u32 + 8).min(store.segment_count());
    assert!(segs as usize > rows::KEEP_ROWS, "enough segments");
    let mut want = Vec::new();
    for seg in 0..segs {
        let b = vec![seg as u8 + 1; BLOCK_BYTES];
        store.write(seg, 0, &b).unwrap();
        want.push((store.phys(seg, 0), b));
    }
    pl.set.flush().unwrap();
    // the rest of each first row, then the rest of the segment
    for seg in 0..segs {
        let b = vec![seg as u8 + 101; (sb as usize - 1) * BLOCK_BYTES];
        store.write(seg, 1, &b).unwrap();
        for i in 1..sb {
            want.push((store.phys(seg, i), vec![seg as u8 + 101; BLOCK_BYTES]));
        }
    }
    pl.set.flush().unwrap();
    assert!(pl.set.status().rows_loaded > 0);
    for lost in losses(5, 1) {
        check_all(&without(&pl.set, &lost), &want, &format!("lost {lost:?}"));
    }
}

#[test]
fn too_many_lost_members_are_refused_by_name() {
    let pl = planned(5, 1);
    let members = pl
        .set
        .members()
        .iter()
        .enumerate()
        .map(|(i, m)| {
            Member::new(
                m.name.clone(),
                (i > 1).then(|| m.media.clone().unwrap()),
                m.ident,
            )
        })
        .collect();
    let e = StripeSet::new(pl.set.layout, pl.set.shape, members).unwrap_err();
    assert!(e.to_string().contains("member 0 missing: m0"), "{e}");
    assert!(e.to_string().contains("member 1 missing: m1"), "{e}");
}

#[test]
fn locate_names_one_piece_per_unit_on_the_member_holding_it() {
    let pl = planned(5, 1);
    let store = StripeStore::new(pl.set.clone());
    let mut pieces = Vec::new();
    // 6 blocks from block 2 of segment 1: unit 0 (blocks 2..4) and unit 1 (0..2)
    store.locate(store.phys(1, 2), 6, &mut |p| pieces.push(p));
    let l = pl.set.layout;
    let row = l.rows_per_segment;
    assert_eq!(pieces.len(), 2);
    assert_eq!(pieces[0].member, l.data_member(row, 0));
    assert_eq!(pieces[0].offset, l.row_offset(row).unwrap() + 2 * BS);
    assert_eq!((pieces[0].len, pieces[0].at), (2 * BLOCK_BYTES as u32, 0));
    assert_eq!(pieces[1].member, l.data_member(row, 1));
    assert_eq!(pieces[1].offset, l.row_offset(row).unwrap());
    assert_eq!(store.write_unit(), 4 * UNIT);
}

#[test]
fn a_member_that_failed_a_write_is_not_read_again() {
    use crate::media::FaultMedia;
    let mut devs = members(5, 8 << 20);
    let bad = Arc::new(FaultMedia::new(8 << 20));
    devs[2].1 = bad.clone();
    let pl = plan_on(devs, 1, *b"unit-test-set-02");
    let store = StripeStore::new(pl.set.clone());
    // the member's next write fails: it is out of use from then on, and the
    // writes it misses must never be read from it
    bad.fail_write(bad.writes_issued() + 3);
    let written = fill(&store, &pl.set, 11);
    let st = pl.set.status();
    assert_eq!(st.down.len(), 1, "{}", st.describe());
    assert!(
        st.describe().contains("member 2 failed"),
        "{}",
        st.describe()
    );
    check_all(&pl.set, &written, "after a member failed");
    assert!(pl.set.status().reconstructed > 0);
}

#[test]
fn a_scratch_tag_never_names_data_that_is_not_durable() {
    use crate::media::{Loss, SimMedia};
    let sims: Vec<Arc<SimMedia>> = (0..5).map(|_| Arc::new(SimMedia::new(8 << 20))).collect();
    let devs = sims
        .iter()
        .enumerate()
        .map(|(i, m)| (format!("s{i}"), m.clone() as Arc<dyn Media>))
        .collect();
    let pl = plan_on(devs, 1, *b"unit-test-set-03");
    let set = &pl.set;
    let store = StripeStore::new(set.clone());
    // A: 6 blocks of row 0 (units 0 and 1), flushed
    let a: Vec<u8> = (0..6 * BLOCK_BYTES).map(|i| (i / 7) as u8).collect();
    store.write(0, 0, &a).unwrap();
    set.flush().unwrap();
    // B: 4 more blocks (units 1 and 2, sharing columns with A), then a
    // FLUSH during which the power fails on the data members before they
    // flush; the P member (4 for row 0) keeps whatever it was sent
    store.write(0, 6, &vec![0xeeu8; 4 * BLOCK_BYTES]).unwrap();
    let p = set.layout.parity_member(0, 0).unwrap() as usize;
    for (i, m) in sims.iter().enumerate() {
        if i != p {
            m.cut_at_op(m.ops());
        }
    }
    assert!(set.flush().is_err());
    let images: Vec<Arc<dyn Media>> = sims
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let loss = if i == p { Loss::KeepAll } else { Loss::DropAll };
            Arc::new(SimMedia::from_image(m.crash_image(loss, 1))) as Arc<dyn Media>
        })
        .collect();
    // lose the member of data unit 0: A's first blocks are rebuilt
    let lost = set.layout.data_member(0, 0) as usize;
    let members = set
        .members()
        .iter()
        .enumerate()
        .map(|(i, m)| {
            Member::new(
                m.name.clone(),
                (i != lost).then(|| images[i].clone()),
                m.ident,
            )
        })
        .collect();
    let deg = StripeSet::new(set.layout, set.shape, members).unwrap();
    deg.load_scratch().unwrap();
    let mut got = vec![0u8; 6 * BLOCK_BYTES];
    deg.read_area(0, &mut got).unwrap();
    assert!(
        got == a,
        "a flushed block of the partial row is rebuilt wrong"
    );
}

#[test]
fn tombstones_take_no_scratch_lane_and_rebuild_degraded() {
    let pl = planned(5, 1);
    let store = StripeStore::new(pl.set.clone());
    let n = (scratch::LANES + 4).min(store.segment_count() - 1);
    let tomb = vec![0x7bu8; BLOCK_BYTES];
    for seg in 0..n {
        store.wipe(seg, &tomb).unwrap();
    }
    pl.set.flush().unwrap();
    // a user row after them still gets a lane
    store.write(n, 0, &vec![3u8; 5 * BLOCK_BYTES]).unwrap();
    pl.set.flush().unwrap();
    assert_eq!(pl.set.status().unprotected_flushes, 0);
    let mut want: Vec<(u64, Vec<u8>)> = (0..n).map(|s| (store.phys(s, 0), tomb.clone())).collect();
    want.extend((0..5).map(|b| (store.phys(n, b), vec![3u8; BLOCK_BYTES])));
    for lost in losses(5, 1) {
        check_all(&without(&pl.set, &lost), &want, &format!("lost {lost:?}"));
    }
}

/// A 3-member RAID-5 set on SimMedia members (each its own cache).
fn sim_set(uuid: &[u8; 16]) -> (Vec<Arc<crate::media::SimMedia>>, Planned) {
    use crate::media::SimMedia;
    let sims: Vec<Arc<SimMedia>> = (0..3).map(|_| Arc::new(SimMedia::new(8 << 20))).collect();
    let devs = sims
        .iter()
        .enumerate()
        .map(|(i, m)| (format!("s{i}"), m.clone() as Arc<dyn Media>))
        .collect();
    let pl = plan_on(devs, 1, *uuid);
    (sims, pl)
}

/// `set`'s members from `images`, slot `lost` missing, scratch loaded.
fn from_images(set: &StripeSet, images: &[Arc<dyn Media>], lost: usize) -> StripeSet {
    let members = set
        .members()
        .iter()
        .enumerate()
        .map(|(i, m)| {
            Member::new(
                m.name.clone(),
                (i != lost).then(|| images[i].clone()),
                m.ident,
            )
        })
        .collect();
    let s = StripeSet::new(set.layout, set.shape, members).unwrap();
    s.load_scratch().unwrap();
    s
}

/// Found by the DST (`stripe-garbage-after-cut-and-member-loss`): a row
/// with a scratch tag is completed and its parity in place written, but the
/// power fails before that parity is durable; the member of the blocks
/// written after the tag is lost. Those blocks (never acknowledged) must not
/// be rebuilt from the parity in place, which is a previous life's: the XOR
/// of stale blocks passes a CRC (three chunk headers of one segment XOR to a
/// header that verifies). They read as zeros; the tagged blocks read right.
#[test]
fn a_block_no_tag_covers_is_not_rebuilt_from_stale_parity() {
    use crate::media::{Loss, SimMedia};
    let (sims, pl) = sim_set(b"unit-test-set-04");
    let set = &pl.set;
    let store = StripeStore::new(set.clone());
    let ub = (UNIT / BS) as u32;
    // an old life of segment 0's row 0: both units, parity in place
    store.write(0, 0, &vec![0x11u8; 2 * UNIT as usize]).unwrap();
    set.flush().unwrap();
    // the new life: unit 0 written and flushed (a tag covers it) ...
    store.wipe(0, &vec![0x22u8; BLOCK_BYTES]).unwrap();
    store
        .write(0, 1, &vec![0x33u8; (ub as usize - 1) * BLOCK_BYTES])
        .unwrap();
    set.flush().unwrap();
    // ... then unit 1 completes the row; no flush: the P member loses the
    // new parity, the data members keep what they were sent
    store.write(0, ub, &vec![0x44u8; UNIT as usize]).unwrap();
    let p = set.layout.parity_member(0, 0).unwrap() as usize;
    let images: Vec<Arc<dyn Media>> = sims
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let loss = if i == p { Loss::DropAll } else { Loss::KeepAll };
            Arc::new(SimMedia::from_image(m.crash_image(loss, 1))) as Arc<dyn Media>
        })
        .collect();
    let deg = from_images(set, &images, set.layout.data_member(0, 1) as usize);
    let mut got = vec![0u8; UNIT as usize];
    deg.read_area(UNIT, &mut got).unwrap();
    assert!(
        got.iter().all(|&b| b == 0),
        "a block written after the row's last tag was rebuilt from stale parity"
    );
    // the tagged unit reads back (from its member, and rebuilt without it)
    let deg = from_images(set, &images, set.layout.data_member(0, 0) as usize);
    let mut got = vec![0u8; UNIT as usize];
    deg.read_area(0, &mut got).unwrap();
    assert_eq!(&got[..BLOCK_BYTES], &[0x22u8; BLOCK_BYTES][..]);
    assert!(got[BLOCK_BYTES..].iter().all(|&b| b == 0x33));
}

/// A tagged row completed and flushed: its tags are voided by that flush,
/// so a degraded read of the blocks written after the last tag rebuilds
/// them from the (durable) parity in place.
#[test]
fn a_completed_row_loses_its_tags_at_the_flush() {
    use crate::media::{Loss, SimMedia};
    let (sims, pl) = sim_set(b"unit-test-set-05");
    let set = &pl.set;
    let store = StripeStore::new(set.clone());
    let ub = (UNIT / BS) as u32;
    store.write(0, 0, &vec![0x33u8; UNIT as usize]).unwrap();
    set.flush().unwrap();
    store.write(0, ub, &vec![0x44u8; UNIT as usize]).unwrap();
    set.flush().unwrap();
    let images: Vec<Arc<dyn Media>> = sims
        .iter()
        .map(|m| Arc::new(SimMedia::from_image(m.crash_image(Loss::DropAll, 1))) as Arc<dyn Media>)
        .collect();
    let deg = from_images(set, &images, set.layout.data_member(0, 1) as usize);
    assert_eq!(
        deg.rows_tagged(),
        0,
        "a completed row's tag survived its flush"
    );
    let mut got = vec![0u8; UNIT as usize];
    deg.read_area(UNIT, &mut got).unwrap();
    assert!(
        got.iter().all(|&b| b == 0x44),
        "a flushed block of a completed row reads wrong"
    );
}

/// Found by the DST (docs/stripes.md §0 finding 5, seed 2^20+8): a flushed
/// block of a partial row is protected by the row's scratch tag alone (its
/// parity in place is a previous life's). The segment is then wiped; until
/// its tombstone is durable recovery still reads the segment's chunks, so
/// the tag must stay valid until then. The wipe voided it at once, before
/// the tombstone was written: a power cut between the two, then the loss of
/// the block's member, rebuilt the block from the stale parity in place.
/// Now the flush after the wipe voids it, after a member flush.
#[test]
fn a_wiped_segment_keeps_its_tags_until_the_tombstone_is_durable() {
    use crate::media::{Loss, SimMedia};
    let (sims, pl) = sim_set(b"unit-test-set-06");
    let set = &pl.set;
    let store = StripeStore::new(set.clone());
    let rb = (set.layout.write_unit() / BS) as u32;
    let sb = store.segment_blocks();
    // an old life: the whole segment, parity in place
    store
        .write(0, 0, &vec![0x11u8; sb as usize * BLOCK_BYTES])
        .unwrap();
    set.flush().unwrap();
    // the next life: row 0 whole and one block of row 1, flushed (a tag
    // covers that block; row 1's parity in place is the old life's)
    store.wipe(0, &vec![0x22u8; BLOCK_BYTES]).unwrap();
    let new = vec![0x33u8; (rb as usize + 1) * BLOCK_BYTES];
    store.write(0, 0, &new).unwrap();
    set.flush().unwrap();
    // that life ends too; the power fails before any flush
    let tomb = vec![0x55u8; BLOCK_BYTES];
    store.wipe(0, &tomb).unwrap();
    let mut checked = 0;
    for (k, loss) in [Loss::KeepAll, Loss::DropAll]
        .into_iter()
        .chain(std::iter::repeat_n(Loss::Subset, 24))
        .enumerate()
    {
        let images: Vec<Arc<dyn Media>> = sims
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let img = m.crash_image(loss, k as u64 * 7 + i as u64);
                Arc::new(SimMedia::from_image(img)) as Arc<dyn Media>
            })
            .collect();
        for lost in 0..3 {
            let deg = from_images(set, &images, lost);
            let mut b0 = vec![0u8; BLOCK_BYTES];
            deg.read_area(0, &mut b0).unwrap();
            if b0 == tomb {
                continue; // wiped: nothing of the segment is read
            }
            checked += 1;
            let mut got = vec![0u8; BLOCK_BYTES];
            deg.read_area(rb as u64 * BS, &mut got).unwrap();
            assert!(
                got == new[..BLOCK_BYTES],
                "{loss:?} #{k}, member {lost} lost: a flushed block of a segment whose tombstone is not durable reads wrong"
            );
        }
    }
    assert!(checked > 0, "some image kept the segment");
    // the flush after the wipe voids the old tags (the tombstone durable
    // first): a mount finds none
    set.flush().unwrap();
    let images: Vec<Arc<dyn Media>> = sims
        .iter()
        .map(|m| Arc::new(SimMedia::from_image(m.crash_image(Loss::DropAll, 1))) as Arc<dyn Media>)
        .collect();
    assert_eq!(from_images(set, &images, 0).rows_tagged(), 0);
}

/// Found by `tests/stripe_rebuild_online.rs::a_power_cut_on_a_degraded_set_
/// loses_no_flushed_write` (docs/stripes.md §0, finding 6): a row with two
/// scratch tags (the older covering fewer blocks) is completed; the flush
/// voids both. Voided in one go, a power cut could keep the newer void and
/// lose the older one: the older tag alone then made a degraded read take
/// the blocks only the newer one covered for never acknowledged (zeros).
/// Every prefix of the P member's operations in that flush, each with every
/// subset of its unflushed writes, with each data member lost: the blocks
/// flushed before read back, and all of them once the flush returned.
#[test]
fn voiding_a_completed_rows_tags_never_leaves_the_older_tag_alone() {
    use crate::media::{SimEvent, SimMedia};
    let (sims, pl) = sim_set(b"unit-test-set-07");
    let set = &pl.set;
    let store = StripeStore::new(set.clone());
    let rb = (set.layout.write_unit() / BS) as usize;
    let blk = |i: usize| vec![i as u8 + 1; BLOCK_BYTES];
    let run = |a: usize, b: usize| (a..b).flat_map(blk).collect::<Vec<u8>>();
    store.write(0, 0, &run(0, 2)).unwrap();
    set.flush().unwrap(); // tag 1: blocks 0, 1
    store.write(0, 2, &run(2, rb - 2)).unwrap();
    set.flush().unwrap(); // tag 2: blocks 0 .. rb - 2
    let p = set.layout.parity_member(0, 0).unwrap() as usize;
    let base = sims[p].current_image();
    sims[p].record();
    store.write(0, rb as u32 - 2, &run(rb - 2, rb)).unwrap(); // completes
    set.flush().unwrap();
    let events = sims[p].take_events();
    let writes_in = |evs: &[SimEvent]| {
        evs.iter()
            .filter(|e| matches!(e, SimEvent::Write { .. }))
            .count()
    };
    assert!(writes_in(&events) >= 3, "parity in place and two voids");
    let mut images = 0;
    for cut in 0..=events.len() {
        let done = &events[..cut];
        let last_flush = done
            .iter()
            .rposition(|e| matches!(e, SimEvent::Flush))
            .map_or(0, |i| i + 1);
        let cached: Vec<&SimEvent> = done[last_flush..].iter().collect();
        let n = writes_in(&done[last_flush..]);
        for mask in 0..1u32 << n {
            let mut img = base.clone();
            let mut apply = |e: &SimEvent| {
                if let SimEvent::Write { offset, data } = e {
                    img[*offset as usize..*offset as usize + data.len()].copy_from_slice(data);
                }
            };
            done[..last_flush].iter().for_each(&mut apply);
            cached
                .iter()
                .filter(|e| matches!(e, SimEvent::Write { .. }))
                .enumerate()
                .filter(|(i, _)| mask & (1 << i) != 0)
                .for_each(|(_, e)| apply(e));
            images += 1;
            let media: Vec<Arc<dyn Media>> = sims
                .iter()
                .enumerate()
                .map(|(i, m)| {
                    let im = if i == p {
                        img.clone()
                    } else {
                        m.current_image()
                    };
                    Arc::new(SimMedia::from_image(im)) as Arc<dyn Media>
                })
                .collect();
            let acked = if cut == events.len() { rb } else { rb - 2 };
            for d in 0..set.layout.data_members() {
                let lost = set.layout.data_member(0, d) as usize;
                let deg = from_images(set, &media, lost);
                let mut got = vec![0u8; acked * BLOCK_BYTES];
                deg.read_area(0, &mut got).unwrap();
                assert!(
                    got == run(0, acked),
                    "P member's first {cut} ops, unflushed writes {mask:b} kept, member {lost} lost: a flushed block reads wrong"
                );
            }
        }
    }
    assert!(images > events.len(), "some prefixes had unflushed writes");
}

/// docs/stripes.md §0 finding 8: a segment the engine closes one block
/// short of its end (`SegmentStore::closed`) has a last row that no write
/// completes. Once its blocks below the fill are in, it is finished (the
/// rest padded, parity in place) and the flush after that voids its tags
/// and gives its lane back: whether the close comes before the last write
/// (the write finishes it) or after (the flush does, before its first
/// member flush). A cut after that flush and a lost data member: no tag
/// left, every block reads back from the parity in place.
#[test]
fn a_closed_segments_last_row_is_finished_and_gives_its_lane_back() {
    use crate::media::{Loss, SimMedia};
    for close_first in [false, true] {
        let (sims, pl) = sim_set(b"unit-test-set-08");
        let set = &pl.set;
        let store = StripeStore::new(set.clone());
        let sb = store.segment_blocks();
        let rb = (set.layout.write_unit() / BS) as u32;
        let first = sb - rb;
        let row = (first / rb) as u64;
        // the row's first block, flushed: a scratch tag holds its lane
        store.write(0, first, &[0x55u8; BLOCK_BYTES]).unwrap();
        set.flush().unwrap();
        assert_eq!(set.rows.lock().row_lane.len(), 1, "a lane taken");
        let rest = vec![0x66u8; (rb - 2) as usize * BLOCK_BYTES];
        if close_first {
            store.closed(0, sb - 1);
            store.write(0, first + 1, &rest).unwrap();
        } else {
            store.write(0, first + 1, &rest).unwrap();
            store.closed(0, sb - 1);
        }
        set.flush().unwrap();
        let what = if close_first {
            "closed, then its last write"
        } else {
            "its last write, then closed"
        };
        let t = set.rows.lock();
        assert!(
            t.row_lane.is_empty() && t.free_lanes.len() == scratch::LANES as usize,
            "{what}: the row's lane was not given back"
        );
        drop(t);
        let images: Vec<Arc<dyn Media>> = sims
            .iter()
            .map(|m| {
                Arc::new(SimMedia::from_image(m.crash_image(Loss::DropAll, 1))) as Arc<dyn Media>
            })
            .collect();
        let deg = from_images(set, &images, set.layout.data_member(row, 0) as usize);
        assert_eq!(
            deg.rows_tagged(),
            0,
            "{what}: the finished row's tags survived"
        );
        let mut got = vec![0u8; (rb - 1) as usize * BLOCK_BYTES];
        deg.read_area((sb - rb) as u64 * BS, &mut got).unwrap();
        assert!(
            got[..BLOCK_BYTES].iter().all(|&b| b == 0x55)
                && got[BLOCK_BYTES..].iter().all(|&b| b == 0x66),
            "{what}: the row reads back wrong with its first member lost"
        );
    }
}

/// A degraded mount does not resync, so the lanes of the tags it found stay
/// taken until their rows' segment starts a new life (`retire_mount_lanes`,
/// through the wipe's `forget_range` and the tombstone's
/// `drop_mount_tags`): every lane holds a tag, member 0 is lost, every
/// segment but one is wiped and the flush after gives their lanes back,
/// and only theirs: sixteen new partial rows on the kept row's P member
/// then find exactly the lanes wiped (one flushed unprotected) and none of
/// them overwrites the kept row's copy, which a degraded read of its block
/// on the lost member still rebuilds from.
#[test]
fn a_degraded_mount_gets_back_the_lanes_of_wiped_segments_and_only_theirs() {
    use crate::media::{Loss, SimMedia};
    let (sims, pl) = sim_set(b"unit-test-set-09");
    let set = &pl.set;
    let store = StripeStore::new(set.clone());
    let l = set.layout;
    let ub = (UNIT / BS) as u32;
    let rb = 2 * ub;
    let rps = l.rows_per_segment;
    let lanes = scratch::LANES;
    assert!(store.segment_count() >= 2 * lanes, "room for the new rows");
    let blk = |s: u32| vec![s as u8 + 1; BLOCK_BYTES];
    // row 1 of segments 0..LANES: the first block of each data unit, flushed
    for s in 0..lanes {
        store.write(s, rb, &blk(s)).unwrap();
        store.write(s, rb + ub, &blk(s)).unwrap();
    }
    set.flush().unwrap();
    assert!(
        set.rows.lock().free_lanes.is_empty(),
        "every lane holds a tag"
    );
    let lost = 0u32;
    let images: Vec<Arc<dyn Media>> = sims
        .iter()
        .map(|m| Arc::new(SimMedia::from_image(m.crash_image(Loss::DropAll, 1))) as Arc<dyn Media>)
        .collect();
    let deg = Arc::new(from_images(set, &images, lost as usize));
    let p_of = |s: u32| l.parity_member(s as u64 * rps + 1, 0).unwrap();
    // the tags on member 0 are not read: those lanes are free at mount
    let read: Vec<u32> = (0..lanes).filter(|&s| p_of(s) != lost).collect();
    assert_eq!(deg.rows_tagged(), read.len());
    assert_eq!(
        deg.rows.lock().free_lanes.len(),
        (lanes as usize) - read.len()
    );
    let keep = read[0];
    let kp = p_of(keep);
    let dstore = StripeStore::new(deg.clone());
    for s in (0..lanes).filter(|&s| s != keep) {
        dstore.wipe(s, &[0x77u8; BLOCK_BYTES]).unwrap();
    }
    deg.flush().unwrap();
    assert_eq!(
        deg.rows.lock().free_lanes.len(),
        lanes as usize - 1,
        "the wiped segments' lanes come back, the kept row's does not"
    );
    // sixteen new partial rows whose P member is the kept row's
    let mut n = 0;
    for s in lanes..store.segment_count() {
        if n == lanes {
            break;
        }
        let Some(j) = (1..rps).find(|&j| l.parity_member(s as u64 * rps + j, 0) == Some(kp)) else {
            continue;
        };
        dstore
            .write(s, j as u32 * rb, &[0x99u8; BLOCK_BYTES])
            .unwrap();
        n += 1;
    }
    assert_eq!(n, lanes);
    deg.flush().unwrap();
    assert_eq!(
        deg.status().unprotected_flushes,
        1,
        "the new rows find exactly the lanes of the wiped segments"
    );
    // the kept row's block on the lost member, from its scratch copy
    let row = keep as u64 * rps + 1;
    let d = (0..2).find(|&d| l.data_member(row, d) == lost).unwrap();
    let mut got = vec![0u8; BLOCK_BYTES];
    deg.read_area(store.phys(keep, rb + d * ub) * BS, &mut got)
        .unwrap();
    assert!(
        got == blk(keep),
        "a flushed block of a row tagged at mount reads wrong: its lane was given to another row"
    );
}

/// A member whose flush can be held until every member's flush has begun
/// (`Gate`), or fail; `flush_overlaps` as a file's.
struct Overlapping {
    inner: MemMedia,
    gate: Arc<Gate>,
    fail: std::sync::atomic::AtomicBool,
}

#[derive(Default)]
struct Gate {
    armed: std::sync::atomic::AtomicBool,
    /// Flushes begun since armed; the most seen running at once.
    state: Mutex<(usize, usize, usize)>,
    cv: parking_lot::Condvar,
}

impl Gate {
    /// Count a flush in, wait (at most 20 s: a serial caller must not hang
    /// the test, it fails it; a loaded machine starts threads well within
    /// it) until `n` have begun, count it out.
    fn pass(&self, n: usize) {
        if !self.armed.load(Ordering::Acquire) {
            return;
        }
        let mut s = self.state.lock();
        s.0 += 1;
        s.1 += 1;
        s.2 = s.2.max(s.1);
        self.cv.notify_all();
        let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while s.0 < n && !self.cv.wait_until(&mut s, until).timed_out() {}
        s.1 -= 1;
    }
}

impl Media for Overlapping {
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.inner.write_at(buf, offset)
    }
    fn flush(&self) -> io::Result<()> {
        self.gate.pass(5);
        if self.fail.load(Ordering::Acquire) {
            return Err(io::Error::other("flush refused (test)"));
        }
        self.inner.flush()
    }
    fn flush_overlaps(&self) -> bool {
        true
    }
    fn describe(&self) -> String {
        "overlapping test member".into()
    }
}

/// Members that flush beside each other are flushed at once (all five
/// flushes begun before any ends); a member whose flush fails is taken out
/// of use and the flush stands while the parity covers the members down,
/// then fails.
#[test]
fn members_are_flushed_at_once_and_a_failed_flush_fails_its_member() {
    let gate = Arc::new(Gate::default());
    let media: Vec<Arc<Overlapping>> = (0..5)
        .map(|_| {
            Arc::new(Overlapping {
                inner: MemMedia::new(8 << 20),
                gate: gate.clone(),
                fail: false.into(),
            })
        })
        .collect();
    let devs = media
        .iter()
        .enumerate()
        .map(|(i, m)| (format!("o{i}"), m.clone() as Arc<dyn Media>))
        .collect();
    let pl = plan_on(devs, 1, *b"unit-test-set-10");
    let set = &pl.set;
    gate.armed.store(true, Ordering::Release);
    set.flush_members().unwrap();
    assert_eq!(
        gate.state.lock().2,
        5,
        "the members' flushes ran one after another"
    );
    gate.armed.store(false, Ordering::Release);
    media[2].fail.store(true, Ordering::Release);
    set.flush_members().unwrap();
    let down: Vec<u32> = set.status().down.iter().map(|d| d.0).collect();
    assert_eq!(down, vec![2], "the member whose flush failed is out of use");
    media[3].fail.store(true, Ordering::Release);
    assert!(
        set.flush_members().is_err(),
        "two members down on a RAID-5 set: the flush fails"
    );
    assert_eq!(set.status().down.len(), 2);
}

/// docs/stripes.md §0 finding 11 (DST seed 1310725, RAID-6 of 2 data + P +
/// Q): a reuse barrier wipes a segment whose first row the old life wrote
/// whole; the flush after the wipe makes the tombstone durable. It then
/// padded the row's other data column with zeros and wrote the row's
/// parity in place; a power cut tore those writes, and with the
/// tombstone's member lost block 0 was rebuilt sector by sector from old
/// and new bytes: the old header's first sector (its seq intact) over
/// garbage, no tombstone sector, so recovery took it for a flushed chunk
/// that fails its check and refused the mount. Every cut point of the
/// wipe and its flush (one disk of four parts, the DST's model), every
/// subset of the unflushed writes torn at random sectors, each one or two
/// members lost: block 0 reads as the old block whole or as a wipe (a
/// tombstone sector, whole or torn, or a zero first sector), a flushed
/// block of another segment reads back, and once the flush returned block
/// 0 is the tombstone.
#[test]
fn a_torn_tombstone_row_rebuilds_the_old_block_or_a_wipe() {
    use crate::format::chunk;
    use crate::media::{crash_apply, Loss, SimEvent, SimMedia};
    const PART: u64 = 4 << 20;
    let n = 4u32;
    let sim = Arc::new(SimMedia::new(PART * n as u64));
    let devs = (0..n)
        .map(|i| {
            let part = sim.part(i as u64 * PART, PART);
            (format!("p{i}"), Arc::new(part) as Arc<dyn Media>)
        })
        .collect();
    let uuid = *b"unit-test-set-09";
    let pl = plan(
        devs,
        &PlanOptions {
            parity: 2,
            unit: 4096,
            segment_bytes: 64 << 10,
            logical_bytes: None,
            overprovision: 0.1,
            log_bytes: 0,
            set_uuid: Some(uuid),
        },
    )
    .unwrap();
    let set = &pl.set;
    set.set_formatting(false);
    let store = StripeStore::new(set.clone());
    let sb = store.segment_blocks() as usize;
    // the old life of segment 0 (its first block a chunk header's stand-in)
    // and a flushed block of segment 1
    let old: Vec<u8> = (0..sb)
        .flat_map(|i| vec![0x10u8.wrapping_add(i as u8); BLOCK_BYTES])
        .collect();
    store.write(0, 0, &old).unwrap();
    let other = vec![0x5au8; BLOCK_BYTES];
    store.write(1, 0, &other).unwrap();
    set.flush().unwrap();
    let base = sim.current_image();
    sim.record();
    let mut tomb = vec![0u8; BLOCK_BYTES];
    chunk::tombstone(&mut tomb, &uuid, 0);
    store.wipe(0, &tomb).unwrap();
    set.flush().unwrap();
    let events = sim.take_events();
    let mut images = 0;
    for cut in 0..=events.len() {
        // replay the first `cut` operations: durable, and still cached
        let mut durable = base.clone();
        let mut cache: Vec<(u64, Vec<u8>)> = Vec::new();
        for e in &events[..cut] {
            match e {
                SimEvent::Write { offset, data } => cache.push((*offset, data.clone())),
                SimEvent::FlushPart { base, len } => cache.retain(|(o, d)| {
                    let inside = *o >= *base && *o < base + len;
                    if inside {
                        durable[*o as usize..*o as usize + d.len()].copy_from_slice(d);
                    }
                    !inside
                }),
                _ => {}
            }
        }
        let rounds = if cache.is_empty() { 1 } else { 24 };
        for k in 0..rounds {
            let loss = [Loss::KeepAll, Loss::Subset][(k % 2) as usize];
            let mut img = durable.clone();
            crash_apply(
                &mut img,
                cache.iter().map(|(o, d)| (*o, d.as_slice())),
                loss,
                cut as u64 * 1000 + k,
            );
            images += 1;
            let disk = Arc::new(SimMedia::from_image(img));
            for lost in losses(n, 2).into_iter().filter(|l| !l.is_empty()) {
                let members = set
                    .members()
                    .iter()
                    .enumerate()
                    .map(|(i, m)| {
                        let media = (!lost.contains(&(i as u32)))
                            .then(|| Arc::new(disk.part(i as u64 * PART, PART)) as Arc<dyn Media>);
                        Member::new(m.name.clone(), media, m.ident)
                    })
                    .collect();
                let deg = StripeSet::new(set.layout, set.shape, members).unwrap();
                deg.load_scratch().unwrap();
                let mut b0 = vec![0u8; BLOCK_BYTES];
                deg.read_area(0, &mut b0).unwrap();
                // (a first sector of zeros reads as a wipe too)
                let wipe =
                    chunk::has_tombstone_sector(&b0, &uuid, 0) || b0[..512].iter().all(|&b| b == 0);
                assert!(
                    b0 == old[..BLOCK_BYTES] || wipe,
                    "cut after {cut} of {} ops, {loss:?} #{k}, members {lost:?} lost: segment 0's block 0 is neither the old block nor a wipe",
                    events.len()
                );
                if cut == events.len() {
                    assert!(
                        b0 == tomb,
                        "members {lost:?} lost: the flushed tombstone reads wrong"
                    );
                }
                let mut got = vec![0u8; BLOCK_BYTES];
                deg.read_area(store.phys(1, 0) * BS, &mut got).unwrap();
                assert!(
                    got == other,
                    "members {lost:?} lost: a flushed block reads wrong"
                );
            }
        }
    }
    assert!(images > events.len(), "some cuts had unflushed writes");
}

#[test]
fn an_evicted_row_completed_by_one_write_keeps_its_blocks_for_the_next() {
    // Row 0 of each segment: block 0 written and flushed; the rows evicted
    // (more states than are kept); then block 4 alone (read back), then
    // block 5 alone, a flush, then the rest of the row. The parity must
    // cover block 0 throughout, and block 0 must stay on its member.
    for (n, p) in [(5usize, 1u32), (6, 2)] {
        let pl = planned(n, p);
        let store = StripeStore::new(pl.set.clone());
        let rb = (pl.set.layout.write_unit() / BS) as u32;
        let segs = (rows::KEEP_ROWS as u32 + 8).min(store.segment_count());
        assert!(segs as usize > rows::KEEP_ROWS, "enough segments");
        let mut want = Vec::new();
        let put = |seg: u32, b: u32, v: u8, want: &mut Vec<(u64, Vec<u8>)>| {
            let buf = vec![v; BLOCK_BYTES];
            store.write(seg, b, &buf).unwrap();
            want.push((store.phys(seg, b), buf));
        };
        for seg in 0..segs {
            put(seg, 0, seg as u8 + 1, &mut want);
        }
        pl.set.flush().unwrap();
        for seg in 0..segs {
            put(seg, 4, seg as u8 + 51, &mut want);
        }
        assert!(pl.set.status().rows_loaded > 0, "rows were evicted");
        for seg in 0..segs {
            put(seg, 5, seg as u8 + 101, &mut want);
        }
        pl.set.flush().unwrap();
        for lost in losses(n as u32, p) {
            check_all(
                &without(&pl.set, &lost),
                &want,
                &format!("{n}+{p} after the partial flush, lost {lost:?}"),
            );
        }
        for seg in 0..segs {
            for b in 6..rb {
                put(seg, b, seg as u8 + 151, &mut want);
            }
        }
        pl.set.flush().unwrap();
        for lost in losses(n as u32, p) {
            check_all(
                &without(&pl.set, &lost),
                &want,
                &format!("{n}+{p} after the row is complete, lost {lost:?}"),
            );
        }
    }
}

/// `load_scratch` reads each member's scratch area in large reads: the
/// tags it finds, their places and the lanes left free are the same
/// whatever the read size (one place, three, all at once), a place whose
/// tag fails its CRC is not taken, and a member down is skipped.
#[test]
fn scratch_tags_are_found_in_their_places_whatever_the_read_size() {
    use std::collections::HashMap;
    let p = planned(5, 1);
    let set = p.set;
    let l = set.layout;
    let uuid = set.members()[0].ident.set_uuid;
    let rb = (l.write_unit() / BS) as usize;
    let place = BLOCK_BYTES + l.unit as usize;
    // (member, lane, place, row, seq); the last one is torn below
    let tags = [
        (0u32, 0u32, 1u32, 3u64, 7u64),
        (1, 4, 0, 9, 8),
        (2, 15, 1, 11, 12),
        (4, 7, 0, 5, 9),
        (4, 7, 1, 5, 10),
        (3, 2, 0, 6, 11),
    ];
    for (i, &(m, lane, pl, row, seq)) in tags.iter().enumerate() {
        let mut buf = AlignedBuf::new(place);
        buf[BLOCK_BYTES..].fill(i as u8 + 1);
        let mut covered = vec![false; rb];
        covered[i % rb] = true;
        scratch::Tag {
            set_uuid: uuid,
            row,
            seq,
            which: 0,
            covered,
        }
        .seal(&mut buf);
        if i == tags.len() - 1 {
            buf[BLOCK_BYTES + 100] ^= 1; // a torn parity: its CRC fails
        }
        let at = scratch::place_offset(set.scratch_base(), l.unit, lane, pl);
        set.members()[m as usize]
            .media
            .as_ref()
            .unwrap()
            .write_at(&buf, at)
            .unwrap();
    }
    let want: HashMap<(u32, u32, u32), (u64, u64)> = tags[..tags.len() - 1]
        .iter()
        .map(|&(m, lane, pl, row, seq)| ((m, lane, pl), (row, seq)))
        .collect();
    for per in [1, 3, 32] {
        let s = without(&set, &[]);
        s.rows.lock().mount_tags.clear();
        s.rows.lock().place_owner.clear();
        s.rows.lock().free_lanes = (0..scratch::LANES).rev().collect();
        s.load_scratch_in(per * place).unwrap();
        let t = s.rows.lock();
        assert_eq!(t.place_owner, want, "places found reading {per} at a time");
        let mut free = t.free_lanes.clone();
        free.sort_unstable();
        let taken: Vec<u32> = (0..scratch::LANES)
            .filter(|l| [0, 4, 15, 7].contains(l))
            .collect();
        assert!(taken.iter().all(|l| !free.contains(l)), "{free:?}");
        assert_eq!(free.len(), scratch::LANES as usize - taken.len());
        assert_eq!(t.mount_tags.get(&5).map(|v| v.len()), Some(2));
        assert_eq!(s.seq.load(Ordering::Relaxed), 13);
    }
    // member 2 down: its tag is not read, the others are
    let s = without(&set, &[2]);
    let t = s.rows.lock();
    assert!(!t.place_owner.contains_key(&(2, 15, 1)));
    assert_eq!(t.place_owner.len(), want.len() - 1);
}
