//! The writer lease of a volume in an object store (issue 21 item 3;
//! docs/objects.md): epoch objects `epoch/E` created with the store's
//! conditional create, so that of two writers racing for one volume exactly
//! one gets each epoch, and every object a writer creates carries its epoch
//! in its name (`format::objname`).
//!
//! Invariant: a writer holds epoch E only if its own `put_new` of `epoch/E`
//! succeeded (the store refuses a second create of the same name). A taker
//! that finds the newest epoch not released (no `release/E`) refuses, naming
//! the holder, unless it is told to take over (the holder is known gone);
//! then it creates the next epoch, and the old writer, whose names carry the
//! older epoch, finds itself superseded at its next `check`. What a reader
//! does with a superseded writer's late objects is recovery's rule
//! (docs/objects.md); this module only hands out epochs.

use crate::format::objname::{ObjKind, ObjName};
use crate::media::objects::{ObjError, ObjectStore};
use std::fmt;

/// Who takes a lease: written into the epoch object, shown to the loser.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub host: String,
    pub pid: u32,
    /// Unix time of the take, milliseconds.
    pub created_ms: u64,
    /// Random: two takes never write the same bytes (so a create sent twice
    /// is recognised as ours, and another's never is).
    pub nonce: u64,
    /// The lease term T this writer keeps (docs/objects.md §5.6): it
    /// mutates the store (uploads, deletes, checkpoint and log objects)
    /// only within T/2 of a lease check that found no newer epoch, and a
    /// taker that supersedes it waits 2T before it lists. Written into the
    /// epoch object so that the taker waits by the old writer's term, not
    /// its own. (Epoch objects without it: `DEFAULT_TERM_MS`.)
    pub term_ms: u64,
}

/// The lease term when neither `SLUICE_LEASE_TERM_MS` nor `set_term` says
/// otherwise: 30 s, the S3 client's request timeout (§5.6: an operation the
/// old writer sent must have landed or failed before the taker lists).
pub const DEFAULT_TERM_MS: u64 = 30_000;

static TERM_MS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Set the term this process's next leases carry (tests: a short one, so a
/// takeover's wait of 2T stays short).
pub fn set_term(t: std::time::Duration) {
    TERM_MS.store(
        (t.as_millis() as u64).max(1),
        std::sync::atomic::Ordering::Relaxed,
    );
}

/// The term this process's leases carry: `set_term`, else the environment's
/// `SLUICE_LEASE_TERM_MS`, else `DEFAULT_TERM_MS` (unit tests: 100 ms).
pub fn term_ms() -> u64 {
    match TERM_MS.load(std::sync::atomic::Ordering::Relaxed) {
        0 => std::env::var("SLUICE_LEASE_TERM_MS")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|&v| v > 0)
            .unwrap_or(if cfg!(test) { 100 } else { DEFAULT_TERM_MS }),
        t => t,
    }
}

impl Holder {
    /// This process, now.
    pub fn this_process() -> Holder {
        let ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        Holder {
            host: hostname(),
            pid: std::process::id(),
            created_ms: ms,
            nonce: rand::random(),
            term_ms: term_ms(),
        }
    }

    fn encode(&self, epoch: u64) -> Vec<u8> {
        format!(
            "sluice-lease 1\nepoch {epoch}\nhost {}\npid {}\ncreated_ms {}\nnonce {:016x}\nterm_ms {}\n",
            self.host, self.pid, self.created_ms, self.nonce, self.term_ms
        )
        .into_bytes()
    }

    /// Parse an epoch object; `epoch` must match its name.
    fn decode(bytes: &[u8], epoch: u64) -> Result<Holder, &'static str> {
        let text = std::str::from_utf8(bytes).map_err(|_| "not UTF-8")?;
        let mut lines = text.lines();
        if lines.next() != Some("sluice-lease 1") {
            return Err("not a sluice lease (first line)");
        }
        let mut field = |key: &str| -> Result<&str, &'static str> {
            let l = lines.next().ok_or("too short")?;
            l.strip_prefix(key)
                .and_then(|r| r.strip_prefix(' '))
                .ok_or("fields out of order")
        };
        let e: u64 = field("epoch")?.parse().map_err(|_| "bad epoch")?;
        if e != epoch {
            return Err("its epoch is not the one in its name");
        }
        let host = field("host")?.to_string();
        let pid = field("pid")?.parse().map_err(|_| "bad pid")?;
        let created_ms = field("created_ms")?.parse().map_err(|_| "bad time")?;
        let nonce = u64::from_str_radix(field("nonce")?, 16).map_err(|_| "bad nonce")?;
        // (added with fencing, §5.6: an older epoch object ends here)
        let term_ms = match lines.next() {
            None => DEFAULT_TERM_MS,
            Some(l) => l
                .strip_prefix("term_ms ")
                .and_then(|v| v.parse::<u64>().ok())
                .filter(|&v| v > 0)
                .ok_or("bad term")?,
        };
        Ok(Holder {
            host,
            pid,
            created_ms,
            nonce,
            term_ms,
        })
    }
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "host {} (pid {}) at {}",
            self.host,
            self.pid,
            crate::size::utc(self.created_ms)
        )
    }
}

