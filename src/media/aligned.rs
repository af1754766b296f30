//! AlignedBuf: a zeroed heap buffer aligned to 4 KiB, as O_DIRECT requires,
//! and the 2 MiB regions chunk buffers are carved from (`AlignedBuf::carve`).
//!
//! Owns: each buffer's memory. A carved buffer shares its region with the
//! other buffers carved from it; invariant: the buffers of one region never
//! overlap, and a region is unmapped only when its last buffer is dropped
//! (each holds an `Arc` of it). A region is backed by 2 MiB huge pages when
//! the kernel has them (`MAP_HUGETLB` from the reserved pool, else
//! transparent huge pages asked for with `MADV_HUGEPAGE`), so a buffer that
//! is written with O_DIRECT pins one huge page, not 256 small ones
//! (`gup_fast`), and is faulted in once; with neither it is plain memory,
//! aligned the same, and works the same.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

pub struct AlignedBuf {
    ptr: *mut u8,
    len: usize,
    /// The region a carved buffer lives in (None: its own heap allocation).
    region: Option<Arc<Region>>,
}

// The buffer is plain owned memory (a carved one owns its own bytes of the
// region: no other buffer's range overlaps them).
unsafe impl Send for AlignedBuf {}
unsafe impl Sync for AlignedBuf {}

const ALIGN: usize = 4096;

/// Bytes of one region chunk buffers are carved from: one 2 MiB huge page.
pub const REGION_BYTES: usize = 2 << 20;
/// Smallest buffer carved (at most 8 per region): smaller ones (a packed
/// block read's 8 KiB) pin few pages anyway, and a pool that keeps a few
/// of them would hold a whole region for them.
pub const MIN_CARVED: usize = REGION_BYTES / 8;

/// How a region's pages were asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pages {
    /// `MAP_HUGETLB`: the kernel's reserved huge pages (HugePages_Total).
    HugeTlb,
    /// Anonymous memory with `MADV_HUGEPAGE` (transparent huge pages when
    /// `/sys/kernel/mm/transparent_hugepage/enabled` is `always` or
    /// `madvise`; else small pages, aligned all the same).
    Transparent,
    /// Plain heap buffers, one allocation each (`SLUICE_CHUNK_PAGES=small`).
    Small,
}

/// One mapping of `REGION_BYTES`, 2 MiB aligned.
struct Region {
    ptr: *mut u8,
}

unsafe impl Send for Region {}
unsafe impl Sync for Region {}

impl Drop for Region {
    fn drop(&mut self) {
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, REGION_BYTES) };
    }
}

/// 0: not yet decided; else `Pages as u8 + 1` (what `SLUICE_CHUNK_PAGES`
/// allows, downgraded once `MAP_HUGETLB` failed).
static MODE: AtomicU8 = AtomicU8::new(0);

fn mode() -> Pages {
    match MODE.load(Ordering::Relaxed) {
        1 => Pages::HugeTlb,
        2 => Pages::Transparent,
        3 => Pages::Small,
        _ => {
            let m = match std::env::var("SLUICE_CHUNK_PAGES").as_deref() {
                Ok("small") => Pages::Small,
                Ok("thp") => Pages::Transparent,
                _ => Pages::HugeTlb,
            };
            MODE.store(m as u8 + 1, Ordering::Relaxed);
            m
        }
    }
}

impl Region {
    /// A fresh zeroed region with pages of kind `want` or the next best; None
    /// when no mapping could be made (the caller falls back to the heap).
    fn new(want: Pages) -> Option<(Region, Pages)> {
        if want == Pages::HugeTlb {
            // SAFETY: a fresh anonymous mapping; checked for failure below.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    REGION_BYTES,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_HUGETLB,
                    -1,
                    0,
                )
            };
            if p != libc::MAP_FAILED {
                return Some((Region { ptr: p as *mut u8 }, Pages::HugeTlb));
            }
        }
        if want == Pages::Small {
            return None;
        }
        // twice the size, then the unaligned head and tail given back
        let span = 2 * REGION_BYTES;
        // SAFETY: as above.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                span,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        let base = p as usize;
        let start = base.next_multiple_of(REGION_BYTES);
        let head = start - base;
        let tail = span - head - REGION_BYTES;
        // SAFETY: both ranges lie inside the mapping made above and outside
        // the region kept.
        unsafe {
            if head > 0 {
                libc::munmap(p, head);
            }
            if tail > 0 {
                libc::munmap((start + REGION_BYTES) as *mut libc::c_void, tail);
            }
            // a refusal (THP compiled out) leaves small pages: still correct
            libc::madvise(
                start as *mut libc::c_void,
                REGION_BYTES,
                libc::MADV_HUGEPAGE,
            );
        }
        Some((
            Region {
                ptr: start as *mut u8,
            },
            Pages::Transparent,
        ))
    }
}

