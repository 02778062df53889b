//! The allocator's stress test (docs/performance.md, "The allocator"): run
//! by `scripts/alloc-proof.sh` on the static musl build, where the cache of
//! freed blocks (src/memory/cache.rs) is the global allocator, natively and
//! under valgrind's memcheck (feature `memcheck` announces the cache's
//! blocks).
//!
//! Worker threads allocate, grow and shrink blocks with `realloc` across
//! the cache's small/large line, and hand blocks to one another to free;
//! short-lived threads allocate blocks, hand them over and end while the
//! blocks live on. Sizes and alignments cross every class boundary; every
//! block is aligned as asked. Each block holds a pattern of its own: it is
//! checked before the block is freed or resized, and after every free each
//! block the thread holds is checked whole, so a block handed out twice,
//! or written after its free, shows as a wrong byte.
//!
//! `alloc-stress [STEPS] [SEED]`; `alloc-stress --use-after-free` writes to
//! a block after its free, for memcheck to find (the proof that it sees
//! through the cache).

use std::alloc::{alloc, dealloc, realloc, Layout};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Barrier};

/// Worker threads, and short-lived threads started while they run.
const WORKERS: usize = 6;
const SHORT_LIVED: usize = 24;
/// Blocks a worker holds at most: every free checks them all.
const HELD: usize = 48;
/// Blocks live in all threads (none at the end).
static LIVE: AtomicUsize = AtomicUsize::new(0);
/// What the run did, for its last line: blocks taken, freed by a thread
/// other than the one that took them, resized, and bytes checked.
static TAKEN: AtomicUsize = AtomicUsize::new(0);
static FREED_ELSEWHERE: AtomicUsize = AtomicUsize::new(0);
static RESIZED: AtomicUsize = AtomicUsize::new(0);
static CHECKED: AtomicUsize = AtomicUsize::new(0);
/// Workers still taking steps (a bit each): blocks go only to them, so
/// that none pile up in the inbox of one that waits for the others.
static STEPPING: AtomicUsize = AtomicUsize::new(0);
/// The largest of musl's slots the cache serves, and the header musl keeps
/// in each (src/memory/cache.rs, `MAX_SMALL`, `HEADER`).
const MAX_SMALL: usize = 1024;
const HEADER: usize = 4;

/// A block and the pattern it holds.
struct Block {
    ptr: usize,
    layout: Layout,
    tag: u8,
    taken_by: std::thread::ThreadId,
}

/// xorshift64*: reproducible from the seed printed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// A size next to a class boundary (the cache's, 4 bytes short of a
    /// multiple of 16, or the multiple itself, and ±1), up to past the
    /// small/large line, now and then a large one.
    fn size(&mut self) -> usize {
        let short = [HEADER, 0][self.below(2)];
        match self.below(8) {
            0 => 1 + self.below(8 * 1024),
            1 => MAX_SMALL - short - 1 + self.below(3),
            _ => (16 * (1 + self.below(MAX_SMALL / 16)) - short + self.below(3))
                .saturating_sub(1)
                .max(1),
        }
    }

    fn align(&mut self) -> usize {
        [1, 2, 4, 8, 16, 16, 16, 32, 64, 4096][self.below(10)]
    }
}

fn byte(tag: u8, i: usize) -> u8 {
    tag ^ (i as u8).wrapping_mul(31) ^ (i >> 8) as u8
}

impl Block {
    fn new(rng: &mut Rng) -> Block {
        let layout = Layout::from_size_align(rng.size(), rng.align()).expect("a valid layout");
        // SAFETY: the layout's size is not zero.
        let ptr = unsafe { alloc(layout) };
        assert!(!ptr.is_null(), "out of memory for {layout:?}");
        assert_eq!(ptr as usize % layout.align(), 0, "{layout:?} at {ptr:?}");
        LIVE.fetch_add(1, Relaxed);
        TAKEN.fetch_add(1, Relaxed);
        let mut block = Block {
            ptr: ptr as usize,
            layout,
            tag: rng.next() as u8,
            taken_by: std::thread::current().id(),
        };
        block.fill(0);
        block
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: the block is live and ours, layout.size() bytes long.
        unsafe { std::slice::from_raw_parts(self.ptr as *const u8, self.layout.size()) }
    }

