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
//!   one else: the next group's followers sleep on the other word; an end
//!   with no sleeper makes no system call.

use crate::error::Result;
use crate::stats::FlushPath;
use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};

/// A FLUSH's answer when it parks in the open group (`Fill::flush_then`):
/// run once, by the thread that led its group, after that group's FLUSH
/// returned.
pub(in crate::volume) type Answer = Box<dyn FnOnce(Result<FlushPath>) + Send>;

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
    /// Answers of FLUSHes parked in the open group (`flush_then`): whoever
    /// leads it answers them after its FLUSH.
    parked: Vec<Answer>,
    /// The parked answers of the group in flight (moved from `parked` when
    /// it was handed over), for its leader to answer.
    group_parked: Vec<Answer>,
    /// FLUSHes that joined the open group (its leader not counted).
    open_members: u32,
    /// FLUSHes that joined the group in flight, moved from `open_members`
    /// at the handover (its leader not counted; 0 for a group led on
    /// arrival), for its record's size limit (`Core::flush_plan`).
    group_members: u32,
    /// The fill thread runs (background mode): a FLUSH may park, and an
    /// open group of parked FLUSHes alone is led by it.
    thread: bool,
    /// The group handed to the fill thread (its id), not yet taken.
    handed: Option<u64>,
    /// The fill thread is to exit.
    stop: bool,
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
    /// Threads between their last check of `done` and their return from
    /// the futex wait on `words[g % 2]`: an end with none skips the wake
    /// (a lone FLUSH pays no system call for it).
    sleepers: [AtomicU32; 2],
    /// The fill thread waits here for a group handed to it.
    thread_cv: Condvar,
}

impl Fill {
    pub fn new() -> Fill {
        Fill {
            st: Mutex::new(State::default()),
            done: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            path: [AtomicU8::new(0), AtomicU8::new(0)],
            words: [AtomicU32::new(0), AtomicU32::new(0)],
            sleepers: [AtomicU32::new(0), AtomicU32::new(0)],
            thread_cv: Condvar::new(),
        }
    }

