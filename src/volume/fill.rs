//! The FLUSH fill (issue 21; docs/intent-log.md §4.14, docs/objects.md
//! §4.14): host FLUSHes that arrive while a FLUSH *group* is in flight (its
//! intent log record or sealed chunk being planned, written, and covered by
//! one media flush) do not plan records of their own: they wait, and the
//! next group, planned once by one of them (its leader) after all of them
//! arrived, covers every one with one record (or seal) and one media flush.
//! This is ZFS's `zil_commit_waiter` with one open lwb: a lone FLUSH issues
//! at once; FLUSHes that come while one is in flight fill the next, which
//! issues when the one in flight is done. Before it, each FLUSH planned and
//! wrote its own record on arrival (0.97 records per FLUSH at 32 writers,
//! docs/objects.md §4.13), and each waiter was woken on its own.
//!
//! Owns: which group is in flight, which is open (the one arrivals join),
//! whether the open one has its leader, and the words followers sleep on.
//! The FLUSH's writes and the group commit below it are `Shared::flush_path`
//! and `Commit::cover`, unchanged: a group is one ordinary FLUSH run by its
//! leader.
//!
//! Invariants kept here:
//! - at most one group is in flight; a group's leader plans (takes the
//!   engine lock in `flush_write`) only after it took the group, and no
//!   FLUSH joins a group once its leader took it, so every FLUSH of the
//!   group arrived (and every write acknowledged before it was appended)
//!   before the plan: the plan's record, or its seal, covers them;
//! - a follower returns Ok only once its group's leader's FLUSH returned Ok
//!   (its chunks and record durable: `Commit::cover`); when the group
//!   failed it runs a FLUSH of its own instead;
//! - a FLUSH that finds no group in flight leads at once (QD1 never waits
//!   for a timer or for anyone);
//! - one group's end wakes its followers and the next group's leader with
//!   one futex wake (they sleep on the word of the group's parity), and no
//!   one else: the next group's followers sleep on the other word.

use crate::error::Result;
use crate::stats::FlushPath;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};

#[derive(Default)]
struct State {
    /// A group runs (planned, being written or flushed), or has been handed
    /// to its leader (`successor`) who is on its way.
    inflight: bool,
    /// Id of the open group: the one FLUSHes arriving now join. The group
    /// in flight, when there is one, is `next - 1`.
    next: u64,
    /// The open group has its leader: the first FLUSH that joined it, asleep
    /// until the group in flight ends, then it leads.
    successor: bool,
}

pub(in crate::volume) struct Fill {
    st: Mutex<State>,
    /// Every group with id < `done` has ended (rises by one per group).
    done: AtomicU64,
    /// Id + 1 of the last group whose leader's FLUSH failed (0: none).
    failed: AtomicU64,
    /// The path the last group of each parity took (`FlushPath as u8`).
    path: [AtomicU8; 2],
    /// Followers of group g sleep on `words[g % 2]`; g's end bumps it.
    words: [AtomicU32; 2],
}

impl Fill {
    pub fn new() -> Fill {
        Fill {
            st: Mutex::new(State::default()),
            done: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            path: [AtomicU8::new(0), AtomicU8::new(0)],
            words: [AtomicU32::new(0), AtomicU32::new(0)],
        }
    }

    /// Run one host FLUSH through the fill. `lead` is the FLUSH itself
    /// (`Shared::flush_path`); it runs here when this FLUSH leads a group,
    /// and also when this FLUSH followed a group that failed. `joined` is
    /// called once when the FLUSH joins a group as a follower (counted).
    pub fn flush(
        &self,
        lead: &dyn Fn() -> Result<FlushPath>,
        joined: &dyn Fn(),
    ) -> Result<FlushPath> {
        let mut s = self.st.lock();
        if !s.inflight {
            // nothing in flight: lead at once
            s.inflight = true;
            let id = s.next;
            s.next += 1;
            drop(s);
            return self.lead(id, lead);
        }
        let id = s.next;
        if !s.successor {
            // the open group's first FLUSH: its leader once `id - 1` ends
            // (that end hands the group over: `inflight` stays set)
            s.successor = true;
            drop(s);
            joined();
            self.wait_done(id - 1);
            return self.lead(id, lead);
        }
        drop(s);
        joined();
        self.wait_done(id);
        // MUTANT: fill-failed-group-acked s|if self.failed.load(Ordering::Acquire) > id {|if false {|
        if self.failed.load(Ordering::Acquire) > id {
            // the group failed (or a later one, which is no worse to
            // assume): the FLUSH answers for itself
            return lead();
        }
        Ok(match self.path[(id % 2) as usize].load(Ordering::Acquire) {
            0 => FlushPath::Log,
            _ => FlushPath::Seal,
        })
    }

    /// Lead group `id`: run the FLUSH, then end the group (also on unwind,
    /// so no follower sleeps forever behind a panic).
    fn lead(&self, id: u64, lead: &dyn Fn() -> Result<FlushPath>) -> Result<FlushPath> {
        struct End<'a> {
            fill: &'a Fill,
            id: u64,
            ok: bool,
        }
        impl Drop for End<'_> {
            fn drop(&mut self) {
                self.fill.end(self.id, self.ok);
            }
        }
        let mut end = End {
            fill: self,
            id,
            ok: false,
        };
        let r = lead();
        if let Ok(p) = &r {
            let code = match p {
                FlushPath::Log => 0,
                FlushPath::Seal => 1,
            };
            self.path[(id % 2) as usize].store(code, Ordering::Release);
            end.ok = true;
        }
        drop(end);
        r
    }

    /// Group `id` ended (`ok`: its FLUSH returned Ok): hand the open group
    /// to its leader if it has one, then release `id`'s followers and that
    /// leader with one wake.
    fn end(&self, id: u64, ok: bool) {
        if !ok {
            self.failed.fetch_max(id + 1, Ordering::AcqRel);
        }
        {
            let mut s = self.st.lock();
            debug_assert_eq!(s.next, id + 1, "fill: group {id} ended out of turn");
            if s.successor {
                // the open group is in flight from now on, led by its
                // first FLUSH; arrivals join the one after it
                s.successor = false;
                s.next += 1;
            } else {
                s.inflight = false;
            }
        }
        self.done.store(id + 1, Ordering::Release);
        let w = &self.words[(id % 2) as usize];
        w.fetch_add(1, Ordering::Release);
        futex_wake_all(w);
    }

    /// Sleep until group `id` has ended.
    fn wait_done(&self, id: u64) {
        let w = &self.words[(id % 2) as usize];
        loop {
            // the word before the check: an end between the two changes
            // the word, and the futex wait then returns at once
            let seen = w.load(Ordering::Acquire);
            // MUTANT: fill-follower-not-waiting s|if self.done.load(Ordering::Acquire) > id {|if true {|
            if self.done.load(Ordering::Acquire) > id {
                return;
            }
            futex_wait(w, seen);
        }
    }
}

/// Sleep while `word` holds `seen` (or until a wake; spurious returns are
/// the caller's loop's business).
fn futex_wait(word: &AtomicU32, seen: u32) {
    // SAFETY: FUTEX_WAIT_PRIVATE on a live, aligned u32 of this process;
    // no timeout; the kernel only reads the word.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            seen,
            std::ptr::null::<libc::timespec>(),
        );
    }
}

/// Wake every thread asleep on `word`, in one system call.
fn futex_wake_all(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE_PRIVATE on a live, aligned u32 of this process.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            i32::MAX,
        );
    }
}
