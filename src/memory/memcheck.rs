//! What the allocator cache tells valgrind's memcheck (feature `memcheck`,
//! never in a release build): every block it hands out is announced as
//! allocated and every block it takes back as freed, with valgrind's client
//! requests (`MALLOCLIKE_BLOCK`, `FREELIKE_BLOCK`, `RESIZEINPLACE_BLOCK`, and
//! memcheck's `MAKE_MEM_*`), so that memcheck sees a use after free, a double
//! handout or an overflow through the cache as it would through malloc.
//!
//! Meant for the static musl build, whose malloc memcheck cannot replace (no
//! shared libc): there the cache's announcements are the program's whole
//! heap to memcheck. Without the feature, or off x86_64, every function here
//! is empty; with it, outside valgrind, each is a few register rotations.

/// One client request: valgrind reads `args` (the request and its
/// arguments) when it meets the marked instruction sequence; natively the
/// sequence leaves every register as it was and the default, 0, is
/// answered.
#[cfg(all(feature = "memcheck", target_arch = "x86_64"))]
#[inline(always)]
fn request(args: [usize; 6]) {
    let mut answer: usize = 0;
    // SAFETY: valgrind's documented client-request sequence for amd64
    // (valgrind.h, __SPECIAL_INSTRUCTION_PREAMBLE): four rotations of rdi
    // by 128 bits in all, which leave it unchanged, then an exchange of rbx
    // with itself; rax points at the arguments, rdx carries the answer.
    unsafe {
        std::arch::asm!(
            "rol rdi, 3",
            "rol rdi, 13",
            "rol rdi, 61",
            "rol rdi, 51",
            "xchg rbx, rbx",
            in("rax") args.as_ptr(),
            inout("rdx") answer,
            inout("rdi") 0usize => _,
            options(nostack),
        );
    }
    std::hint::black_box(answer);
}

#[cfg(not(all(feature = "memcheck", target_arch = "x86_64")))]
#[inline(always)]
fn request(_: [usize; 6]) {}

/// valgrind.h's core requests and memcheck.h's (`VG_USERREQ_TOOL_BASE('M',
/// 'C')` + n).
const MALLOCLIKE_BLOCK: usize = 0x1301;
const FREELIKE_BLOCK: usize = 0x1302;
const RESIZEINPLACE_BLOCK: usize = 0x130b;
const MEMCHECK: usize = ((b'M' as usize) << 24) | ((b'C' as usize) << 16);
const MAKE_MEM_NOACCESS: usize = MEMCHECK;
const MAKE_MEM_DEFINED: usize = MEMCHECK + 2;

/// `size` bytes at `p` are now the program's, unwritten.
#[inline(always)]
pub fn allocated(p: *mut u8, size: usize) {
    request([MALLOCLIKE_BLOCK, p as usize, size, 0, 0, 0]);
}

/// The block at `p` is no longer the program's: touching it is an error.
#[inline(always)]
pub fn freed(p: *mut u8) {
    request([FREELIKE_BLOCK, p as usize, 0, 0, 0, 0]);
}

/// The block at `p` grew or shrank where it is.
#[inline(always)]
pub fn resized(p: *mut u8, old: usize, new: usize) {
    request([RESIZEINPLACE_BLOCK, p as usize, old, new, 0, 0]);
}

/// `len` bytes at `p` may not be touched (a kept block's spare bytes).
#[inline(always)]
pub fn no_access(p: *mut u8, len: usize) {
    request([MAKE_MEM_NOACCESS, p as usize, len, 0, 0, 0]);
}

/// `len` bytes at `p` may be read: a kept block's link, what realloc
/// copied, and what goes back to musl (whose own checks read its spare
/// bytes, so they may not stay unwritten or out of bounds).
#[inline(always)]
pub fn defined(p: *mut u8, len: usize) {
    request([MAKE_MEM_DEFINED, p as usize, len, 0, 0, 0]);
}
