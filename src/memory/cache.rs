//! The static musl build's allocator: musl's own (mallocng) behind a small
//! cache of freed blocks per thread. mallocng takes one lock per call and
//! hands a group of blocks back to the kernel (munmap, madvise) as soon as
//! it is free, so a pass that allocates and frees a few thousand small
//! blocks faults the same pages in again on the next pass: most of the
//! static build's kernel time (docs/performance.md, "The allocator"). Here a
//! small block freed is kept by the thread that freed it and handed out
//! again by size class, without a lock; past 128 KiB a thread
//! gives blocks back to musl as before, so what is kept stays bounded.
//! A thread's blocks go back to musl when it ends.
//!
//! Blocks are asked of musl as whole classes, so every block of a class is
//! interchangeable whichever thread asked for it: a class is one of musl's
//! slot sizes (16-byte steps up to [`MAX_SMALL`]) less the 4 bytes musl
//! keeps in each slot for its header, so a block fills its slot and no
//! request takes a slot larger than musl alone would give it. Larger or
//! more strictly aligned requests go straight to musl.
//!
//! Every block handed out and taken back is announced to valgrind's memcheck
//! in a build with the feature `memcheck` ([`memcheck`]): a handed-out block
//! is its requested size, the rest of its class and a kept block may not be
//! touched, and what goes back to musl is musl's again. The proof
//! (docs/performance.md, "The allocator") runs `tests/alloc/stress.rs` on
//! that build, natively and under memcheck.

use super::memcheck;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The largest of musl's slots the cache serves.
const MAX_SMALL: usize = 1024;
/// The class step and the alignment every cached block has: mallocng's
/// unit, on which it places every block it hands out.
const STEP: usize = 16;
const CLASSES: usize = MAX_SMALL / STEP;
/// The bytes of each slot mallocng keeps for its in-band header: a block
/// of `16k - 4` bytes fills a `16k`-byte slot, one of 16k bytes takes the
/// next (16 bytes a block more: a fifth of the steady heap,
/// docs/performance.md, memory per resource).
const HEADER: usize = 4;
/// The bytes of freed blocks one thread keeps at most.
const KEEP_BYTES: usize = 128 * 1024;

/// Freed blocks kept by one thread: a list per class, linked through the
/// blocks themselves.
struct Kept {
    heads: [Cell<*mut u8>; CLASSES],
    bytes: Cell<usize>,
    state: Cell<ThreadCache>,
}

/// Where a thread's cache stands.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ThreadCache {
    /// Nothing kept yet, no exit hook.
    Fresh,
    /// The exit hook is set ([`on_exit`]).
    Hooked,
    /// The thread is ending and its blocks went back: what it frees from
    /// now on goes straight to musl, never to a list no one will read.
    Ended,
}

thread_local! {
    // No destructor and a constant start: reading it never allocates, so
    // the allocator may use it (a lazily made one would call back in).
    static KEPT: Kept = const {
        Kept {
            heads: [const { Cell::new(null_mut()) }; CLASSES],
            bytes: Cell::new(0),
            state: Cell::new(ThreadCache::Fresh),
        }
    };
}

/// musl's allocator with a per-thread cache of small freed blocks.
pub struct Cached;

/// The class of a request served from the cache, if it is one.
fn class_of(layout: Layout) -> Option<usize> {
    (layout.size() <= MAX_SMALL - HEADER && layout.align() <= STEP)
        .then(|| (layout.size().max(1) + HEADER - 1) / STEP)
}

/// The bytes of every block of `class`.
const fn class_bytes(class: usize) -> usize {
    (class + 1) * STEP - HEADER
}

/// The bytes of the link a kept block's first word holds.
const LINK: usize = std::mem::size_of::<*mut u8>();

/// The layout every block of `class` is asked of musl with: aligned to 4
/// only, so that it is a plain `malloc` (musl places it on 16 bytes all the
/// same), never the aligned path a 12-byte block aligned to 16 would take.
fn class_layout(class: usize) -> Layout {
    // class_bytes is a non-zero multiple of 4.
    unsafe { Layout::from_size_align_unchecked(class_bytes(class), HEADER) }
}

/// The pthread key whose destructor hands an ending thread's blocks back
/// (0 until made; pthread_key_create takes no memory of the heap).
static EXIT_KEY: AtomicUsize = AtomicUsize::new(0);

/// Makes sure this thread's blocks go back to musl when it ends.
fn on_exit(kept: &Kept) {
    if kept.state.get() != ThreadCache::Fresh {
        return;
    }
    kept.state.set(ThreadCache::Hooked);
    let mut key = EXIT_KEY.load(Ordering::Acquire);
    if key == 0 {
        let mut made: libc::pthread_key_t = 0;
        // SAFETY: made is a valid out pointer; release_all is an extern "C"
        // fn taking the value set below.
        if unsafe { libc::pthread_key_create(&mut made, Some(release_all)) } != 0 {
            return;
        }
        // Key 0 is valid for pthreads but used here as "none": keep one more.
        let stored = made as usize + 1;
        key = match EXIT_KEY.compare_exchange(0, stored, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => stored,
            Err(other) => {
                // SAFETY: made is ours and unused.
                unsafe { libc::pthread_key_delete(made) };
                other
            }
        };
    }
    // SAFETY: the key was made above; a non-null value makes its
    // destructor run at thread exit. Storing it takes no heap memory.
    unsafe {
        let any = std::ptr::from_ref(&EXIT_KEY).cast::<libc::c_void>();
        libc::pthread_setspecific((key - 1) as libc::pthread_key_t, any);
    }
}

