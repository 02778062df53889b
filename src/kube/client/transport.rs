//! The TCP layer under ureq's TLS, made to spend fewer system calls than
//! ureq's own (docs/performance.md, "System calls"): per request, ureq's
//! set the socket's timeouts before every read and write (the deadline
//! moves, so the value always changed), probed a pooled connection with
//! three calls (non-blocking on, a read, non-blocking off) each time it was
//! returned and taken, and sent a request's head and body apart.
//!
//! Here a socket keeps its timeout while it lies within [`SLACK`] above what
//! is left of the request's deadline, so a read or write ends at most that
//! late; the probe is one non-blocking peek; and what is written waits until
//! the request next reads, when it goes out in one send.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use ureq::unversioned::transport::{
    Buffers, ConnectionDetails, Connector, Either, LazyBuffers, NextTimeout, ShutdownHandle,
    Transport,
};
use ureq::Timeout;

/// How far above the time left a socket's timeout may stay.
pub(super) const SLACK: Duration = Duration::from_millis(250);

/// Written bytes held beyond this are sent at once, not held for the read.
const HOLD_AT_MOST: usize = 64 * 1024;

/// Under TLS this link only stages ciphertext for rustls, which takes at
/// most a few KiB a read and writes a record at a time: a record's worth
/// in keeps one read a record, and a little out is copied into
/// [`LeanTcp::held`] anyway. ureq's sizes are the HTTP layer's, which this
/// link is only for plain HTTP; a pooled connection keeps both
/// (docs/performance.md, memory per connection).
const TLS_IN: usize = 16 * 1024 + 512;
const TLS_OUT: usize = 4 * 1024;

/// Opens plain TCP connections (the first link of the chain, under
/// ureq's CONNECT proxy and TLS connectors).
#[derive(Debug, Default)]
pub(super) struct LeanTcpConnector;

impl<In: Transport> Connector<In> for LeanTcpConnector {
    type Out = Either<In, LeanTcp>;

    fn connect(
        &self,
        details: &ConnectionDetails,
        chained: Option<In>,
    ) -> Result<Option<Self::Out>, ureq::Error> {
        if let Some(t) = chained {
            return Ok(Some(Either::A(t)));
        }
        let stream = Arc::new(connect(details)?);
        (details.register_shutdown)(Arc::downgrade(&stream) as Weak<dyn ShutdownHandle>)?;
        let cfg = details.config;
        let buffers = if details.uri.scheme_str() == Some("https") {
            LazyBuffers::new(TLS_IN, TLS_OUT)
        } else {
            LazyBuffers::new(cfg.input_buffer_size(), cfg.output_buffer_size())
        };
        Ok(Some(Either::B(LeanTcp {
            stream,
            buffers,
            held: Vec::new(),
            read_timeout: None,
            write_timeout: None,
            used: false,
        })))
    }
}

/// Each resolved address in turn, each with what is left of the connect
/// deadline.
fn connect(details: &ConnectionDetails) -> Result<TcpStream, ureq::Error> {
    let deadline = time_left(&details.timeout)?.map(|t| Instant::now() + t);
    let mut last = None;
    for addr in details.addrs.iter() {
        let stream = match deadline {
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(ureq::Error::Timeout(details.timeout.reason));
                }
                TcpStream::connect_timeout(addr, left)
            }
            None => TcpStream::connect(addr),
        };
        match stream {
            Ok(s) => {
                if details.config.no_delay() {
                    s.set_nodelay(true)?;
                }
                return Ok(s);
            }
            Err(e) => last = Some(timed_out(e, details.timeout.reason, addr)),
        }
    }
    Err(last.unwrap_or_else(|| {
        ureq::Error::Io(io::Error::new(
            io::ErrorKind::ConnectionRefused,
            "no address to connect to",
        ))
    }))
}

fn timed_out(e: io::Error, reason: Timeout, addr: &SocketAddr) -> ureq::Error {
    match e.kind() {
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => ureq::Error::Timeout(reason),
        _ => {
            log::debug!("connecting to {addr}: {e}");
            ureq::Error::Io(e)
        }
    }
}

