//! The server's event loop: one thread polls the listener and every open
//! connection (non-blocking, `poll(2)`), so that an idle or trickling
//! client costs a table entry and a descriptor, never a thread or a slot
//! another client needs. Heads complete go to a few workers, which run the
//! handler and hand the connection back with its answer to be written;
//! an answer streamed for as long as the client reads (the live view's
//! events, at most its viewers) gets a thread of its own.
//!
//! At capacity the connection closest to its deadline (the oldest) is
//! closed for the new one: an attacker holding sockets open only pushes
//! out its own, and a client that sends its request at once is served.

use super::conn::{Conn, Head, RoundEnd};
use super::{head_bytes, Answer, Handler, REQUEST_DEADLINE};
use crate::lock::lock;
use rustls::{ServerConfig, StreamOwned};
use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Threads running handlers, per server.
const WORKERS: usize = 2;
/// Heads waiting for a worker; beyond, the loop answers 503 itself.
const QUEUED: usize = 64;
/// Connections accepted per loop round, so the open ones are read too.
const ACCEPTS_PER_ROUND: usize = 256;

/// A complete head and its connection, for a worker.
struct ConnJob {
    conn: Conn,
    head: Head,
}

/// What the workers give back to the loop, and the pipe that wakes it.
struct Returned {
    conns: Mutex<Vec<Conn>>,
    wake: File,
}

impl Returned {
    fn push(&self, conn: Conn) {
        lock(&self.conns).push(conn);
        // Full means a wake-up is pending already.
        let _ = (&self.wake).write(&[1]);
    }
}

/// Start the loop and its workers on `listener`.
pub(super) fn spawn(
    name: &'static str,
    listener: TcpListener,
    tls: Option<Arc<ServerConfig>>,
    handler: Handler,
    capacity: usize,
) -> Result<(), String> {
    let cannot = |e: std::io::Error| format!("cannot start the {name} server: {e}");
    listener.set_nonblocking(true).map_err(cannot)?;
    let (wake_rx, wake_tx) = pipe().map_err(cannot)?;
    let returned = Arc::new(Returned {
        conns: Mutex::new(Vec::new()),
        wake: wake_tx,
    });
    let (jobs, queue) = sync_channel::<ConnJob>(QUEUED);
    let queue = Arc::new(Mutex::new(queue));
    for i in 0..WORKERS {
        let (queue, handler, returned) = (queue.clone(), handler.clone(), returned.clone());
        std::thread::Builder::new()
            .name(format!("{name}-worker-{i}"))
            .spawn(move || work(&queue, &handler, &returned))
            .map_err(cannot)?;
    }
    let mut event_loop = EventLoop {
        listener,
        tls,
        jobs,
        returned,
        wake_rx,
        capacity,
        conns: Vec::new(),
    };
    std::thread::Builder::new()
        .name(format!("{name}-server"))
        .spawn(move || event_loop.run())
        .map_err(cannot)?;
    Ok(())
}

struct EventLoop {
    listener: TcpListener,
    tls: Option<Arc<ServerConfig>>,
    jobs: SyncSender<ConnJob>,
    returned: Arc<Returned>,
    wake_rx: File,
    capacity: usize,
    conns: Vec<Conn>,
}

impl EventLoop {
    fn run(&mut self) {
        let mut fds: Vec<libc::pollfd> = Vec::new();
        loop {
            let back = std::mem::take(&mut *lock(&self.returned.conns));
            self.conns.extend(back);
            fds.clear();
            fds.push(pollfd(self.wake_rx.as_raw_fd(), libc::POLLIN));
            fds.push(pollfd(self.listener.as_raw_fd(), libc::POLLIN));
            for c in &self.conns {
                let mut events = 0;
                if c.is_reading() {
                    events |= libc::POLLIN;
                }
                if c.wants_write() {
                    events |= libc::POLLOUT;
                }
                fds.push(pollfd(c.sock.as_raw_fd(), events));
            }
            // With no connection, nothing is due: sleep until the listener
            // or the wake pipe has something (an idle process stays asleep).
            let wait = self.conns.iter().map(|c| c.deadline).min().map_or(-1, |d| {
                d.saturating_duration_since(Instant::now())
                    .as_millis()
                    .min(1000) as i32
                    + 1
            });
            // SAFETY: `fds` is a live, initialised array of its length.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, wait) };
            if n < 0 {
                if std::io::Error::last_os_error().kind() != ErrorKind::Interrupted {
                    std::thread::sleep(Duration::from_millis(10));
                }
                continue;
            }
            if fds[0].revents != 0 {
                let mut sink = [0u8; 64];
                while matches!(self.wake_rx.read(&mut sink), Ok(n) if n > 0) {}
            }
            self.progress(&fds[2..]);
            if fds[1].revents != 0 {
                self.accept();
            }
        }
    }

    /// Read or write every connection the poll found ready; close those
    /// done, gone or past their deadline; hand complete heads on.
    fn progress(&mut self, ready: &[libc::pollfd]) {
        let now = Instant::now();
        let conns = std::mem::take(&mut self.conns);
        for (mut c, fd) in conns.into_iter().zip(ready) {
            let step = match fd.revents {
                0 => RoundEnd::Pending,
                _ if c.is_reading() => c.read(),
                _ => c.write(),
            };
            match step {
                RoundEnd::Pending if c.deadline > now => self.conns.push(c),
                RoundEnd::Head(head) => self.dispatch(c, head),
                RoundEnd::Pending | RoundEnd::Done | RoundEnd::Gone => c.close(),
            }
        }
    }

