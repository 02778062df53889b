//! SIGTERM / SIGINT handling without a signal crate: the handler only sets
//! an atomic flag, which is async-signal-safe; the main thread polls it.

use std::sync::atomic::{AtomicBool, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Route SIGTERM and SIGINT to [`stop_requested`].
pub fn install() {
    // SAFETY: `on_signal` only stores to a static atomic, which is
    // async-signal-safe. The zeroed `sigaction` is a valid value (empty
    // mask, no flags) before the fields are set; SA_RESTART keeps the
    // semantics `signal` had, so interrupted system calls resume.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        for signum in [libc::SIGTERM, libc::SIGINT] {
            libc::sigaction(signum, &action, std::ptr::null_mut());
        }
    }
}

pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}