/// The exit hook: every block this thread kept goes back to musl.
extern "C" fn release_all(_: *mut libc::c_void) {
    let _ = KEPT.try_with(|kept| {
        give_back(kept);
        kept.state.set(ThreadCache::Ended);
    });
}

/// Every block `kept` holds goes back to musl.
fn give_back(kept: &Kept) {
    for (class, head) in kept.heads.iter().enumerate() {
        let mut p = head.replace(null_mut());
        while !p.is_null() {
            // SAFETY: p is a kept block of this class: its first word
            // links the next, and musl gave it with the class layout.
            unsafe {
                memcheck::defined(p, LINK);
                let next = *(p as *mut *mut u8);
                memcheck::defined(p, class_layout(class).size());
                System.dealloc(p, class_layout(class));
                p = next;
            }
        }
    }
    kept_changed(-(kept.bytes.replace(0) as isize));
}

/// This thread's kept blocks go back to musl: for a thread about to wait
/// long, so that what it freed in its last burst is not held while the
/// process idles (the steady RSS, docs/performance.md).
pub fn trim() {
    let _ = KEPT.try_with(give_back);
}

/// Bytes kept in every thread's cache (counted in the counting build only,
/// where [`kept_total`] reports them).
#[cfg(feature = "alloc-count")]
static KEPT_ALL: std::sync::atomic::AtomicIsize = std::sync::atomic::AtomicIsize::new(0);

fn kept_changed(_by: isize) {
    #[cfg(feature = "alloc-count")]
    KEPT_ALL.fetch_add(_by, Ordering::Relaxed);
}

/// Bytes kept in every thread's cache now.
#[cfg(feature = "alloc-count")]
pub fn kept_total() -> isize {
    KEPT_ALL.load(Ordering::Relaxed)
}