    /// Writes the pattern from byte `from` on.
    fn fill(&mut self, from: usize) {
        // SAFETY: the block is live and ours, layout.size() bytes long.
        let bytes =
            unsafe { std::slice::from_raw_parts_mut(self.ptr as *mut u8, self.layout.size()) };
        for (i, b) in bytes.iter_mut().enumerate().skip(from) {
            *b = byte(self.tag, i);
        }
    }

    fn check(&self, when: &str) {
        let tag = self.tag;
        let bytes = self.bytes();
        CHECKED.fetch_add(bytes.len(), Relaxed);
        if let Some(i) = (0..bytes.len()).find(|&i| bytes[i] != byte(tag, i)) {
            panic!(
                "{when}: byte {i} of a block of {:?} at {:#x} is {:#x}, not {:#x}",
                self.layout,
                self.ptr,
                bytes[i],
                byte(tag, i)
            );
        }
    }

    fn free(self) {
        self.check("before its free");
        // SAFETY: allocated with this layout and not freed.
        unsafe { dealloc(self.ptr as *mut u8, self.layout) }
        LIVE.fetch_sub(1, Relaxed);
        if self.taken_by != std::thread::current().id() {
            FREED_ELSEWHERE.fetch_add(1, Relaxed);
        }
    }

    /// Grows or shrinks the block; the bytes it keeps must survive.
    fn resize(&mut self, rng: &mut Rng) {
        self.check("before realloc");
        let size = rng.size();
        // SAFETY: allocated with this layout; size is not zero and, rounded
        // to the alignment, far from overflow.
        let p = unsafe { realloc(self.ptr as *mut u8, self.layout, size) };
        assert!(!p.is_null(), "realloc to {size} failed");
        assert_eq!(
            p as usize % self.layout.align(),
            0,
            "realloc to {size} at {p:?}"
        );
        RESIZED.fetch_add(1, Relaxed);
        let kept = self.layout.size().min(size);
        self.ptr = p as usize;
        self.layout = Layout::from_size_align(size, self.layout.align()).expect("a valid layout");
        let (tag, bytes) = (self.tag, self.bytes());
        if let Some(i) = (0..kept).find(|&i| bytes[i] != byte(tag, i)) {
            panic!("realloc to {size} lost byte {i} of {kept}");
        }
        self.fill(kept);
    }
}

/// Frees one of the blocks held, then checks the others.
fn free_one(held: &mut Vec<Block>, rng: &mut Rng) {
    let i = rng.below(held.len());
    held.swap_remove(i).free();
    held.iter()
        .for_each(|b| b.check("after another block's free"));
}

/// One worker: `steps` random steps over the blocks it holds and those
/// handed to it, then it frees all it holds.
fn work(
    me: usize,
    seed: u64,
    steps: usize,
    inbox: Receiver<Vec<Block>>,
    peers: Vec<Sender<Vec<Block>>>,
    done: Arc<Barrier>,
) {
    let mut rng = Rng(seed | 1);
    let mut held: Vec<Block> = Vec::new();
    for step in 0..steps {
        held.extend(inbox.try_iter().flatten());
        match rng.below(10) {
            0..=3 if held.len() < HELD => held.push(Block::new(&mut rng)),
            _ if held.len() > HELD => free_one(&mut held, &mut rng),
            4 | 5 if !held.is_empty() => free_one(&mut held, &mut rng),
            6 if !held.is_empty() => {
                let i = rng.below(held.len());
                held[i].resize(&mut rng);
            }
            7 if held.len() > 4 => {
                let give: Vec<Block> = held.drain(..rng.below(held.len().min(8))).collect();
                let to = rng.below(peers.len());
                if STEPPING.load(Relaxed) & (1 << to) != 0 {
                    let _ = peers[to].send(give);
                } else {
                    held.extend(give);
                }
            }
            8 if step % 64 == 0 => openmed_operator::memory::thread_idle(),
            _ => {}
        }
    }
    STEPPING.fetch_and(!(1 << me), Relaxed);
    drop(peers);
    done.wait();
    held.extend(inbox.try_iter().flatten());
    while let Some(b) = held.pop() {
        b.free();
        held.iter()
            .for_each(|b| b.check("after another block's free"));
    }
}