    fn dispatch(&mut self, conn: Conn, head: Head) {
        match self.jobs.try_send(ConnJob { conn, head }) {
            Ok(()) => {}
            Err(TrySendError::Full(job)) => {
                let mut conn = job.conn;
                let busy = Answer {
                    headers: vec![("Retry-After", "1")],
                    ..Answer::text(503, "busy; retry in a second\n")
                };
                conn.answer(head_bytes(&busy), Instant::now() + REQUEST_DEADLINE);
                self.conns.push(conn);
            }
            Err(TrySendError::Disconnected(job)) => job.conn.close(),
        }
    }

    fn accept(&mut self) {
        for _ in 0..ACCEPTS_PER_ROUND {
            match self.listener.accept() {
                Ok((sock, peer)) => {
                    if sock.set_nonblocking(true).is_err() {
                        continue;
                    }
                    let _ = sock.set_nodelay(true);
                    if self.conns.len() >= self.capacity {
                        self.evict_oldest();
                    }
                    let deadline = Instant::now() + REQUEST_DEADLINE;
                    let conn = Conn::new(sock, peer.ip(), self.tls.clone(), deadline);
                    self.conns.push(conn);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                    // Out of descriptors: free one of ours, or wait a moment
                    // rather than spin on a listener that stays readable.
                    if !self.evict_oldest() {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    return;
                }
                Err(e) if matches!(e.raw_os_error(), Some(libc::ECONNABORTED | libc::EINTR)) => {}
                Err(e) => {
                    log::debug!("accepting a connection failed: {e}");
                    std::thread::sleep(Duration::from_millis(10));
                    return;
                }
            }
        }
    }

    /// Close the connection whose deadline comes first.
    fn evict_oldest(&mut self) -> bool {
        let oldest = (0..self.conns.len()).min_by_key(|&i| self.conns[i].deadline);
        match oldest {
            Some(i) => {
                self.conns.swap_remove(i).close();
                true
            }
            None => false,
        }
    }
}

/// What a streamed answer may leave unsent in the kernel (doubled there):
/// a viewer that stops reading blocks its writer after this much, not after
/// the kernel's megabytes, and the write deadline then frees its place; 16
/// viewers hold 0.5 MiB of kernel memory at most, not 64.
const STREAM_SEND_BUFFER: libc::c_int = 16 * 1024;

fn limit_send_buffer(sock: &TcpStream) {
    let size = STREAM_SEND_BUFFER;
    let len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: an int option, of its own size, on a socket this thread owns.
    let rc = unsafe {
        let opt = std::ptr::addr_of!(size).cast();
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            opt,
            len,
        )
    };
    if rc != 0 {
        log::debug!(
            "stream send buffer left as it was: {}",
            std::io::Error::last_os_error()
        );
    }
}

fn pollfd(fd: i32, events: libc::c_short) -> libc::pollfd {
    libc::pollfd {
        fd,
        events,
        revents: 0,
    }
}

/// A non-blocking pipe: (read end, write end).
fn pipe() -> std::io::Result<(File, File)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors are new and owned by nothing else.
    Ok(unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) })
}

/// A worker: run the handler for each head, give the answer back to the
/// loop (or stream it on a thread of its own).
fn work(queue: &Mutex<Receiver<ConnJob>>, handler: &Handler, returned: &Returned) {
    loop {
        let Ok(ConnJob { mut conn, head }) = lock(queue).recv() else {
            return;
        };
        let mut answer = match head {
            Head::Request(r) => handler(&r),
            Head::TooLarge => Answer::text(431, "request head too large\n"),
        };
        // The head first: a stream's has no Content-Length.
        let mut bytes = head_bytes(&answer);
        if let Some(body) = answer.stream.take() {
            stream(conn, bytes, body);
            continue;
        }
        bytes.extend_from_slice(answer.body.as_bytes());
        conn.answer(bytes, Instant::now() + REQUEST_DEADLINE);
        returned.push(conn);
    }
}

/// Write `head`, then let `body` write for as long as it likes, each
/// write within [`REQUEST_DEADLINE`], on a thread of its own.
fn stream(conn: Conn, head: Vec<u8>, body: super::StreamBody) {
    let spawned = std::thread::Builder::new()
        .name("http-stream".into())
        .spawn(move || {
            let Ok((sock, tls)) = conn.into_blocking() else {
                return;
            };
            if sock.set_write_timeout(Some(REQUEST_DEADLINE)).is_err() {
                return;
            }
            limit_send_buffer(&sock);
            match tls {
                Some(t) => {
                    let mut s = StreamOwned::new(*t, sock);
                    if s.write_all(&head).and_then(|()| s.flush()).is_ok() {
                        body(&mut s);
                    }
                    s.conn.send_close_notify();
                    let _ = s.flush();
                }
                None => {
                    let mut s: TcpStream = sock;
                    if s.write_all(&head).is_ok() {
                        body(&mut s);
                    }
                }
            }
        });
    if let Err(e) = spawned {
        log::warn!("cannot stream an answer: {e}");
    }
}
