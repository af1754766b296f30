//! `src/stripe.rs`: the layout of a stripe set. The segment -> member mapping
//! is a bijection onto the member space of its rows minus parity; parity
//! rotates over every member; a byte range splits exactly at unit
//! boundaries; capacity follows the smallest member; bad shapes are errors.

use proptest::prelude::*;
use sluice::format::stripe::{Layout, MemberRefusal, StripeIdentity};
use sluice::stripe::{
    assemble, AssemblyError, LayoutError, Role, StripeLayout, DEFAULT_STRIPE_UNIT,
};
use std::collections::BTreeSet;

fn layout_strategy() -> impl Strategy<Value = StripeLayout> {
    (2u32..=9, 0u32..=2, 1u64..=4, 1u64..=5, 0u64..=3).prop_filter_map(
        "members > parity + 1",
        |(n, p, unit_blocks, rows, off)| {
            StripeLayout::new(n, p, unit_blocks * 4096, rows, off * (1 << 20)).ok()
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn mapping_is_a_bijection_onto_members_minus_parity(l in layout_strategy(), segs in 1u64..=3) {
        let n = l.members;
        let mut data_units = BTreeSet::new();
        for s in 0..segs {
            // One piece per unit, each a whole unit; no unit twice.
            for u in 0..l.segment_bytes() / l.unit {
                let pieces = l.map(s, u * l.unit, l.unit).unwrap();
                prop_assert_eq!(pieces.len(), 1);
                let pc = pieces[0];
                prop_assert_eq!(pc.len, l.unit);
                let row = (pc.member_offset - l.member_offset) / l.unit;
                prop_assert_eq!((pc.member_offset - l.member_offset) % l.unit, 0);
                prop_assert_eq!(row, pc.row);
                prop_assert_eq!(l.role(row, pc.member), Role::Data(pc.data_index));
                prop_assert!(data_units.insert((row, pc.member)), "unit {:?} mapped twice", (row, pc.member));
            }
        }
        // With the parity units, the rows' member space is covered exactly.
        let rows = segs * l.rows_per_segment;
        let mut parity_units = BTreeSet::new();
        for r in 0..rows {
            for j in 0..l.parity {
                let m = l.parity_member(r, j).unwrap();
                prop_assert_eq!(l.role(r, m), if j == 0 { Role::P } else { Role::Q });
                prop_assert!(parity_units.insert((r, m)));
            }
        }
        prop_assert!(data_units.is_disjoint(&parity_units));
        prop_assert_eq!(data_units.len() + parity_units.len(), (rows * n as u64) as usize);
        prop_assert_eq!(data_units.len() as u64 * l.unit, segs * l.segment_bytes());
    }

    #[test]
    fn parity_rotates_over_every_member(l in layout_strategy(), start in 0u64..1000) {
        prop_assume!(l.parity > 0);
        let n = l.members as u64;
        for j in 0..l.parity {
            let seen: BTreeSet<u32> = (start..start + n).map(|r| l.parity_member(r, j).unwrap()).collect();
            prop_assert_eq!(seen.len() as u64, n, "parity {} does not visit every member", j);
        }
        for r in start..start + n {
            prop_assert_ne!(l.parity_member(r, 0), l.parity_member(r + 1, 0));
            if l.parity == 2 {
                prop_assert_ne!(l.parity_member(r, 0), l.parity_member(r, 1));
            }
        }
    }

    #[test]
    fn ranges_split_at_unit_boundaries(l in layout_strategy(), s in 0u64..4, a in any::<prop::sample::Index>(), b in any::<prop::sample::Index>()) {
        let sb = l.segment_bytes();
        let (x, y) = (a.index(sb as usize + 1) as u64, b.index(sb as usize + 1) as u64);
        let (off, len) = (x.min(y), x.max(y) - x.min(y));
        let pieces = l.map(s, off, len).unwrap();
        let mut pos = off;
        for (i, pc) in pieces.iter().enumerate() {
            prop_assert_eq!(pc.segment_offset, pos);
            prop_assert!(pc.len > 0);
            let in_unit = (pc.member_offset - l.member_offset) % l.unit;
            prop_assert!(in_unit + pc.len <= l.unit, "piece crosses a unit");
            // Only the first piece may start inside a unit, only the last end inside one.
            if i > 0 {
                prop_assert_eq!(in_unit, 0);
            }
            if i + 1 < pieces.len() {
                prop_assert_eq!(in_unit + pc.len, l.unit);
            }
            // The same bytes as the whole unit's piece, shifted.
            let u = pos / l.unit * l.unit;
            let whole = l.map(s, u, l.unit).unwrap()[0];
            prop_assert_eq!(pc.member, whole.member);
            prop_assert_eq!(pc.member_offset, whole.member_offset + (pos - u));
            pos += pc.len;
        }
        prop_assert_eq!(pos, off + len);
        // One byte past the segment is refused.
        let past = matches!(l.map(s, off, sb - off + 1), Err(LayoutError::Range { .. }));
        prop_assert!(past);
    }
}

#[test]
fn capacity_follows_the_smallest_member_in_whole_segments() {
    let unit = DEFAULT_STRIPE_UNIT;
    let rows = StripeLayout::rows_for_segment_bytes(5, 1, unit, 4 << 20);
    assert_eq!(rows, 16, "4 MiB segments are 16 rows of a 4+1 set");
    let l = StripeLayout::new(5, 1, unit, rows, 1 << 20).unwrap();
    assert_eq!(l.write_unit(), 256 << 10);
    assert_eq!(l.segment_bytes(), 4 << 20);
    let gib = 1u64 << 30;
    let c = l
        .capacity(&[gib, gib, gib / 2 + (3 << 20), gib, 2 * gib])
        .unwrap();
    // Smallest: 512 MiB + 3 MiB, minus 1 MiB head and 64 KiB tail.
    let usable = gib / 2 + (2 << 20) - (64 << 10);
    assert_eq!(c.rows, usable / unit);
    assert_eq!(c.segments, usable / unit / 16);
    assert_eq!(c.data_bytes, c.segments * (4 << 20));
    assert!(matches!(
        l.capacity(&[gib; 4]),
        Err(LayoutError::Members { .. })
    ));
    assert!(matches!(
        l.capacity(&[2 << 20; 5]),
        Err(LayoutError::TooSmall(_))
    ));
}

#[test]
fn shapes_that_cannot_work_are_refused() {
    for (n, p) in [(1, 0), (2, 1), (3, 2), (4, 3), (256, 1)] {
        assert!(
            matches!(
                StripeLayout::new(n, p, 4096, 1, 0),
                Err(LayoutError::Members { .. })
            ),
            "{n}+{p}"
        );
    }
    for unit in [0, 512, 4097, 32 << 20] {
        assert_eq!(
            StripeLayout::new(4, 1, unit, 1, 0),
            Err(LayoutError::Unit(unit))
        );
    }
    assert_eq!(StripeLayout::new(4, 1, 4096, 0, 0), Err(LayoutError::Rows));
    let l = StripeLayout::new(3, 1, 4096, 2, 0).unwrap();
    assert!(l.map(u64::MAX, 0, 1).is_err());
    assert!(l.map(0, u64::MAX, 2).is_err());
}

fn member(set: u8, index: u16, n: u16, parity: u8, generation: u64) -> StripeIdentity {
    StripeIdentity {
        set_uuid: [set; 16],
        member_uuid: [index as u8 + 1; 16],
        member_index: index,
        member_count: n,
        parity,
        layout: Layout::LeftSymmetric,
        stripe_unit: 64 << 10,
        rows_per_segment: 16,
        rows: 1024,
        generation,
    }
}

fn named(ids: &[StripeIdentity]) -> Vec<(String, StripeIdentity)> {
    ids.iter()
        .enumerate()
        .map(|(i, id)| (format!("/dev/d{i}"), *id))
        .collect()
}

#[test]
fn members_assemble_in_any_order_and_degraded_up_to_the_parity() {
    // Given in reverse order: each lands in the slot it names.
    let ids: Vec<StripeIdentity> = (0..5).rev().map(|i| member(1, i, 5, 1, 3)).collect();
    let a = assemble(&named(&ids)).unwrap();
    assert_eq!(a.slots, vec![Some(4), Some(3), Some(2), Some(1), Some(0)]);
    assert!(a.missing().is_empty());
    // One missing with P: degraded; two missing with P: refused; with P+Q: degraded.
    let four: Vec<StripeIdentity> = [0, 1, 3, 4]
        .iter()
        .map(|&i| member(1, i, 5, 1, 3))
        .collect();
    assert_eq!(assemble(&named(&four)).unwrap().missing(), vec![2]);
    let three: Vec<StripeIdentity> = [0, 3, 4].iter().map(|&i| member(1, i, 5, 1, 3)).collect();
    assert_eq!(
        assemble(&named(&three)),
        Err(AssemblyError::TooManyMissing {
            missing: vec![1, 2],
            parity: 1
        })
    );
    let three6: Vec<StripeIdentity> = [0, 3, 4].iter().map(|&i| member(1, i, 5, 2, 3)).collect();
    assert_eq!(assemble(&named(&three6)).unwrap().missing(), vec![1, 2]);
    assert_eq!(assemble(&[]), Err(AssemblyError::Empty));
}

/// A newer generation on fewer than `members - parity` members was cut short
/// before anything was acknowledged at it (StripeSet::record_failures, a
/// degraded mount): the members below it are not stale. On at least that
/// many, the members below it are (docs/stripes.md §0, finding 3).
#[test]
fn a_generation_on_fewer_than_members_minus_parity_makes_no_member_stale() {
    let set = |gens: &[(u16, u64)], n: u16, p: u8| {
        let ids: Vec<StripeIdentity> = gens.iter().map(|&(i, g)| member(1, i, n, p, g)).collect();
        assemble(&named(&ids))
    };
    let stale = |name: &str, generation, set| AssemblyError::Refused {
        name: name.into(),
        why: MemberRefusal::Stale { generation, set },
    };
    // RAID-5 of 5: 4 at the new generation, the fifth stale
    let all = [(0, 4), (1, 4), (2, 3), (3, 4), (4, 4)];
    assert_eq!(set(&all, 5, 1), Err(stale("/dev/d2", 3, 4)));
    // member 1 not given: 3 of the 4 found at 4 (the record may not have
    // reached 1; if it did, 1 and 2 are two failures, beyond the parity)
    let a = set(&[(0, 4), (2, 3), (3, 4), (4, 4)], 5, 1).unwrap();
    assert_eq!((a.missing(), a.set.generation), (vec![1], 3));
    // two of five at the new generation: cut short, nobody stale
    let a = set(&[(0, 4), (1, 4), (2, 3), (3, 3), (4, 3)], 5, 1).unwrap();
    assert_eq!((a.missing(), a.set.generation), (vec![], 3));
    // RAID-6 of 4: two at 4 is enough to make the other two stale
    let e = set(&[(0, 4), (1, 3), (2, 4), (3, 3)], 4, 2).unwrap_err();
    assert_eq!(e, stale("/dev/d1", 3, 4));
    // a member given back after a degraded mount (n - 1 moved on): stale
    let e = set(&[(0, 7), (1, 7), (2, 6)], 3, 1).unwrap_err();
    assert_eq!(e, stale("/dev/d2", 6, 7));
}

#[test]
fn a_foreign_stale_or_duplicate_member_is_refused_by_name() {
    let mut ids: Vec<StripeIdentity> = (0..4).map(|i| member(1, i, 4, 1, 3)).collect();
    // A member of another set among them.
    let mut other = ids.clone();
    other[2] = member(9, 2, 4, 1, 3);
    let e = assemble(&named(&other)).unwrap_err();
    assert!(
        matches!(&e, AssemblyError::Refused { name, why: MemberRefusal::OtherSet { .. } } if name == "/dev/d2"),
        "{e}"
    );
    assert!(
        e.to_string()
            .starts_with("/dev/d2 belongs to stripe set 0909"),
        "{e}"
    );
    // A stale member (replaced, then given again).
    let mut stale = ids.clone();
    stale[1].generation = 2;
    let e = assemble(&named(&stale)).unwrap_err();
    assert_eq!(
        e,
        AssemblyError::Refused {
            name: "/dev/d1".into(),
            why: MemberRefusal::Stale {
                generation: 2,
                set: 3
            }
        }
    );
    // Two devices claiming one slot.
    ids.push(member(1, 3, 4, 1, 3));
    assert_eq!(
        assemble(&named(&ids)),
        Err(AssemblyError::DuplicateSlot {
            slot: 3,
            first: "/dev/d3".into(),
            second: "/dev/d4".into()
        })
    );
}
