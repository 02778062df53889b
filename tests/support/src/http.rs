//! Reading a request as a bare server does.

use super::*;

/// A request's line and headers, read a byte at a time (so nothing after
/// them is taken: a CONNECT tunnel's first bytes stay in the socket); None
/// if the client goes away or sends more than 8 KiB.
pub fn read_head(conn: &mut TcpStream) -> Option<String> {
    conn.set_read_timeout(Some(Duration::from_secs(5))).ok();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match conn.read(&mut b) {
            Ok(1) if head.len() < 8192 => head.push(b[0]),
            _ => return None,
        }
    }
    Some(String::from_utf8_lossy(&head).to_string())
}
