//! The chain of chunk headers per open-segment class (format v2 `CHAIN`,
//! docs/format-v2.md §3): each chunk names the seq of the previous chunk of
//! its class (the user stream, or one GC class) sealed in the same life of
//! the engine (the first of a class after a mount names none). This module
//! owns the rule that uses it to bound a damaged header that the seq gaps
//! alone cannot (a flip in the seq field of a segment's last chunk):
//!
//! A stretch `S` that fails as a header, with no valid chunk after it in its
//! segment, right after a found chunk `X` of class k, at a place where the
//! segment still had room (the engine keeps a class's segment open while 2
//! blocks are left: `Core::open_chunk`). When the loaded checkpoint is the
//! newest one written (no slot fallback, no full rebuild), no mount came
//! between X and now (every mount that writes chunks first writes a
//! checkpoint above every chunk it found), so X's successor `a` in its class
//! was written at S, if at all. A found chunk of class k naming a
//! predecessor `m > X.seq` proves `a <= m` (a class's chunks are sealed in
//! seq order); with `m < W` the successor was flushed, so S is durable
//! damage: the mount refuses (salvage: EIO for what S may have held) instead
//! of skipping `a` as a dead chunk below W. When a found chunk names X
//! itself, the successor is intact elsewhere and S is not it.
//!
//! The rule also needs `m >= c_next` (the loaded checkpoint's next seq).
//! "Room" is not always enough for the successor: a compressed volume's
//! staged chunk (`Core::place`) or a GC move of a packed fragment (room 3)
//! that does not fit closes the segment with blocks left, and `a` goes to a
//! fresh segment B. If `a` then dies and B is freed and reused, the
//! checkpoint that let B be reused reflects `a` (`a < c_next`), the chunk
//! after `a` names it, and S (never written: stale bytes of the segment's
//! previous life) looks exactly like the damaged successor. When `a` really
//! was written at S after the newest checkpoint, `a >= c_next`, so
//! `m >= a >= c_next`; when `m < c_next` the successor is below the
//! checkpoint, replay never applies it, and S is no reason to refuse. (Found
//! by reading this rule for the cause of the threaded DST's one refusal
//! "bad magic ... although a flush had made it durable", seed 6298 on a
//! compressed volume: this path gives exactly that refusal, but the rule
//! `chain_successor_below_checkpoint` that counts it fired in none of
//! 21,500 threaded runs since, nor did the refusal recur.)
//!
//! Invariant: the rule only ever adds damage (a refusal, or unvouched blocks
//! for salvage), never drops or applies a chunk; on volumes without the
//! chain (v1, or v2 without `CHAIN`: every `chain` is None) it finds nothing.

use super::{BadKind, RecoveryRules, SegScan, Span};
use std::collections::HashSet;

/// A damaged stretch the chain proves durable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Break {
    pub segment: u32,
    pub pos: u32,
    /// The found chunk right before it, whose successor it held.
    pub after: u64,
    /// The chunk whose predecessor field bounds it, and that predecessor:
    /// the stretch held a chunk with seq in `after + 1..=bound`.
    pub named_by: u64,
    pub bound: u64,
    pub why: String,
}

impl Break {
    /// Where it is, for messages (as `Bad::place`).
    pub fn place(&self) -> String {
        format!(
            "segment {} block {}, the chunk after seq {} (seq at most {}: chunk {} names it as its predecessor)",
            self.segment, self.pos, self.after, self.bound, self.named_by
        )
    }
}

/// Damaged last stretches of segments that the chain proves durable (module
/// comment), given the durable watermark `w`, the loaded checkpoint's
/// `c_next` and the segment size.
#[cfg(test)]
pub fn breaks(scans: &[SegScan], segment_blocks: u32, w: u64, c_next: u64) -> Vec<Break> {
    breaks_counted(scans, segment_blocks, w, c_next).0
}

