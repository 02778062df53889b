//! A CONNECT proxy that alone resolves `kubesim.test`, asks for
//! credentials, and records what it was asked.

use super::*;
use std::net::TcpListener;

pub const PROXY_USER: &str = "omo";

pub const PROXY_PASSWORD: &str = "pr0xy-pa55word-7c1e";

/// What the proxy was asked: one line per CONNECT.
pub type Connects = std::sync::Arc<std::sync::Mutex<Vec<String>>>;

/// A CONNECT proxy on 127.0.0.1 that alone resolves `kubesim.test` (to
/// 127.0.0.1) and asks for credentials; returns its port and its record.
pub fn connect_proxy() -> (u16, Connects) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Connects::default();
    let record = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let seen = seen.clone();
            std::thread::spawn(move || tunnel(conn, &seen));
        }
    });
    (port, record)
}

fn tunnel(mut client: TcpStream, seen: &Connects) {
    let Some(head) = read_head(&mut client) else {
        return;
    };
    let target = head.split_whitespace().nth(1).unwrap_or("").to_string();
    let auth = head
        .lines()
        .find_map(|l| l.strip_prefix("Proxy-Authorization: "))
        .unwrap_or("")
        .to_string();
    seen.lock().unwrap().push(format!("{target} {auth}"));
    let want = format!(
        "Basic {}",
        base64(&format!("{PROXY_USER}:{PROXY_PASSWORD}"))
    );
    let upstream = match target.rsplit_once(':') {
        _ if auth != want => None,
        Some(("kubesim.test", port)) => TcpStream::connect(format!("127.0.0.1:{port}")).ok(),
        _ => None,
    };
    let Some(upstream) = upstream else {
        let _ = client
            .write_all(b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n");
        return;
    };
    client.set_read_timeout(None).ok();
    let _ = client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n");
    let (mut c2, mut u2) = (client.try_clone().unwrap(), upstream.try_clone().unwrap());
    let (mut client, mut upstream) = (client, upstream);
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut c2, &mut u2);
        let _ = u2.shutdown(std::net::Shutdown::Write);
    });
    let _ = std::io::copy(&mut upstream, &mut client);
    let _ = client.shutdown(std::net::Shutdown::Write);
}

pub fn base64(s: &str) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in s.as_bytes().chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            out.push(if i <= chunk.len() {
                T[(n >> (18 - 6 * i) & 63) as usize] as char
            } else {
                '='
            });
        }
    }
    out
}
