//! Object names of a volume in an object store (issue 21; docs/objects.md):
//! pure functions from (kind, epoch, seq) to a name and back. No IO.
//!
//! Names, relative to the volume's prefix, numbers as 20 decimal digits
//! (every u64 fits; zero-padded, so byte order is number order):
//!
//! - `epoch/EEEEEEEEEEEEEEEEEEEE`: the writer lease of epoch E (>= 1).
//! - `release/EEEEEEEEEEEEEEEEEEEE`: epoch E's writer closed cleanly.
//! - `seg/SSSSSSSSSSSSSSSSSSSS-EEEEEEEEEEEEEEEEEEEE`: the segment of sequence
//!   number S, written by epoch E.
//! - `ckpt/SSSSSSSSSSSSSSSSSSSS-EEEEEEEEEEEEEEEEEEEE`: a checkpoint covering
//!   the log below S, written by epoch E.
//! - `log/LLLLLLLLLLLLLLLLLLLL-EEEEEEEEEEEEEEEEEEEE`: log object number L of
//!   epoch E (the store-durable mode's FLUSH log, `objseg::durable`).
//!
//! Invariant: the mapping is a bijection between `ObjName` values (epoch >= 1)
//! and the names `parse` accepts: `parse(n.encode()) == Ok(n)` and a name
//! `parse` accepts is exactly the `encode` of what it returned. Anything else
//! (another program's object, a different width, a sign, a number past
//! u64::MAX, epoch 0) is refused, never guessed at. Listing a kind's
//! directory lists its objects in (seq, epoch) order.

use std::fmt;

/// Digits of every number in a name.
pub const DIGITS: usize = 20;

/// One object of a volume.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ObjName {
    Epoch(u64),
    Release(u64),
    Segment { seq: u64, epoch: u64 },
    Checkpoint { seq: u64, epoch: u64 },
    Log { seq: u64, epoch: u64 },
}

/// The kinds, by their directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjKind {
    Epoch,
    Release,
    Segment,
    Checkpoint,
    Log,
}

impl ObjKind {
    /// The directory prefix of this kind's names (what to list).
    pub fn dir(self) -> &'static str {
        match self {
            ObjKind::Epoch => "epoch/",
            ObjKind::Release => "release/",
            ObjKind::Segment => "seg/",
            ObjKind::Checkpoint => "ckpt/",
            ObjKind::Log => "log/",
        }
    }
}

/// Why a name is not one of ours.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name:?} is not a sluice object name: {why}")]
pub struct NameError {
    pub name: String,
    pub why: &'static str,
}

impl ObjName {
    pub fn kind(&self) -> ObjKind {
        match self {
            ObjName::Epoch(_) => ObjKind::Epoch,
            ObjName::Release(_) => ObjKind::Release,
            ObjName::Segment { .. } => ObjKind::Segment,
            ObjName::Checkpoint { .. } => ObjKind::Checkpoint,
            ObjName::Log { .. } => ObjKind::Log,
        }
    }

    /// The epoch of the writer that created (or, for a lease, is) this object.
    pub fn epoch(&self) -> u64 {
        match *self {
            ObjName::Epoch(e) | ObjName::Release(e) => e,
            ObjName::Segment { epoch, .. }
            | ObjName::Checkpoint { epoch, .. }
            | ObjName::Log { epoch, .. } => epoch,
        }
    }

    /// The sequence number (segments, checkpoints).
    pub fn seq(&self) -> Option<u64> {
        match *self {
            ObjName::Segment { seq, .. }
            | ObjName::Checkpoint { seq, .. }
            | ObjName::Log { seq, .. } => Some(seq),
            _ => None,
        }
    }

    /// The name. Panics on epoch 0, which no writer has (a caller bug).
    pub fn encode(&self) -> String {
        assert!(self.epoch() >= 1, "epoch 0 names no writer: {self:?}");
        let d = self.kind().dir();
        match *self {
            ObjName::Epoch(e) | ObjName::Release(e) => format!("{d}{e:020}"),
            ObjName::Segment { seq, epoch }
            | ObjName::Checkpoint { seq, epoch }
            | ObjName::Log { seq, epoch } => {
                format!("{d}{seq:020}-{epoch:020}")
            }
        }
    }

    /// Parse a name relative to the volume's prefix.
    pub fn parse(name: &str) -> Result<ObjName, NameError> {
        let err = |why| NameError {
            name: name.to_string(),
            why,
        };
        let (kind, rest) = [
            ObjKind::Epoch,
            ObjKind::Release,
            ObjKind::Segment,
            ObjKind::Checkpoint,
            ObjKind::Log,
        ]
        .into_iter()
        .find_map(|k| name.strip_prefix(k.dir()).map(|r| (k, r)))
        .ok_or_else(|| err("no known directory (epoch/, release/, seg/, ckpt/, log/)"))?;
        let n = match kind {
            ObjKind::Epoch => ObjName::Epoch(number(rest).map_err(err)?),
            ObjKind::Release => ObjName::Release(number(rest).map_err(err)?),
            ObjKind::Segment | ObjKind::Checkpoint | ObjKind::Log => {
                if rest.len() != 2 * DIGITS + 1 || rest.as_bytes()[DIGITS] != b'-' {
                    return Err(err("expected 20 digits, '-', 20 digits"));
                }
                let seq = number(&rest[..DIGITS]).map_err(err)?;
                let epoch = number(&rest[DIGITS + 1..]).map_err(err)?;
                match kind {
                    ObjKind::Segment => ObjName::Segment { seq, epoch },
                    ObjKind::Log => ObjName::Log { seq, epoch },
                    _ => ObjName::Checkpoint { seq, epoch },
                }
            }
        };
        // MUTANT: objname-accepts-epoch-zero s|n.epoch() == 0|false|
        if n.epoch() == 0 {
            return Err(err("epoch 0"));
        }
        Ok(n)
    }
}