/// What is left before `t` expires: None when it never does, an error when
/// it already has.
fn time_left(t: &NextTimeout) -> Result<Option<Duration>, ureq::Error> {
    if t.after.is_not_happening() {
        return Ok(None);
    }
    if t.after.is_zero() {
        return Err(ureq::Error::Timeout(t.reason));
    }
    Ok(Some(*t.after))
}

/// Whether a socket whose timeout is `held` must be given `want`: when it
/// would end sooner than allowed, or more than [`SLACK`] later.
fn must_set(held: Option<Duration>, want: Option<Duration>) -> bool {
    match (held, want) {
        (None, None) => false,
        (Some(h), Some(w)) => h < w || h > w + SLACK,
        _ => true,
    }
}

/// One TCP connection.
#[derive(Debug)]
pub(super) struct LeanTcp {
    stream: Arc<TcpStream>,
    buffers: LazyBuffers,
    /// Written, not yet sent: sent with the next read or when large.
    held: Vec<u8>,
    read_timeout: Option<Duration>,
    write_timeout: Option<Duration>,
    /// Bytes moved since ureq last asked [`Transport::is_open`].
    used: bool,
}

impl LeanTcp {
    fn send_held(&mut self, timeout: NextTimeout) -> Result<(), ureq::Error> {
        if self.held.is_empty() {
            return Ok(());
        }
        let t = timeout.for_write();
        let want = time_left(&t)?;
        if must_set(self.write_timeout, want) {
            self.stream.set_write_timeout(want)?;
            self.write_timeout = want;
        }
        let sent = (&*self.stream).write_all(&self.held);
        self.held.clear();
        if self.held.capacity() > 4 * 1024 {
            self.held = Vec::new();
        }
        sent.map_err(|e| timed_out(e, t.reason, &peer(&self.stream)))
    }
}

fn peer(s: &TcpStream) -> SocketAddr {
    s.peer_addr()
        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)))
}

impl Transport for LeanTcp {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), ureq::Error> {
        self.used = true;
        let out = self.buffers.output().get(..amount).unwrap_or_default();
        self.held.extend_from_slice(out);
        if self.held.len() >= HOLD_AT_MOST {
            self.send_held(timeout)?;
        }
        Ok(())
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        self.used = true;
        self.send_held(timeout)?;
        let t = timeout.for_read();
        let want = time_left(&t)?;
        let deadline = want.map(|w| Instant::now() + w);
        if must_set(self.read_timeout, want) {
            self.stream.set_read_timeout(want)?;
            self.read_timeout = want;
        }
        let input = self.buffers.input_append_buf();
        let read = loop {
            match (&*self.stream).read(input) {
                // A signal: again, with the time that is left.
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                    let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
                    if left.is_some_and(|l| l.is_zero()) {
                        return Err(ureq::Error::Timeout(t.reason));
                    }
                    if must_set(self.read_timeout, left) {
                        self.stream.set_read_timeout(left)?;
                        self.read_timeout = left;
                    }
                }
                r => break r,
            }
        };
        let n = read.map_err(|e| timed_out(e, t.reason, &peer(&self.stream)))?;
        self.buffers.input_appended(n);
        Ok(n > 0)
    }

    /// Open while a non-blocking peek finds nothing to read: bytes waiting
    /// (an answer nobody asked for), an end of stream or an error all say
    /// the connection cannot carry another request.
    ///
    /// ureq asks twice: as an answered request puts the connection back in
    /// its pool, and as the next request takes it out. Only the second
    /// looks: it sees all the first would have (stray bytes stay, a close
    /// stays), and a connection put back closed is dropped when taken.
    fn is_open(&mut self) -> bool {
        if std::mem::take(&mut self.used) {
            return true;
        }
        let mut byte = [0u8; 1];
        // SAFETY: the descriptor is this stream's, open while `self` lives;
        // the buffer is one byte, as the length says.
        let n = unsafe {
            libc::recv(
                self.stream.as_raw_fd(),
                byte.as_mut_ptr().cast(),
                1,
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::WouldBlock
    }
}

#[cfg(test)]
mod tests;