impl AlignedBuf {
    pub fn new(len: usize) -> AlignedBuf {
        if len == 0 {
            return AlignedBuf {
                ptr: std::ptr::NonNull::<u8>::dangling().as_ptr(),
                len: 0,
                region: None,
            };
        }
        let layout = Layout::from_size_align(len, ALIGN).expect("buffer layout");
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        AlignedBuf {
            ptr,
            len,
            region: None,
        }
    }

    /// Zeroed buffers of `len` bytes carved from one fresh 2 MiB region
    /// (`REGION_BYTES / len` of them) when `len` divides it and is a multiple
    /// of 4 KiB of at least `MIN_CARVED`; else, or when no region can be
    /// mapped or
    /// `SLUICE_CHUNK_PAGES=small`, one heap buffer. Never empty.
    pub fn carve(len: usize) -> Vec<AlignedBuf> {
        AlignedBuf::carve_with(len, mode()).0
    }

    /// `carve` with the pages asked for given, and the kind the region got
    /// (`Small`: a heap buffer).
    pub fn carve_with(len: usize, want: Pages) -> (Vec<AlignedBuf>, Pages) {
        let fits =
            len >= MIN_CARVED && len.is_multiple_of(ALIGN) && REGION_BYTES.is_multiple_of(len);
        let region = if fits { Region::new(want) } else { None };
        let Some((region, got)) = region else {
            return (vec![AlignedBuf::new(len)], Pages::Small);
        };
        if want == Pages::HugeTlb && got != Pages::HugeTlb {
            // no reserved huge pages: do not ask again for every region
            let _ = MODE.compare_exchange(
                Pages::HugeTlb as u8 + 1,
                Pages::Transparent as u8 + 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
        let region = Arc::new(region);
        let bufs = (0..REGION_BYTES / len)
            .map(|i| AlignedBuf {
                // SAFETY: i * len + len <= REGION_BYTES: inside the region,
                // and no two i share a byte.
                // MUTANT: huge-carve-overlap s|region.ptr.add(i * len)|region.ptr.add(i * len / 2)|
                ptr: unsafe { region.ptr.add(i * len) },
                len,
                region: Some(region.clone()),
            })
            .collect();
        (bufs, got)
    }

    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Whether this buffer was carved from a region (tests, counters).
    pub fn is_carved(&self) -> bool {
        self.region.is_some()
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // a carved buffer's region goes with its last buffer (the Arc)
        // MUTANT: carved-buffer-freed-alone s| && self.region.is_none()||
        if self.len != 0 && self.region.is_none() {
            unsafe { dealloc(self.ptr, Layout::from_size_align(self.len, ALIGN).unwrap()) }
        }
    }
}

impl std::ops::Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl std::ops::DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind of pages: the buffers of a region are zeroed, aligned,
    /// disjoint, and outlive each other in any order.
    #[test]
    fn carved_buffers_are_disjoint_zeroed_and_outlive_each_other() {
        for want in [Pages::HugeTlb, Pages::Transparent, Pages::Small] {
            for len in [1 << 20, 512 << 10, 256 << 10, 64 << 10, 33 * 4096] {
                let (mut bufs, got) = AlignedBuf::carve_with(len, want);
                let n = bufs.len();
                if want == Pages::Small || !REGION_BYTES.is_multiple_of(len) || len < MIN_CARVED {
                    assert_eq!((n, got), (1, Pages::Small), "{want:?} {len}");
                } else {
                    assert_eq!(n, REGION_BYTES / len, "{want:?} {len}");
                    assert!(bufs.iter().all(|b| b.is_carved()));
                }
                for (i, b) in bufs.iter_mut().enumerate() {
                    assert_eq!(b.len(), len);
                    assert!((b.as_ptr() as usize).is_multiple_of(ALIGN));
                    assert!(b.iter().all(|&x| x == 0), "{want:?} {len}: not zeroed");
                    b.fill(i as u8 + 1);
                }
                // drop the even ones first; the odd ones still hold their bytes
                let mut kept = Vec::new();
                for (i, b) in bufs.into_iter().enumerate() {
                    if i % 2 == 1 {
                        kept.push((i, b));
                    }
                }
                for (i, b) in &kept {
                    assert!(
                        b.iter().all(|&x| x == *i as u8 + 1),
                        "{want:?} {len}: buffer {i} overwritten by another"
                    );
                }
            }
        }
    }

    /// With `Transparent` the region is 2 MiB aligned, so the kernel can back
    /// it with one huge page.
    #[test]
    fn a_transparent_region_is_huge_page_aligned() {
        let (bufs, got) = AlignedBuf::carve_with(1 << 20, Pages::Transparent);
        assert_eq!(got, Pages::Transparent);
        assert!((bufs[0].as_ptr() as usize).is_multiple_of(REGION_BYTES));
        assert_eq!(
            bufs[1].as_ptr() as usize,
            bufs[0].as_ptr() as usize + (1 << 20)
        );
    }
}