/// `breaks`, and how many stretches the chain bounded below the checkpoint
/// (not breaks: the module comment's second paragraph).
fn breaks_counted(
    scans: &[SegScan],
    segment_blocks: u32,
    w: u64,
    c_next: u64,
) -> (Vec<Break>, u64) {
    let found = || {
        scans
            .iter()
            .filter_map(|s| s.walk.as_ref())
            .flat_map(|w| w.chunks.iter())
    };
    // (class, predecessor) of every found chunk that names one
    let named: HashSet<(u8, u64)> = found()
        .filter_map(|f| f.header.chain)
        .filter(|c| c.prev_seq != 0)
        .map(|c| (c.class, c.prev_seq))
        .collect();
    let mut out = Vec::new();
    let mut below = 0;
    for walk in scans.iter().filter_map(|s| s.walk.as_ref()) {
        for b in &walk.bad {
            if !matches!(b.kind, BadKind::Header { .. }) || b.before.is_some() {
                continue;
            }
            // a chunk fits only while 2 blocks are left (`Core::open_chunk`)
            // MUTANT: chain-room-unchecked s|segment_blocks.saturating_sub(b.pos) < 2|false|
            if segment_blocks.saturating_sub(b.pos) < 2 {
                continue;
            }
            let Some(x) = walk
                .chunks
                .iter()
                .find(|f| f.pos + f.header.total_blocks() == b.pos)
            else {
                continue;
            };
            let Some(cx) = x.header.chain else {
                continue;
            };
            // MUTANT: chain-unchecked s|named.contains(&(cx.class, x.seq))|true|
            if named.contains(&(cx.class, x.seq)) {
                continue; // X's successor is intact elsewhere: S is not it
            }
            let bound = found()
                .filter_map(|f| f.header.chain.map(|c| (f.seq, c)))
                .filter(|(_, c)| c.class == cx.class && c.prev_seq > x.seq)
                .min_by_key(|(_, c)| c.prev_seq);
            let bound = bound.filter(|(_, c)| c.prev_seq < w);
            // the successor is at most the bound: below the checkpoint it
            // may have gone to a segment since reused (module comment)
            // MUTANT: chain-below-checkpoint s|c.prev_seq < c_next|false|
            if bound.is_some_and(|(_, c)| c.prev_seq < c_next) {
                below += 1;
                continue;
            }
            if let Some((n, c)) = bound {
                out.push(Break {
                    segment: b.segment,
                    pos: b.pos,
                    after: x.seq,
                    named_by: n,
                    bound: c.prev_seq,
                    why: b.why.clone(),
                });
            }
        }
    }
    (out, below)
}

/// Whether the rule may run: the loaded checkpoint is the newest one written
/// (module comment). After a slot fallback or a full rebuild, chunks from
/// before a mount are walked again, and a class's first chunk after that
/// mount named no predecessor: the rule's premise does not hold.
pub fn applies(rules: &RecoveryRules) -> bool {
    // MUTANT: chain-after-slot-fallback s|rules.checkpoint_slot_fallback == 0|true|
    rules.checkpoint_slot_fallback == 0
        && rules.full_rebuild == 0
        && rules.checkpoint_newer_slot_ignored == 0
}

