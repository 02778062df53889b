//! One connection as the event loop holds it: a non-blocking socket, its
//! TLS state (made when the first byte arrives, so an idle socket costs a
//! few dozen bytes), the request head read so far or the answer still to
//! be written, and the instant it is given up.

use super::{Request, MAX_HEAD};
use rustls::{ServerConfig, ServerConnection};
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Shutdown, TcpStream};
use std::sync::Arc;
use std::time::Instant;

/// Reads and writes one call makes on a connection before the loop moves
/// on to the others: a fast client cannot keep the loop to itself.
const ROUNDS: usize = 8;

pub(super) struct Conn {
    pub sock: TcpStream,
    pub peer: IpAddr,
    /// The server's TLS config until the first byte, then the connection.
    tls: Tls,
    phase: Phase,
    /// When the loop closes it, whatever it is doing.
    pub deadline: Instant,
}

enum Tls {
    Plain,
    NotYet(Arc<ServerConfig>),
    On(Box<ServerConnection>),
}

enum Phase {
    Reading(Vec<u8>),
    /// Plain bytes still to send (TLS keeps its own), from this offset.
    Writing(Vec<u8>, usize),
}

/// What a read or write round came to.
pub(super) enum RoundEnd {
    /// Nothing more to do until the socket is ready again.
    Pending,
    /// The request head is in.
    Head(Head),
    /// The answer is written.
    Done,
    /// Closed, failed or not HTTP: drop it.
    Gone,
}

pub(super) enum Head {
    Request(Request),
    TooLarge,
}

impl Conn {
    pub fn new(
        sock: TcpStream,
        peer: IpAddr,
        tls: Option<Arc<ServerConfig>>,
        deadline: Instant,
    ) -> Conn {
        Conn {
            sock,
            peer,
            tls: tls.map_or(Tls::Plain, Tls::NotYet),
            phase: Phase::Reading(Vec::new()),
            deadline,
        }
    }

    /// Whether the loop should wait for the socket to take bytes.
    pub fn wants_write(&self) -> bool {
        match (&self.phase, &self.tls) {
            (_, Tls::On(t)) => t.wants_write(),
            (Phase::Writing(..), _) => true,
            _ => false,
        }
    }

    pub fn is_reading(&self) -> bool {
        matches!(self.phase, Phase::Reading(_))
    }

    /// Read what the socket has, up to the end of the head.
    pub fn read(&mut self) -> RoundEnd {
        if let Tls::NotYet(cfg) = &self.tls {
            match ServerConnection::new(cfg.clone()) {
                Ok(t) => self.tls = Tls::On(Box::new(t)),
                Err(e) => {
                    log::warn!("TLS connection refused: {e}");
                    return RoundEnd::Gone;
                }
            }
        }
        let Phase::Reading(head) = &mut self.phase else {
            return RoundEnd::Pending;
        };
        let mut chunk = [0u8; 1024];
        for _ in 0..ROUNDS {
            let got = match &mut self.tls {
                Tls::On(t) => read_tls(t, &mut self.sock, &mut chunk),
                _ => self.sock.read(&mut chunk),
            };
            match got {
                Ok(0) => return RoundEnd::Gone,
                Ok(n) => head.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => return RoundEnd::Gone,
            }
            if let Some(done) = complete(head, self.peer) {
                return done;
            }
        }
        self.flush_tls()
    }

    /// Queue `answer` (its head and body) and start writing it.
    pub fn answer(&mut self, answer: Vec<u8>, deadline: Instant) {
        self.deadline = deadline;
        match &mut self.tls {
            Tls::On(t) => {
                t.set_buffer_limit(None);
                let _ = t.writer().write_all(&answer);
                t.send_close_notify();
                self.phase = Phase::Writing(Vec::new(), 0);
            }
            _ => self.phase = Phase::Writing(answer, 0),
        }
    }

    /// Write what the socket takes of the answer.
    pub fn write(&mut self) -> RoundEnd {
        if let Tls::On(_) = self.tls {
            return match self.flush_tls() {
                RoundEnd::Pending if !self.wants_write() => RoundEnd::Done,
                p => p,
            };
        }
        let Phase::Writing(out, at) = &mut self.phase else {
            return RoundEnd::Pending;
        };
        for _ in 0..ROUNDS {
            if *at >= out.len() {
                return RoundEnd::Done;
            }
            match self.sock.write(&out[*at..]) {
                Ok(0) => return RoundEnd::Gone,
                Ok(n) => *at += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return RoundEnd::Pending,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return RoundEnd::Gone,
            }
        }
        RoundEnd::Pending
    }

    /// Send what TLS has to send (handshake records, the answer).
    fn flush_tls(&mut self) -> RoundEnd {
        let Tls::On(t) = &mut self.tls else {
            return RoundEnd::Pending;
        };
        for _ in 0..ROUNDS {
            if !t.wants_write() {
                break;
            }
            match t.write_tls(&mut self.sock) {
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return RoundEnd::Gone,
            }
        }
        RoundEnd::Pending
    }

    /// The blocking socket and its TLS state, for an answer streamed by a
    /// thread of its own.
    pub fn into_blocking(self) -> std::io::Result<(TcpStream, Option<Box<ServerConnection>>)> {
        self.sock.set_nonblocking(false)?;
        let tls = match self.tls {
            Tls::On(t) => Some(t),
            _ => None,
        };
        Ok((self.sock, tls))
    }

    pub fn close(self) {
        let _ = self.sock.shutdown(Shutdown::Both);
    }
}

/// One TLS read: records in, decrypted bytes out (WouldBlock: none yet).
fn read_tls(
    t: &mut ServerConnection,
    sock: &mut TcpStream,
    chunk: &mut [u8],
) -> std::io::Result<usize> {
    match t.reader().read(chunk) {
        Ok(n) => return Ok(n),
        Err(e) if e.kind() != ErrorKind::WouldBlock => return Err(e),
        Err(_) => {}
    }
    if t.read_tls(sock)? == 0 {
        return Ok(0);
    }
    if t.process_new_packets().is_err() {
        // Tell the client why (an alert), then give up.
        let _ = t.write_tls(sock);
        return Err(ErrorKind::InvalidData.into());
    }
    match t.reader().read(chunk) {
        // Handshake records only: nothing for the head yet.
        Err(e) if e.kind() == ErrorKind::WouldBlock => {
            while t.wants_write() {
                t.write_tls(sock)?;
            }
            Err(ErrorKind::Interrupted.into())
        }
        other => other,
    }
}

/// The head, if `buf` holds all of it (or more than [`MAX_HEAD`]); Gone
/// when what it holds is not an HTTP head.
fn complete(buf: &[u8], peer: IpAddr) -> Option<RoundEnd> {
    let end = buf.windows(4).any(|w| w == b"\r\n\r\n") || buf.windows(2).any(|w| w == b"\n\n");
    if !end {
        return (buf.len() > MAX_HEAD).then_some(RoundEnd::Head(Head::TooLarge));
    }
    let request = std::str::from_utf8(buf)
        .ok()
        .and_then(|text| super::parse_head(text, peer));
    Some(request.map_or(RoundEnd::Gone, |r| RoundEnd::Head(Head::Request(r))))
}
