//! SIGTERM / SIGINT handling without a signal crate: the handler only sets
//! an atomic flag, which is async-signal-safe; the main thread polls it.

use std::sync::atomic::{AtomicBool, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);

const SIGINT: i32 = 2;
const SIGTERM: i32 = 15;

extern "C" {
    // From the C library std already links; `sighandler_t signal(int, sighandler_t)`.
    fn signal(signum: i32, handler: extern "C" fn(i32)) -> usize;
}

extern "C" fn on_signal(_: i32) {
    STOP.store(true, Ordering::SeqCst);
}

/// Route SIGTERM and SIGINT to [`stop_requested`].
pub fn install() {
    // SAFETY: `on_signal` only stores to a static atomic, which is
    // async-signal-safe; `signal` is called with valid signal numbers.
    unsafe {
        signal(SIGTERM, on_signal);
        signal(SIGINT, on_signal);
    }
}

pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}