impl fmt::Display for ObjName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.encode())
    }
}

/// Exactly 20 ASCII digits, at most u64::MAX.
fn number(s: &str) -> Result<u64, &'static str> {
    if s.len() != DIGITS || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err("expected exactly 20 digits");
    }
    s.parse::<u64>().map_err(|_| "number past u64::MAX")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for n in [
            ObjName::Epoch(1),
            ObjName::Epoch(u64::MAX),
            ObjName::Release(7),
            ObjName::Segment { seq: 0, epoch: 1 },
            ObjName::Segment {
                seq: u64::MAX,
                epoch: u64::MAX,
            },
            ObjName::Checkpoint {
                seq: 12345,
                epoch: 3,
            },
            ObjName::Log { seq: 0, epoch: 2 },
        ] {
            let s = n.encode();
            assert_eq!(ObjName::parse(&s), Ok(n), "{s}");
            assert_eq!(n.to_string(), s);
        }
        assert_eq!(
            ObjName::Segment { seq: 42, epoch: 3 }.encode(),
            "seg/00000000000000000042-00000000000000000003"
        );
        assert_eq!(ObjName::Epoch(9).encode(), "epoch/00000000000000000009");
    }

    #[test]
    fn byte_order_is_number_order() {
        let mut v: Vec<(u64, u64)> = vec![
            (10, 1),
            (9, 2),
            (u64::MAX, 1),
            (100, 1),
            (9, 1),
            (1 << 40, 5),
        ];
        let mut names: Vec<String> = v
            .iter()
            .map(|&(seq, epoch)| ObjName::Segment { seq, epoch }.encode())
            .collect();
        names.sort();
        v.sort();
        let back: Vec<(u64, u64)> = names
            .iter()
            .map(|s| match ObjName::parse(s).unwrap() {
                ObjName::Segment { seq, epoch } => (seq, epoch),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(back, v);
    }

    #[test]
    fn foreign_names_are_refused() {
        let good = "seg/00000000000000000042-00000000000000000003";
        ObjName::parse(good).unwrap();
        for bad in [
            "",
            "seg/",
            "seg/42-3",
            "seg/0000000000000000042-00000000000000000003",
            "seg/000000000000000000042-00000000000000000003",
            "seg/00000000000000000042_00000000000000000003",
            "seg/00000000000000000042-00000000000000000003/x",
            "seg/00000000000000000042-0000000000000000000a",
            "seg/+0000000000000000042-00000000000000000003",
            "seg/00000000000000000042-00000000000000000000",
            "seg/99999999999999999999-00000000000000000001",
            "SEG/00000000000000000042-00000000000000000003",
            "segment/00000000000000000042-00000000000000000003",
            "ckpt/00000000000000000042",
            "epoch/00000000000000000000",
            "epoch/18446744073709551616",
            "epoch/1",
            "epoch/ 0000000000000000001",
            "epoch/00000000000000000001-00000000000000000001",
            "release/",
            "other/00000000000000000001",
            "x.log",
        ] {
            assert!(ObjName::parse(bad).is_err(), "{bad:?} accepted");
        }
        // the largest u64 is fine, one more is not
        assert_eq!(
            ObjName::parse("epoch/18446744073709551615"),
            Ok(ObjName::Epoch(u64::MAX))
        );
    }

    #[test]
    fn any_accepted_name_is_canonical() {
        // every name parse accepts prints back to itself: no two spellings
        // of one object
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(21);
        let alphabet = b"0123456789-/sepgockhraltx+ ";
        let mut accepted = 0;
        for i in 0..200_000 {
            let base = ["seg/", "ckpt/", "epoch/", "release/"][i % 4];
            let len = rng.gen_range(0..45);
            let mut s = base.to_string();
            for _ in 0..len {
                let c = if rng.gen_bool(0.9) {
                    b'0' + rng.gen_range(0..10)
                } else {
                    alphabet[rng.gen_range(0..alphabet.len())]
                };
                s.push(c as char);
            }
            if let Ok(n) = ObjName::parse(&s) {
                assert_eq!(n.encode(), s);
                accepted += 1;
            }
        }
        assert!(accepted > 0, "the generator never made a valid name");
    }

    #[test]
    #[should_panic(expected = "epoch 0")]
    fn epoch_zero_is_a_caller_bug() {
        let _ = ObjName::Epoch(0).encode();
    }
}
