//! A counting allocator for the benchmark only (feature `alloc-count`,
//! never in a release build): every call that asks the system allocator for
//! memory, and the bytes asked, so that `scripts/bench.sh` can print
//! allocations per converged resource (docs/performance.md). Reading it
//! costs one relaxed atomic add per allocation.

use super::Heap;
use std::alloc::{GlobalAlloc, Layout};

const HEAP: Heap = Heap {};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

/// The program's allocator ([`Heap`]), counted.
pub struct Counting;

static CALLS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);
/// Bytes handed out and not yet freed.
static LIVE: AtomicI64 = AtomicI64::new(0);

thread_local! {
    /// Bytes this thread asked for, less those it freed: what one step of a
    /// test holds, whatever other threads do meanwhile.
    static THREAD_LIVE: std::cell::Cell<i64> = const { std::cell::Cell::new(0) };
    /// The same blocks as musl's allocator lays them out ([`slot`]).
    static THREAD_SLOTS: std::cell::Cell<i64> = const { std::cell::Cell::new(0) };
}

/// musl's allocator (mallocng) serves a block from a slot of one of these
/// sizes, in 16-byte units, with 4 bytes of header in the slot; a larger
/// block is a mapping of its own, in whole pages (musl
/// `src/malloc/mallocng/malloc.c`, `size_classes`, `size_to_class`).
const SIZE_CLASSES: [usize; 48] = [
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 15, 18, 20, 25, 31, 36, 42, 50, 63, 72, 84, 102, 127, 146,
    170, 204, 255, 292, 340, 409, 511, 584, 682, 818, 1023, 1169, 1364, 1637, 2047, 2340, 2730,
    3276, 4095, 4680, 5460, 6552, 8191,
];

/// The bytes of the slot musl's allocator serves a block of `size` from:
/// what the block costs in its groups, where [`thread_live`] counts what
/// was asked (docs/performance.md, memory per resource).
pub fn slot(size: usize) -> usize {
    let units = (size + 4).div_ceil(16);
    match SIZE_CLASSES.iter().find(|c| **c >= units) {
        Some(c) => c * 16,
        None => (size + 16).div_ceil(4096) * 4096,
    }
}

fn thread_add(bytes: i64, size: usize) {
    let _ = THREAD_LIVE.try_with(|c| c.set(c.get() + bytes));
    let slot = slot(size) as i64 * bytes.signum();
    let _ = THREAD_SLOTS.try_with(|c| c.set(c.get() + slot));
}

fn count(size: usize) {
    CALLS.fetch_add(1, Relaxed);
    BYTES.fetch_add(size as u64, Relaxed);
    LIVE.fetch_add(size as i64, Relaxed);
    thread_add(size as i64, size);
}

// SAFETY: every call is passed to the heap unchanged; the counters only
// add.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        HEAP.alloc(layout)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        HEAP.alloc_zeroed(layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        LIVE.fetch_sub(layout.size() as i64, Relaxed);
        thread_add(-(layout.size() as i64), layout.size());
        HEAP.realloc(ptr, layout, new_size)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as i64, Relaxed);
        thread_add(-(layout.size() as i64), layout.size());
        HEAP.dealloc(ptr, layout)
    }
}

/// Allocations (alloc, alloc_zeroed and realloc calls) and bytes asked for
/// since start.
pub fn totals() -> (u64, u64) {
    (CALLS.load(Relaxed), BYTES.load(Relaxed))
}

/// Bytes the program holds now (asked for and not freed).
pub fn live() -> i64 {
    LIVE.load(Relaxed)
}

/// Bytes this thread holds of what it asked for (less what it freed,
/// whichever thread asked for it).
pub fn thread_live() -> i64 {
    THREAD_LIVE.try_with(|c| c.get()).unwrap_or(0)
}

/// The bytes of musl's slots ([`slot`]) that the blocks of
/// [`thread_live`] take.
pub fn thread_slots() -> i64 {
    THREAD_SLOTS.try_with(|c| c.get()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    /// Slots as musl's allocator sizes them: a 36-byte uid takes 48, a
    /// 404-byte block 496, and a block past the last class whole pages.
    #[test]
    fn slots_follow_musls_size_classes() {
        let slots = [12, 13, 36, 404, 131_000, 131_100].map(super::slot);
        assert_eq!(slots, [16, 32, 48, 496, 131_056, 135_168]);
    }

    /// An allocation through the global allocator is counted, bytes and
    /// all: 64 MiB (never touched, so never resident) is more than the other
    /// tests' threads allocate meanwhile, so only this one can account for
    /// it, and freeing it gives it back.
    #[test]
    fn an_allocation_is_counted() {
        const SIZE: u64 = 64 << 20;
        let ((calls0, bytes0), live0) = (super::totals(), super::live());
        let v: Vec<u8> = Vec::with_capacity(std::hint::black_box(SIZE as usize));
        let ((calls1, bytes1), live1) = (super::totals(), super::live());
        drop(v);
        let live2 = super::live();
        assert!(calls1 > calls0, "no call counted");
        assert!(bytes1 - bytes0 >= SIZE, "{} bytes counted", bytes1 - bytes0);
        assert!(live1 - live0 >= SIZE as i64 / 2, "live {live0} → {live1}");
        assert!(
            live1 - live2 >= SIZE as i64 / 2,
            "not given back: {live1} → {live2}"
        );
    }
}