// SAFETY: every block handed out is one musl gave with the class layout (or
// the caller's, outside the cache), at least as large and as aligned as the
// request; a kept block is owned by the list of the thread keeping it alone.
unsafe impl GlobalAlloc for Cached {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let Some(class) = class_of(layout) else {
            let p = System.alloc(layout);
            if !p.is_null() {
                memcheck::allocated(p, layout.size());
            }
            return p;
        };
        let kept = KEPT.try_with(|kept| {
            let p = kept.heads[class].get();
            if p.is_null() {
                return p;
            }
            memcheck::defined(p, LINK);
            // SAFETY: a kept block's first word links the next one.
            kept.heads[class].set(unsafe { *(p as *mut *mut u8) });
            kept.bytes.set(kept.bytes.get() - class_bytes(class));
            kept_changed(-(class_bytes(class) as isize));
            p
        });
        let p = match kept {
            Ok(p) if !p.is_null() => p,
            _ => System.alloc(class_layout(class)),
        };
        if !p.is_null() {
            memcheck::no_access(p, class_layout(class).size());
            memcheck::allocated(p, layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        memcheck::freed(ptr);
        let Some(class) = class_of(layout) else {
            memcheck::defined(ptr, layout.size());
            return System.dealloc(ptr, layout);
        };
        let size = class_bytes(class);
        let kept = KEPT.try_with(|kept| {
            if kept.bytes.get() + size > KEEP_BYTES || kept.state.get() == ThreadCache::Ended {
                return false;
            }
            on_exit(kept);
            memcheck::defined(ptr, LINK);
            // SAFETY: the block is at least 12 bytes and 16-byte aligned,
            // and no longer the caller's: its first word may link the list.
            unsafe { *(ptr as *mut *mut u8) = kept.heads[class].get() };
            memcheck::no_access(ptr, LINK);
            kept.heads[class].set(ptr);
            kept.bytes.set(kept.bytes.get() + size);
            kept_changed(size as isize);
            true
        });
        if kept != Ok(true) {
            memcheck::defined(ptr, size);
            System.dealloc(ptr, class_layout(class));
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY (of the layout): the caller promises new_size, rounded to
        // the alignment, does not overflow.
        let new = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        match (class_of(layout), class_of(new)) {
            (Some(a), Some(b)) if a == b => {
                memcheck::resized(ptr, layout.size(), new_size);
                ptr
            }
            (None, None) => {
                let out = System.realloc(ptr, layout, new_size);
                if out == ptr {
                    // In place: what it gave up is musl's again (its canary).
                    memcheck::resized(ptr, layout.size(), new_size);
                    let tail = layout.size().saturating_sub(new_size);
                    memcheck::defined(ptr.wrapping_add(new_size), tail);
                } else if !out.is_null() {
                    memcheck::freed(ptr);
                    memcheck::defined(ptr, layout.size());
                    memcheck::allocated(out, new_size);
                    memcheck::defined(out, layout.size().min(new_size));
                }
                out
            }
            _ => {
                let out = self.alloc(new);
                if !out.is_null() {
                    std::ptr::copy_nonoverlapping(ptr, out, layout.size().min(new_size));
                    self.dealloc(ptr, layout);
                }
                out
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_cover_every_small_request_and_no_other() {
        let l = |size, align| Layout::from_size_align(size, align).unwrap();
        assert_eq!(class_of(l(1, 1)), Some(0));
        assert_eq!(class_of(l(12, 8)), Some(0));
        assert_eq!(class_of(l(13, 8)), Some(1));
        assert_eq!(class_of(l(MAX_SMALL - HEADER, 16)), Some(CLASSES - 1));
        assert_eq!(class_of(l(MAX_SMALL - HEADER + 1, 8)), None);
        assert_eq!(class_of(l(64, 32)), None);
        for size in 1..=MAX_SMALL - HEADER {
            let c = class_of(l(size, 8)).unwrap();
            let block = class_layout(c).size();
            assert!(block >= size && block < size + STEP, "{size}: {block}");
            // It fills one of musl's slots: 16-byte steps, 4 bytes of
            // header.
            assert_eq!((block + HEADER) % STEP, 0, "{size}: {block}");
        }
    }

    #[test]
    fn a_freed_block_is_handed_out_again_and_the_cache_stays_bounded() {
        let a = Cached;
        let l = Layout::from_size_align(40, 8).unwrap();
        unsafe {
            let p = a.alloc(l);
            p.write_bytes(7, 40);
            a.dealloc(p, l);
            let q = a.alloc(l);
            assert_eq!(p, q, "the block just freed is reused");
            // Past the bound, blocks go back to musl: the cache never holds
            // more than KEEP_BYTES.
            let many: Vec<*mut u8> = (0..2 * KEEP_BYTES / 48).map(|_| a.alloc(l)).collect();
            for p in many {
                a.dealloc(p, l);
            }
            assert!(KEPT.with(|k| k.bytes.get()) <= KEEP_BYTES);
            a.dealloc(q, l);
        }
    }

    #[test]
    fn a_trimmed_thread_keeps_nothing_and_still_allocates() {
        let a = Cached;
        let l = Layout::from_size_align(64, 8).unwrap();
        unsafe {
            let blocks: Vec<*mut u8> = (0..100).map(|_| a.alloc(l)).collect();
            for p in blocks {
                a.dealloc(p, l);
            }
            assert!(KEPT.with(|k| k.bytes.get()) >= 100 * 64);
            trim();
            assert_eq!(KEPT.with(|k| k.bytes.get()), 0);
            assert!(KEPT.with(|k| k.heads.iter().all(|h| h.get().is_null())));
            let p = a.alloc(l);
            assert!(!p.is_null());
            a.dealloc(p, l);
            let block = class_layout(class_of(l).unwrap()).size();
            assert_eq!(
                KEPT.with(|k| k.bytes.get()),
                block,
                "kept again after a trim"
            );
        }
    }

    #[test]
    fn realloc_keeps_the_bytes_across_classes_and_sizes() {
        let a = Cached;
        unsafe {
            let mut l = Layout::from_size_align(8, 8).unwrap();
            let mut p = a.alloc(l);
            for (i, size) in [8usize, 12, 100, 600, 5000, 300, 20]
                .into_iter()
                .enumerate()
            {
                if i > 0 {
                    p = a.realloc(p, l, size);
                    assert_eq!(*p, 0xA5, "the first byte survives {} -> {size}", l.size());
                    l = Layout::from_size_align(size, 8).unwrap();
                }
                *p = 0xA5;
            }
            a.dealloc(p, l);
        }
    }

    #[test]
    fn an_ending_thread_hands_its_blocks_back_and_keeps_no_more() {
        std::thread::spawn(|| {
            let a = Cached;
            let l = Layout::from_size_align(100, 8).unwrap();
            unsafe {
                let p = a.alloc(l);
                a.dealloc(p, l);
                assert_eq!(KEPT.with(|k| k.bytes.get()), 108, "the block is kept");
                assert!(KEPT.with(|k| k.state.get() == ThreadCache::Hooked));
                // What the exit hook does when the thread ends.
                release_all(null_mut());
                assert_eq!(KEPT.with(|k| k.bytes.get()), 0);
                assert!(KEPT.with(|k| k.heads.iter().all(|h| h.get().is_null())));
                let p = a.alloc(l);
                a.dealloc(p, l);
                assert_eq!(
                    KEPT.with(|k| k.bytes.get()),
                    0,
                    "an ended thread keeps nothing"
                );
            }
        })
        .join()
        .unwrap();
    }
}
