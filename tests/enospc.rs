//! ENOSPC: a thin volume (more logical space than media, over-provisioning < 0)
//! fills up with random data; writes then fail with ENOSPC, the volume stays
//! consistent, and after remount every acknowledged write is readable. (With
//! over-provisioning >= 0, the geometry makes ENOSPC impossible by construction.)

mod common;

use common::*;
use rand::{rngs::SmallRng, Rng, SeedableRng};
use sluice::media::{Media, MemMedia};
use sluice::{Error, Volume};
use std::sync::Arc;

#[test]
fn full_volume_answers_enospc_and_keeps_every_acknowledged_write() {
    let blocks = 256;
    let (create, media_bytes) = small_create(blocks, -2.0);
    let media: Arc<MemMedia> = Arc::new(MemMedia::new(media_bytes));
    let vol = Volume::create(media.clone() as Arc<dyn Media>, &create, &det_open(1 << 40)).unwrap();
    let mut r = Reference::new(blocks);
    let mut rng = SmallRng::seed_from_u64(5);
    let mut failed = None;
    for i in 0..20_000 {
        let b = if i < blocks {
            i
        } else {
            rng.gen_range(0..blocks)
        };

        let op = Op::Write {
            offset: b * BS as u64,
            len: BS,
            seed: rng.gen(),
            fill: Fill::Random,
        };
        match issue(&vol, &op, false) {
            Ok(()) => r.apply(&op),
            Err(e) => {
                failed = Some((i, e, op));
                break;
            }
        }
    }
    let (i, e, op) = failed.expect("a volume with no spare space must fill up");
    assert!(
        matches!(e, Error::NoSpace),
        "write {i} failed with {e}, expected NoSpace"
    );
    assert_eq!(e.errno(), libc::ENOSPC);
    // It stays usable for what needs no space: reads, flush, trim.
    assert_eq!(
        read_all(&vol),
        r.cur,
        "acknowledged writes must read back before remount"
    );
    vol.flush().unwrap();
    r.flushed();
    // the failed write may or may not have landed: it is a candidate prefix
    r.apply(&op);
    let st = vol.stats();
    assert!(
        st.segments_free <= vol.geometry().reserve() + 1,
        "ENOSPC with free space left: {st:?}"
    );
    drop(vol); // crash, not close
    let vol = Volume::open(media.clone() as Arc<dyn Media>, &det_open(1 << 40)).unwrap();
    let actual = read_all(&vol);
    r.matching_prefix(&actual).unwrap();
    // Trimming makes room again.
    vol.trim(0, 64 * BS as u64, false).unwrap();
    if let Err(e) = vol.write(0, &payload(BS * 4, 1, Fill::Random), true) {
        panic!("after trim: {e} {:#?}", vol.stats());
    }
    vol.close().unwrap();
    assert!(sluice::check::check(&*media).is_clean());
}