/// A short-lived thread: takes blocks, frees some (so that its cache keeps
/// them), hands the rest to a worker and ends while they live.
fn short_lived(seed: u64, to: Sender<Vec<Block>>) {
    let mut rng = Rng(seed | 1);
    let mut blocks: Vec<Block> = (0..32).map(|_| Block::new(&mut rng)).collect();
    for b in blocks.drain(..8) {
        b.free();
    }
    for b in &mut blocks[..4] {
        b.resize(&mut rng);
    }
    let _ = to.send(blocks);
}

/// Memcheck must report this: a write to a block after its free, while the
/// cache keeps the block.
fn use_after_free() {
    let layout = Layout::from_size_align(48, 8).expect("a valid layout");
    // SAFETY: deliberately wrong, for memcheck to catch; the cache keeps the
    // block, so the write lands in memory the process still owns.
    unsafe {
        let p = alloc(layout);
        dealloc(p, layout);
        std::ptr::write_volatile(p.add(24), 0x5a);
    }
    println!("wrote to a freed block");
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--use-after-free") {
        return use_after_free();
    }
    let steps: usize = args.first().and_then(|a| a.parse().ok()).unwrap_or(20_000);
    let seed: u64 = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(0x5eed);
    // The cache is the allocator in use: a block just freed is the next
    // one handed out for the same class.
    let layout = Layout::from_size_align(200, 8).expect("a valid layout");
    // SAFETY: a valid non-zero layout; freed once.
    let (a, b) = unsafe {
        let a = alloc(layout);
        dealloc(a, layout);
        let b = alloc(layout);
        dealloc(b, layout);
        (a, b)
    };
    assert_eq!(a, b, "the cache is not the global allocator of this build");
    let (senders, inboxes): (Vec<_>, Vec<_>) = (0..WORKERS).map(|_| channel()).unzip();
    let done = Arc::new(Barrier::new(WORKERS + 1));
    STEPPING.store((1 << WORKERS) - 1, Relaxed);
    let workers: Vec<_> = inboxes
        .into_iter()
        .enumerate()
        .map(|(i, inbox)| {
            let (peers, done) = (senders.clone(), done.clone());
            let s = seed.wrapping_add(i as u64 * 7919);
            std::thread::spawn(move || work(i, s, steps, inbox, peers, done))
        })
        .collect();
    for i in 0..SHORT_LIVED {
        let to = senders[i % WORKERS].clone();
        let s = seed.wrapping_mul(31).wrapping_add(i as u64);
        std::thread::spawn(move || short_lived(s, to))
            .join()
            .expect("a short-lived thread");
    }
    drop(senders);
    done.wait();
    for w in workers {
        w.join().expect("a worker panicked");
    }
    assert_eq!(LIVE.load(Relaxed), 0, "blocks left");
    println!(
        "{WORKERS} workers × {steps} steps and {SHORT_LIVED} short-lived threads, seed {seed}: \
         {} blocks taken, {} freed by another thread, {} resized, {} MB checked: every block held its bytes",
        TAKEN.load(Relaxed),
        FREED_ELSEWHERE.load(Relaxed),
        RESIZED.load(Relaxed),
        CHECKED.load(Relaxed) >> 20
    );
}