/// Add the chain's breaks to what `judge_spans` found (`damage`: "place:
/// why" lines; `spans` for salvage), each stretch once.
pub fn extend(
    scans: &[SegScan],
    segment_blocks: u32,
    w: u64,
    c_next: u64,
    rules: &mut RecoveryRules,
    damage: &mut Vec<String>,
    spans: &mut Vec<Span>,
) {
    if !applies(rules) {
        return;
    }
    let (breaks, below) = breaks_counted(scans, segment_blocks, w, c_next);
    rules.chain_successor_below_checkpoint += below;
    for b in breaks {
        let at = format!("segment {} block {}", b.segment, b.pos);
        let known = damage
            .iter()
            .any(|d| d.starts_with(&format!("{at}:")) || d.starts_with(&format!("{at},")));
        if known {
            continue; // its seq field already said it was durable
        }
        let place = b.place();
        damage.push(format!("{place}: {}", b.why));
        spans.push(Span {
            seq_hi: b.bound,
            entries: None,
            segment: b.segment,
            place,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Bad, Found, Stop, Walk};
    use super::*;
    use crate::format::chunk::{Chain, ChunkHeader, LsnRange, Stream};

    const SEG: u32 = 32;

    /// A found chunk of `blocks` blocks at `pos` of `segment`, chained.
    fn found(segment: u32, pos: u32, blocks: u32, seq: u64, class: u8, prev: u64) -> Found {
        Found {
            seq,
            segment,
            pos,
            header: ChunkHeader {
                uuid: [1; 16],
                seq,
                segment,
                stream: Stream::User,
                timestamp_ns: 0,
                durable_seq: 0,
                data_blocks: blocks - 1,
                entries: Vec::new(),
                block_crcs: vec![0; blocks as usize - 1],
                lsn: Some(LsnRange::default()),
                chain: Some(Chain {
                    class,
                    prev_seq: prev,
                }),
                mixed_check: false,
            },
            fragments: Vec::new(),
        }
    }

    /// A segment walk: `chunks`, then (if `bad_at`) an unreadable header
    /// there with nothing valid after it.
    fn scan(segment: u32, chunks: Vec<Found>, bad_at: Option<u32>) -> SegScan {
        let after = chunks.last().map(|f| f.seq);
        let bad = bad_at
            .map(|pos| Bad {
                segment,
                pos,
                blocks: SEG - pos,
                kind: BadKind::Header { hint: None },
                after,
                before: None,
                why: "chunk header: checksum".into(),
                entries: None,
            })
            .into_iter()
            .collect();
        SegScan {
            ours: true,
            walk: Some(Walk {
                valid_end: bad_at.unwrap_or(SEG),
                chunks,
                bad,
                stop: Stop::Tail,
            }),
            rules: Default::default(),
            healed: Vec::new(),
        }
    }

    /// Segment 3: X (seq 10, blocks 0..21), a damaged header at 21; segment
    /// 4 starts with N (seq 14) naming `prev` in class `class`.
    fn case(prev: u64, class: u8, bad_at: u32) -> Vec<SegScan> {
        vec![
            scan(3, vec![found(3, 0, bad_at, 10, 0, 9)], Some(bad_at)),
            scan(4, vec![found(4, 0, 5, 14, class, prev)], None),
        ]
    }

    #[test]
    fn a_damaged_successor_the_chain_bounds_below_w_is_a_break() {
        let b = breaks(&case(12, 0, 21), SEG, 15, 11);
        assert_eq!(b.len(), 1, "{b:?}");
        assert_eq!((b[0].segment, b[0].pos, b[0].after), (3, 21, 10));
        assert_eq!((b[0].named_by, b[0].bound), (14, 12));
        assert!(b[0].place().contains("seq at most 12"), "{}", b[0].place());
    }

    #[test]
    fn the_rule_is_silent_where_its_premise_does_not_hold() {
        // the bound is not below W: the successor may never have been flushed
        assert!(breaks(&case(12, 0, 21), SEG, 12, 11).is_empty());
        // X's successor is intact elsewhere (N names X itself)
        assert!(breaks(&case(10, 0, 21), SEG, 15, 11).is_empty());
        // N is of another class: it bounds nothing of X's chain
        assert!(breaks(&case(12, 1, 21), SEG, 15, 11).is_empty());
        // no room after X: the engine closed X's segment, the stretch is not
        // its successor
        assert!(breaks(&case(12, 0, 31), SEG, 15, 11).is_empty());
        // the stretch does not follow X directly
        let mut s = case(12, 0, 21);
        if let Some(w) = s[0].walk.as_mut() {
            w.bad[0].pos = 23;
        }
        assert!(breaks(&s, SEG, 15, 11).is_empty());
        // no chain in X's header (v1, or a v2 build before it)
        let mut s = case(12, 0, 21);
        if let Some(w) = s[0].walk.as_mut() {
            w.chunks[0].header.chain = None;
        }
        assert!(breaks(&s, SEG, 15, 11).is_empty());
    }

    /// X's successor did not fit in X's segment (a compressed staged chunk)
    /// and went to a segment since freed and reused, so the first found
    /// chunk of the class names a predecessor below the loaded checkpoint;
    /// the stale bytes after X are not its successor.
    #[test]
    fn a_bound_below_the_checkpoint_proves_nothing_about_the_stretch() {
        // N (seq 14) names 12; the checkpoint reflects every seq < 13
        assert!(breaks(&case(12, 0, 21), SEG, 15, 13).is_empty());
        let mut r = RecoveryRules::default();
        let (mut damage, mut spans) = (Vec::new(), Vec::new());
        extend(
            &case(12, 0, 21),
            SEG,
            15,
            13,
            &mut r,
            &mut damage,
            &mut spans,
        );
        assert!(damage.is_empty() && spans.is_empty());
        assert_eq!(r.chain_successor_below_checkpoint, 1);
        // the checkpoint reflects seqs < 12: the successor (<= 12) came after it
        assert_eq!(breaks(&case(12, 0, 21), SEG, 15, 12).len(), 1);
    }

    #[test]
    fn the_rule_waits_for_the_newest_checkpoint() {
        let mut r = RecoveryRules::default();
        assert!(applies(&r));
        r.checkpoint_slot_fallback = 1;
        assert!(!applies(&r));
        let mut damage = Vec::new();
        let mut spans = Vec::new();
        extend(
            &case(12, 0, 21),
            SEG,
            15,
            11,
            &mut r,
            &mut damage,
            &mut spans,
        );
        assert!(damage.is_empty() && spans.is_empty());
        let mut r = RecoveryRules::default();
        extend(
            &case(12, 0, 21),
            SEG,
            15,
            11,
            &mut r,
            &mut damage,
            &mut spans,
        );
        assert_eq!((damage.len(), spans.len(), spans[0].seq_hi), (1, 1, 12));
        // a stretch judge already called durable is not listed twice
        let mut damage = vec!["segment 3 block 21, seq 11 if its seq field is intact: x".into()];
        extend(
            &case(12, 0, 21),
            SEG,
            15,
            11,
            &mut r,
            &mut damage,
            &mut Vec::new(),
        );
        assert_eq!(damage.len(), 1, "{damage:?}");
    }
}