/// Why no lease.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("volume is held by epoch {epoch} created by {holder}")]
    Held { epoch: u64, holder: Holder },
    #[error("epoch {mine} is superseded: epoch {newer} was taken since")]
    Superseded { mine: u64, newer: u64 },
    #[error("{name}: {why}")]
    BadObject { name: String, why: String },
    #[error(transparent)]
    Store(#[from] ObjError),
}

/// A taken epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub epoch: u64,
    pub holder: Holder,
}

/// The epochs in the store, ascending; a foreign name under `epoch/` is an
/// error (something else writes there).
pub fn epochs(store: &dyn ObjectStore) -> Result<Vec<u64>, LeaseError> {
    let mut out = Vec::new();
    for o in store.list(ObjKind::Epoch.dir())? {
        match ObjName::parse(&o.name) {
            Ok(ObjName::Epoch(e)) => out.push(e),
            Ok(_) => unreachable!("epoch/ names parse as epochs"),
            Err(e) => {
                return Err(LeaseError::BadObject {
                    name: o.name,
                    why: e.why.to_string(),
                })
            }
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// Who holds epoch `e` (reads its object).
pub fn holder_of(store: &dyn ObjectStore, e: u64) -> Result<Holder, LeaseError> {
    let name = ObjName::Epoch(e).encode();
    let bytes = store.get(&name)?;
    Holder::decode(&bytes, e).map_err(|why| LeaseError::BadObject {
        name,
        why: why.to_string(),
    })
}

/// Take the next epoch of the volume in `store` for `me`. Refuses while the
/// newest epoch is not released, unless `takeover` (its holder is known to be
/// gone); refuses when another taker created the next epoch first.
pub fn take(store: &dyn ObjectStore, me: &Holder, takeover: bool) -> Result<Lease, LeaseError> {
    let newest = epochs(store)?.last().copied().unwrap_or(0);
    // MUTANT: lease-ignores-holder s|if newest > 0 && !takeover {|if false {|
    if newest > 0 && !takeover {
        let released = match store.head(&ObjName::Release(newest).encode()) {
            Ok(_) => true,
            Err(ObjError::NotFound(_)) => false,
            Err(e) => return Err(e.into()),
        };
        if !released {
            return Err(LeaseError::Held {
                epoch: newest,
                holder: holder_of(store, newest)?,
            });
        }
    }
    let epoch = newest.checked_add(1).ok_or_else(|| LeaseError::BadObject {
        name: ObjName::Epoch(newest).encode(),
        why: "the last possible epoch".into(),
    })?;
    match store.put_new(&ObjName::Epoch(epoch).encode(), &me.encode(epoch)) {
        Ok(()) => Ok(Lease {
            epoch,
            holder: me.clone(),
        }),
        // MUTANT: lease-exists-wins s|Err(ObjError::Exists(_)) => Err(LeaseError::Held {|Err(ObjError::Exists(_)) => Ok(Lease { epoch, holder: me.clone() }), Err(ObjError::Invalid(_)) => Err(LeaseError::Held {|
        Err(ObjError::Exists(_)) => Err(LeaseError::Held {
            epoch,
            holder: holder_of(store, epoch)?,
        }),
        Err(e) => Err(e.into()),
    }
}

impl Lease {
    /// Ok while no newer epoch exists: one HEAD of `epoch/E+1` (every
    /// taker creates the newest epoch + 1 and epoch objects are never
    /// deleted, so a newer epoch exists iff E+1 does). Relies on the
    /// store's HEAD seeing every create that returned before it was sent
    /// (S3's strong read-after-write, a RADOS stat). `objseg::fence`
    /// gates every write to the store on it.
    pub fn check(&self, store: &dyn ObjectStore) -> Result<(), LeaseError> {
        let next = self.epoch.saturating_add(1);
        // MUTANT: lease-check-always-ok s|match store.head(&ObjName::Epoch(next).encode()) {|match Err::<u64, ObjError>(ObjError::NotFound(String::new())) {|
        match store.head(&ObjName::Epoch(next).encode()) {
            Ok(_) => Err(LeaseError::Superseded {
                mine: self.epoch,
                newer: epochs(store)?.last().copied().unwrap_or(next).max(next),
            }),
            Err(ObjError::NotFound(_)) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// The lease term T (ms) this writer keeps.
    pub fn term(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.holder.term_ms)
    }

    /// Mark the epoch released (a clean close): the next taker needs no
    /// takeover.
    pub fn release(self, store: &dyn ObjectStore) -> Result<(), LeaseError> {
        self.check(store)?;
        store.put_new(
            &ObjName::Release(self.epoch).encode(),
            &self.holder.encode(self.epoch),
        )?;
        Ok(())
    }

    /// The name of this writer's segment `seq`.
    pub fn segment(&self, seq: u64) -> ObjName {
        ObjName::Segment {
            seq,
            epoch: self.epoch,
        }
    }

    /// The name of this writer's checkpoint covering the log below `seq`.
    pub fn checkpoint(&self, seq: u64) -> ObjName {
        ObjName::Checkpoint {
            seq,
            epoch: self.epoch,
        }
    }
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty() && !s.contains(char::is_whitespace))
        .unwrap_or_else(|| "unknown-host".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::media::objects::MemObjects;
    use std::sync::{Arc, Barrier};

    fn who(host: &str) -> Holder {
        Holder {
            host: host.into(),
            pid: 42,
            created_ms: 1_700_000_000_123,
            nonce: rand::random(),
            term_ms: 100,
        }
    }

    #[test]
    fn the_first_taker_gets_epoch_one_and_a_second_is_refused_naming_it() {
        let s = MemObjects::new();
        let a = take(&s, &who("alpha"), false).unwrap();
        assert_eq!(a.epoch, 1);
        let e = take(&s, &who("beta"), false).unwrap_err();
        assert!(
            matches!(&e, LeaseError::Held { epoch: 1, holder } if holder.host == "alpha"),
            "{e}"
        );
        let msg = e.to_string();
        assert!(
            msg.starts_with("volume is held by epoch 1 created by host alpha (pid 42) at 2023-11-14T22:13:20.123Z"),
            "{msg}"
        );
        a.check(&s).unwrap();
    }

    #[test]
    fn release_lets_the_next_take_without_takeover() {
        let s = MemObjects::new();
        take(&s, &who("alpha"), false).unwrap().release(&s).unwrap();
        let b = take(&s, &who("beta"), false).unwrap();
        assert_eq!(b.epoch, 2);
        assert_eq!(epochs(&s).unwrap(), [1, 2]);
    }

    #[test]
    fn takeover_supersedes_the_old_writer() {
        let s = MemObjects::new();
        let a = take(&s, &who("alpha"), false).unwrap();
        let b = take(&s, &who("beta"), true).unwrap();
        assert_eq!(b.epoch, 2);
        assert!(matches!(
            a.check(&s),
            Err(LeaseError::Superseded { mine: 1, newer: 2 })
        ));
        // a superseded writer cannot release (nor mark the volume free)
        assert!(a.release(&s).is_err());
        assert!(s.head(&ObjName::Release(1).encode()).is_err());
        assert_eq!(
            b.segment(7).encode(),
            "seg/00000000000000000007-00000000000000000002"
        );
        assert_eq!(b.checkpoint(9).epoch(), 2);
    }

    #[test]
    fn racing_takers_get_one_winner_per_epoch() {
        for round in 0..50 {
            let s = Arc::new(MemObjects::new());
            let go = Arc::new(Barrier::new(4));
            let hs: Vec<_> = (0..4)
                .map(|i| {
                    let (s, go) = (s.clone(), go.clone());
                    std::thread::spawn(move || {
                        go.wait();
                        take(&*s, &who(&format!("h{i}")), true)
                    })
                })
                .collect();
            let rs: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
            let won: Vec<u64> = rs
                .iter()
                .filter_map(|r| r.as_ref().ok())
                .map(|l| l.epoch)
                .collect();
            let mut uniq = won.clone();
            uniq.sort_unstable();
            uniq.dedup();
            assert_eq!(
                uniq.len(),
                won.len(),
                "round {round}: an epoch won twice: {won:?}"
            );
            assert!(!won.is_empty(), "round {round}: nobody won");
            for r in &rs {
                if let Err(e) = r {
                    assert!(matches!(e, LeaseError::Held { .. }), "round {round}: {e}");
                }
            }
            // the store's holder of each won epoch is its winner
            for l in rs.iter().flatten() {
                assert_eq!(holder_of(&*s, l.epoch).unwrap(), l.holder);
            }
        }
    }

    /// A store where another taker's create of an epoch lands between this
    /// taker's list and its own create (the race, made certain).
    struct Overtaken {
        inner: MemObjects,
        rival: Holder,
    }

    impl ObjectStore for Overtaken {
        fn put_new(&self, name: &str, bytes: &[u8]) -> Result<(), ObjError> {
            if let Ok(ObjName::Epoch(e)) = ObjName::parse(name) {
                self.inner.put_new(name, &self.rival.encode(e))?;
            }
            self.inner.put_new(name, bytes)
        }
        fn get_range(&self, n: &str, r: std::ops::Range<u64>) -> Result<Vec<u8>, ObjError> {
            self.inner.get_range(n, r)
        }
        fn get(&self, n: &str) -> Result<Vec<u8>, ObjError> {
            self.inner.get(n)
        }
        fn head(&self, n: &str) -> Result<u64, ObjError> {
            self.inner.head(n)
        }
        fn list(&self, p: &str) -> Result<Vec<crate::media::objects::ObjectInfo>, ObjError> {
            self.inner.list(p)
        }
        fn delete(&self, n: &str) -> Result<(), ObjError> {
            self.inner.delete(n)
        }
        fn describe(&self) -> String {
            "overtaken".into()
        }
    }

    #[test]
    fn a_taker_overtaken_between_list_and_create_loses_naming_the_winner() {
        let s = Overtaken {
            inner: MemObjects::new(),
            rival: who("rival"),
        };
        for takeover in [false, true] {
            let e = take(&s, &who("me"), takeover).unwrap_err();
            assert!(
                matches!(&e, LeaseError::Held { holder, .. } if holder.host == "rival"),
                "{e}"
            );
        }
        // the rival holds epochs 1 (first try) and 2 (the takeover's try)
        assert_eq!(epochs(&s.inner).unwrap(), [1, 2]);
    }

    #[test]
    fn foreign_or_damaged_epoch_objects_are_errors() {
        let s = MemObjects::new();
        s.put_new("epoch/1", b"x").unwrap();
        assert!(matches!(
            take(&s, &who("a"), false),
            Err(LeaseError::BadObject { .. })
        ));
        let s = MemObjects::new();
        let a = take(&s, &who("a"), false).unwrap();
        s.poke(
            &ObjName::Epoch(a.epoch).encode(),
            b"sluice-lease 1\nepoch 2\n".to_vec(),
        );
        let e = take(&s, &who("b"), false).unwrap_err();
        assert!(
            matches!(&e, LeaseError::BadObject { why, .. } if why.contains("not the one in its name")),
            "{e}"
        );
    }

    #[test]
    fn an_unreachable_store_is_an_error_not_a_lease() {
        let s = MemObjects::new();
        s.set_unreachable(true);
        assert!(matches!(
            take(&s, &who("a"), false),
            Err(LeaseError::Store(ObjError::Store(_)))
        ));
    }

    #[test]
    fn holders_round_trip() {
        let h = Holder::this_process();
        assert_eq!(Holder::decode(&h.encode(5), 5).unwrap(), h);
        assert!(Holder::decode(&h.encode(5), 6).is_err());
        assert!(Holder::decode(b"", 1).is_err());
        // an epoch object from before the term was written: the default
        let old = b"sluice-lease 1\nepoch 3\nhost h\npid 1\ncreated_ms 5\nnonce 00000000000000ff\n";
        assert_eq!(Holder::decode(old, 3).unwrap().term_ms, DEFAULT_TERM_MS);
        let bad = b"sluice-lease 1\nepoch 3\nhost h\npid 1\ncreated_ms 5\nnonce 00000000000000ff\nterm_ms x\n";
        assert!(Holder::decode(bad, 3).is_err());
    }
}
