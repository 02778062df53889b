//! The allocator: which one each build uses, and what it is asked. On musl
//! (the static build that ships) a cache of freed blocks per thread sits in
//! front of musl's allocator ([`cache`]); on glibc, one arena. `malloc_trim`
//! once a resync period was
//! tried and is not called: it hardly moved steady RSS, so what is resident
//! is live data, not freed pages (docs/performance.md).

/// glibc gives each thread that allocates its own arena (up to 8 per core)
/// and seldom hands freed arena memory back: the reflector threads taking
/// turns at a list near its bounds would leave several lists' worth
/// resident where one list is needed (docs/performance.md). One arena, as
/// musl has: the threads mostly wait on sockets, so they hardly contend
/// for it.
pub fn limit_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; called once, at
    // start, before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// A thread about to wait long gives back what it keeps for its next burst:
/// its answer buffer, its packing scratch, its allocator cache and its
/// stack's deep pages, so that an idle process holds its data and not the
/// last burst's free blocks (steady RSS, docs/performance.md). A worker
/// calls it once its queue has been empty for a while, a watch thread after
/// each list; the next burst asks the allocator again.
pub fn thread_idle() {
    crate::kube::client::release_buffer();
    pack::release_scratch();
    cache::trim();
    stack::trim();
}

pub mod cache;
#[cfg(feature = "alloc-count")]
pub mod count;
mod memcheck;
pub mod pack;
pub mod stack;

/// The allocator the program's requests go to: on musl, musl's behind a
/// cache of freed blocks per thread ([`cache`]); elsewhere the system's.
#[cfg(target_env = "musl")]
pub type Heap = cache::Cached;
#[cfg(not(target_env = "musl"))]
pub type Heap = std::alloc::System;

#[cfg(not(feature = "alloc-count"))]
#[global_allocator]
static HEAP: Heap = Heap {};

/// The counting build counts requests to the same allocator.
#[cfg(feature = "alloc-count")]
#[global_allocator]
static COUNTING: count::Counting = count::Counting;
