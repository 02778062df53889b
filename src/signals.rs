//! SIGTERM / SIGINT without a signal crate, as a self-pipe: the handler
//! only writes one byte to a pipe (`write(2)` is async-signal-safe), and a
//! thread blocked reading the other end turns it into [`Stop::stop`], which
//! wakes every loop at once.

use crate::runtime::Stop;
use std::io;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

/// The pipe's write end, for the handler; -1 until installed.
static WAKE_FD: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_signal(_: libc::c_int) {
    let fd = WAKE_FD.load(Ordering::SeqCst);
    if fd < 0 {
        return;
    }
    // SAFETY: `write` on a pipe is async-signal-safe, and the byte is a
    // static. The write end is non-blocking: a full pipe (a stop already
    // pending) drops the byte instead of blocking the handler. errno is
    // put back for the code the signal interrupted.
    unsafe {
        let saved = errno();
        let _ = libc::write(fd, b"s".as_ptr().cast(), 1);
        set_errno(saved);
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
unsafe fn errno_location() -> *mut libc::c_int {
    libc::__errno_location()
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
unsafe fn errno_location() -> *mut libc::c_int {
    libc::__error()
}

unsafe fn errno() -> libc::c_int {
    *errno_location()
}

unsafe fn set_errno(value: libc::c_int) {
    *errno_location() = value;
}

/// Route SIGTERM and SIGINT to `stop`: the first of either stops it.
pub fn install(stop: Arc<Stop>) -> io::Result<()> {
    let (read_fd, write_fd) = pipe()?;
    WAKE_FD.store(write_fd, Ordering::SeqCst);
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            if wait_for_byte(read_fd) {
                stop.stop();
            }
        })?;
    // SAFETY: `on_signal` only loads an atomic and writes to a pipe, both
    // async-signal-safe. The zeroed `sigaction` is a valid value (empty
    // mask, no flags) before the fields are set; SA_RESTART keeps the
    // semantics `signal` had, so interrupted system calls resume.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        for signum in [libc::SIGTERM, libc::SIGINT] {
            if libc::sigaction(signum, &action, std::ptr::null_mut()) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

/// A pipe, both ends close-on-exec, the write end non-blocking.
fn pipe() -> io::Result<(libc::c_int, libc::c_int)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` has room for the two descriptors `pipe` writes; the
    // `fcntl` calls only set flags on descriptors this call owns.
    unsafe {
        if libc::pipe(fds.as_mut_ptr()) != 0 {
            return Err(io::Error::last_os_error());
        }
        for fd in fds {
            if libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        let flags = libc::fcntl(fds[1], libc::F_GETFL);
        if flags < 0 || libc::fcntl(fds[1], libc::F_SETFL, flags | libc::O_NONBLOCK) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok((fds[0], fds[1]))
}

/// Block until a byte arrives on `fd`: true, or false if reading it
/// failed for good (logged; the process then stops only by SIGKILL).
fn wait_for_byte(fd: libc::c_int) -> bool {
    let mut byte = 0u8;
    loop {
        // SAFETY: reads at most one byte into a local.
        let n = unsafe { libc::read(fd, (&mut byte as *mut u8).cast(), 1) };
        if n == 1 {
            return true;
        }
        let e = io::Error::last_os_error();
        if n < 0 && e.kind() == io::ErrorKind::Interrupted {
            continue;
        }
        log::error!("the stop signal can no longer be read: {e}");
        return false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The handler's path without a signal: a byte on the pipe stops the
    /// token, from the reading thread.
    #[test]
    fn a_byte_on_the_pipe_stops_the_token() {
        let (read_fd, write_fd) = pipe().unwrap();
        let stop = Arc::new(Stop::new());
        let s = stop.clone();
        std::thread::spawn(move || {
            if wait_for_byte(read_fd) {
                s.stop();
            }
        });
        assert!(!stop.wait(Duration::from_millis(20)));
        // SAFETY: one byte from a static to a descriptor this test owns.
        let n = unsafe { libc::write(write_fd, b"s".as_ptr().cast(), 1) };
        assert_eq!(n, 1);
        assert!(stop.wait(Duration::from_secs(5)));
    }
}
