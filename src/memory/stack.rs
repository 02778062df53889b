//! A thread's stack pages below where it now stands go back to the kernel.
//! A page of stack, once touched, stays resident for the thread's life: a
//! worker that once decoded a deep answer, or a watch thread that once
//! decoded a whole list, keeps those pages while it waits (steady RSS,
//! docs/performance.md, "Thread stacks given back"). Nothing lives below
//! the stack pointer, so they can be dropped; the next deep call faults in
//! zeroed ones.

/// Room left untouched below the caller: the frames of this function and
/// of the system call it makes, and the red zone below them.
const MARGIN: usize = 16 * 1024;

/// Drops this thread's stack pages more than [`MARGIN`] below the caller.
/// A thread about to wait long calls it; the main thread's stack is the
/// kernel's to grow and is left alone.
pub fn trim() {
    #[cfg(target_os = "linux")]
    if let Some(Bounds { low, here, .. }) = bounds() {
        let page = page_size();
        let end = here.saturating_sub(MARGIN) & !(page - 1);
        let start = (low + page - 1) & !(page - 1);
        if end > start {
            // SAFETY: [start, end) lies in this thread's own stack, wholly
            // below the frames in use (MARGIN under this one's), so no live
            // value is there; MADV_DONTNEED on private anonymous memory
            // makes its next touch read zeroes, as a fresh stack does.
            unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED);
            }
        }
    }
}

/// This thread's stack, from its lowest address to its highest, and an
/// address in the caller's frame.
#[cfg(target_os = "linux")]
struct Bounds {
    low: usize,
    #[cfg_attr(not(test), allow(dead_code))]
    high: usize,
    here: usize,
}

/// This thread's stack; None on the main thread or when the bounds are
/// unknown.
#[cfg(target_os = "linux")]
fn bounds() -> Option<Bounds> {
    let marker = 0u8;
    let here = std::hint::black_box(&marker) as *const u8 as usize;
    // SAFETY: getpid and gettid only read the calling process's ids.
    if unsafe { libc::getpid() == libc::gettid() } {
        return None;
    }
    // SAFETY: attr is initialised by pthread_getattr_np before it is read,
    // and destroyed once; the pointers given are valid for the writes.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return None;
        }
        let mut addr: *mut libc::c_void = std::ptr::null_mut();
        let mut size = 0usize;
        let got = libc::pthread_attr_getstack(&attr, &mut addr, &mut size);
        libc::pthread_attr_destroy(&mut attr);
        let (low, high) = (addr as usize, addr as usize + size);
        (got == 0 && low < here && here <= high).then_some(Bounds { low, high, here })
    }
}

#[cfg(target_os = "linux")]
fn page_size() -> usize {
    // SAFETY: sysconf only reads a system constant.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size)
        .ok()
        .filter(|s| s.is_power_of_two())
        .unwrap_or(4096)
}

/// Resident KiB of the calling thread's stack, page by page (`mincore`),
/// for tests: a mapping's total may take in the neighbours it merged with.
#[cfg(all(test, target_os = "linux"))]
pub fn resident_kib_here() -> u64 {
    let b = bounds().expect("a spawned thread's stack");
    let page = page_size();
    let start = (b.low + page - 1) & !(page - 1);
    let mut pages = vec![0u8; (b.high - start).div_ceil(page)];
    // SAFETY: [start, high) is this thread's mapped stack, and `pages` has
    // one byte for each of its pages, as mincore writes.
    let got = unsafe {
        libc::mincore(
            start as *mut libc::c_void,
            b.high - start,
            pages.as_mut_ptr(),
        )
    };
    assert_eq!(got, 0, "mincore: {}", std::io::Error::last_os_error());
    let resident = pages.iter().filter(|p| *p & 1 == 1).count();
    (resident * page / 1024) as u64
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// Touches about `depth` × 64 KiB of stack.
    #[inline(never)]
    fn deep(depth: u32) -> u8 {
        let mut block = [0u8; 64 * 1024];
        std::hint::black_box(&mut block)[depth as usize] = 1;
        let below = if depth > 0 { deep(depth - 1) } else { 0 };
        std::hint::black_box(&block)[0].wrapping_add(below)
    }

    #[test]
    fn a_thread_that_went_deep_gives_its_stack_pages_back() {
        let (before, after, again) = std::thread::Builder::new()
            .stack_size(4 << 20)
            .spawn(|| {
                deep(24);
                let before = resident_kib_here();
                trim();
                let after = resident_kib_here();
                // The stack still works below, and trims again.
                deep(4);
                trim();
                (before, after, resident_kib_here())
            })
            .unwrap()
            .join()
            .unwrap();
        assert!(before >= 1500, "the deep calls touched {before} KiB");
        assert!(
            after <= 128,
            "{after} KiB resident after the trim, {before} before"
        );
        assert!(again <= 128, "{again} KiB resident after the second trim");
    }
}
