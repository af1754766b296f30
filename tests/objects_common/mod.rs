//! The object-store contract, checked the same way on every real store
//! (tests/objects_s3.rs on SeaweedFS, tests/objects_rados.rs on Ceph): each
//! check takes `store(prefix)`, a new client rooted at `prefix` (another
//! host, as far as the store can tell).
#![allow(dead_code)]

use sluice::format::objname::ObjName;
use sluice::lease::{self, Holder, LeaseError};
use sluice::media::objects::{ObjError, ObjectStore};
use std::sync::{Arc, Barrier};

/// A client rooted at a prefix, shareable with threads.
pub type Clients = Arc<dyn Fn(&str) -> Box<dyn ObjectStore> + Send + Sync>;

/// Bytes that differ at every offset and between objects.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// 1,205 segment names created out of order from 6 threads list complete and
/// sorted (S3 answers 1,000 names a page), scoped to their prefix.
pub fn list_sorted_and_scoped(store: &Clients) {
    const N: u64 = 1205;
    let mut seqs: Vec<u64> = (0..N).map(|i| (i * 7919) % N).collect();
    seqs.reverse();
    let hs: Vec<_> = seqs
        .chunks(N.div_ceil(6) as usize)
        .map(|c| {
            let (store, c) = (store.clone(), c.to_vec());
            std::thread::spawn(move || {
                let s = store("t/list");
                for seq in c {
                    let n = ObjName::Segment { seq, epoch: 1 }.encode();
                    s.put_new(&n, &seq.to_le_bytes()).unwrap();
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    let s = store("t/list");
    // neighbours the prefix must not catch
    s.put_new("segx", b"1").unwrap();
    s.put_new("seg-other/1", b"1").unwrap();
    store("t/list2").put_new("seg/x", b"1").unwrap();
    let all = s.list("seg/").unwrap();
    let want: Vec<String> = (0..N)
        .map(|seq| ObjName::Segment { seq, epoch: 1 }.encode())
        .collect();
    let names: Vec<String> = all.iter().map(|o| o.name.clone()).collect();
    assert_eq!(names.len(), want.len(), "listed {} of {N}", names.len());
    assert_eq!(names, want, "the listing is not the sorted set of names");
    assert!(all.iter().all(|o| o.len == 8));
    // a string prefix inside a directory: seq 1000..1099
    let part = s.list("seg/000000000000000010").unwrap();
    assert_eq!(part.len(), 100);
    assert_eq!(
        part[0].name,
        ObjName::Segment {
            seq: 1000,
            epoch: 1
        }
        .encode()
    );
    // the whole root, neighbours included, still sorted
    let root = s.list("").unwrap();
    assert_eq!(root.len() as u64, N + 2);
    assert!(root.windows(2).all(|p| p[0].name < p[1].name));
}

/// Delete removes, is idempotent, and a deleted name can be created again.
pub fn delete_is_idempotent(store: &Clients) {
    let s = store("t/delete");
    s.put_new("a/1", b"one").unwrap();
    s.put_new("a/2", b"two").unwrap();
    s.delete("a/1").unwrap();
    assert!(matches!(s.get("a/1"), Err(ObjError::NotFound(_))));
    assert!(matches!(s.head("a/1"), Err(ObjError::NotFound(_))));
    s.delete("a/1").unwrap();
    let names: Vec<_> = s.list("a/").unwrap().into_iter().map(|o| o.name).collect();
    assert_eq!(names, ["a/2"]);
    assert_eq!(s.get("a/2").unwrap(), b"two");
    // a deleted name can be created again (segment names never are: their
    // sequence numbers only rise; this is the store's behaviour)
    s.put_new("a/1", b"again").unwrap();
    assert_eq!(s.get("a/1").unwrap(), b"again");
}

/// Two hosts race for one volume's lease, `rounds` times: exactly one wins
/// epoch 1, the other is told who holds it.
pub fn lease_race(store: &Clients, rounds: u32) {
    for round in 0..rounds {
        let prefix = format!("t/lease/round-{round}");
        let go = Arc::new(Barrier::new(2));
        let hs: Vec<_> = ["host-a", "host-b"]
            .into_iter()
            .map(|host| {
                let (store, go, prefix) = (store.clone(), go.clone(), prefix.clone());
                std::thread::spawn(move || {
                    let s = store(&prefix);
                    let me = Holder {
                        host: host.into(),
                        ..Holder::this_process()
                    };
                    go.wait();
                    (host, lease::take(&*s, &me, false))
                })
            })
            .collect();
        let rs: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
        let winners: Vec<_> = rs.iter().filter(|(_, r)| r.is_ok()).collect();
        assert_eq!(winners.len(), 1, "round {round}: {rs:?}");
        let (won_host, won) = winners[0];
        let won = won.as_ref().unwrap();
        assert_eq!(won.epoch, 1, "round {round}");
        for (host, r) in &rs {
            if let Err(e) = r {
                match e {
                    LeaseError::Held { epoch: 1, holder } => {
                        assert_eq!(&holder.host, won_host, "round {round}: {host} told {e}")
                    }
                    other => panic!("round {round}: {host} lost with {other}"),
                }
                let msg = e.to_string();
                assert!(
                    msg.starts_with(&format!(
                        "volume is held by epoch 1 created by host {won_host}"
                    )),
                    "{msg}"
                );
            }
        }
        let s = store(&prefix);
        assert_eq!(lease::epochs(&*s).unwrap(), [1], "round {round}");
        assert_eq!(lease::holder_of(&*s, 1).unwrap(), won.holder);
    }
}