    /// Run one host FLUSH through the fill. `lead` is the FLUSH itself
    /// (`Shared::flush_path`); it runs here when this FLUSH leads a group,
    /// and also when this FLUSH followed a group that failed. `joined` is
    /// called once when the FLUSH joins a group as a follower (counted).
    pub fn flush(
        &self,
        lead: &dyn Fn(u32) -> Result<FlushPath>,
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
            // (that end hands the group over: `inflight` stays set); the
            // leader counts itself
            s.successor = true;
            drop(s);
            joined();
            self.wait_done(id - 1);
            return self.lead(id, lead);
        }
        s.open_members += 1;
        drop(s);
        joined();
        self.wait_done(id);
        // MUTANT: fill-failed-group-acked s|if self.failed.load(Ordering::Acquire) > id {|if false {|
        if self.failed.load(Ordering::Acquire) > id {
            // the group failed (or a later one, which is no worse to
            // assume): the FLUSH answers for itself
            return lead(1);
        }
        Ok(match self.path[(id % 2) as usize].load(Ordering::Acquire) {
            0 => FlushPath::Log,
            _ => FlushPath::Seal,
        })
    }

    /// `flush`, answered through `answer`: when a group is in flight and
    /// the fill thread runs, the FLUSH parks in the open group and this
    /// returns at once (its thread, an NBD connection's, goes back to its
    /// socket); whoever leads that group answers it after the group's FLUSH
    /// returned. Else it runs as `flush` and answers here.
    /// `parked` is called once when the FLUSH parks (counted).
    pub fn flush_then(
        &self,
        answer: Answer,
        lead: &dyn Fn(u32) -> Result<FlushPath>,
        joined: &dyn Fn(),
        parked: &dyn Fn(),
    ) {
        let mut s = self.st.lock();
        if s.inflight && s.thread {
            // MUTANT: fill-parked-answered-at-once s|s.parked.push(answer);|answer(Ok(FlushPath::Log));|
            s.parked.push(answer);
            s.open_members += 1;
            drop(s);
            joined();
            parked();
            return;
        }
        drop(s);
        answer(self.flush(lead, joined));
    }

    /// The fill thread (background mode): leads each group handed to it (an
    /// open group whose FLUSHes all parked), until stopped.
    pub fn thread(&self, lead: &dyn Fn(u32) -> Result<FlushPath>) {
        let mut s = self.st.lock();
        loop {
            if let Some(id) = s.handed.take() {
                drop(s);
                let _ = self.lead(id, lead);
                s = self.st.lock();
                continue;
            }
            if s.stop {
                return;
            }
            self.thread_cv.wait(&mut s);
        }
    }

    /// The fill thread is about to run: FLUSHes may park from now on.
    pub fn thread_started(&self) {
        self.st.lock().thread = true;
    }

    /// Stop the fill thread (it exits once no group is handed to it; the
    /// caller joins it). FLUSHes no longer park.
    pub fn stop_thread(&self) {
        let mut s = self.st.lock();
        s.stop = true;
        s.thread = false;
        self.thread_cv.notify_all();
    }

    /// Lead group `id`: run the FLUSH, then end the group (also on unwind,
    /// so no follower sleeps forever behind a panic).
    fn lead(&self, id: u64, lead: &dyn Fn(u32) -> Result<FlushPath>) -> Result<FlushPath> {
        // ends the group if `lead` unwinds, so no follower sleeps forever
        // behind a panic (its parked answers are dropped unanswered)
        struct Unwind<'a> {
            fill: &'a Fill,
            id: u64,
            armed: bool,
        }
        impl Drop for Unwind<'_> {
            fn drop(&mut self) {
                if self.armed {
                    drop(self.fill.end(self.id, false));
                }
            }
        }
        let mut unwind = Unwind {
            fill: self,
            id,
            armed: true,
        };
        let members = {
            let mut s = self.st.lock();
            std::mem::replace(&mut s.group_members, 0) + 1
        };
        let r = lead(members);
        unwind.armed = false;
        if let Ok(p) = &r {
            let code = match p {
                FlushPath::Log => 0,
                FlushPath::Seal => 1,
            };
            self.path[(id % 2) as usize].store(code, Ordering::Release);
        }
        // the group's parked FLUSHes, taken before its end hands the open
        // group (and its own parked ones) on
        let parked = std::mem::take(&mut self.st.lock().group_parked);
        let orphans = self.end(id, r.is_ok());
        for a in orphans {
            // parked in the open group while the fill thread was being
            // stopped: no one leads their group, each answers for itself
            a(lead(1));
        }
        for a in parked {
            match &r {
                Ok(p) => a(Ok(*p)),
                // the group failed: each answers for itself
                Err(_) => a(lead(1)),
            }
        }
        r
    }

    /// Group `id` ended (`ok`: its FLUSH returned Ok): hand the open group
    /// to its leader if it has one, then release `id`'s followers and that
    /// leader with one wake. Returns the open group's parked answers when
    /// it has no leader and the fill thread is stopped (the caller runs
    /// their FLUSHes).
    fn end(&self, id: u64, ok: bool) -> Vec<Answer> {
        let mut orphans = Vec::new();
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
                s.group_parked = std::mem::take(&mut s.parked);
                s.group_members = std::mem::replace(&mut s.open_members, 0);
                s.next += 1;
            } else if !s.parked.is_empty() && !s.stop {
                // only parked FLUSHes in the open group: the fill thread
                // leads it (parked only while the thread runs)
                s.group_parked = std::mem::take(&mut s.parked);
                // the fill thread is no FLUSH of the group: its parked ones are
                s.group_members = std::mem::replace(&mut s.open_members, 0).saturating_sub(1);
                s.handed = Some(s.next);
                s.next += 1;
                self.thread_cv.notify_one();
            } else {
                orphans = std::mem::take(&mut s.parked);
                s.open_members = 0;
                s.inflight = false;
            }
        }
        self.done.store(id + 1, Ordering::SeqCst);
        let w = &self.words[(id % 2) as usize];
        w.fetch_add(1, Ordering::SeqCst);
        // a sleeper counts itself before it checks `done` (both SeqCst):
        // either it sees this end, or this sees it and wakes it
        if self.sleepers[(id % 2) as usize].load(Ordering::SeqCst) > 0 {
            futex_wake_all(w);
        }
        orphans
    }

    /// Sleep until group `id` has ended.
    fn wait_done(&self, id: u64) {
        let (w, n) = (
            &self.words[(id % 2) as usize],
            &self.sleepers[(id % 2) as usize],
        );
        n.fetch_add(1, Ordering::SeqCst);
        loop {
            // the word before the check: an end between the two changes
            // the word, and the futex wait then returns at once
            let seen = w.load(Ordering::SeqCst);
            // MUTANT: fill-follower-not-waiting s|if self.done.load(Ordering::SeqCst) > id {|if true {|
            if self.done.load(Ordering::SeqCst) > id {
                n.fetch_sub(1, Ordering::SeqCst);
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
