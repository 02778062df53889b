//! A small HTTP/1.1 server: thread per connection, keep-alive, optional TLS,
//! chunked streaming for watches, and the ability to "restart" (refuse
//! connections for a while and drop every open one) for fault tests.

use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    /// Percent-decoded path, without the query.
    pub path: String,
    pub raw_query: String,
    pub query: Vec<(String, String)>,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn q(&self, key: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Writes one chunk per call and flushes, so each watch event leaves at once.
pub struct ChunkWriter<'a> {
    w: &'a mut dyn Write,
}

impl ChunkWriter<'_> {
    pub fn send(&mut self, data: &[u8]) -> io::Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        write!(self.w, "{:x}\r\n", data.len())?;
        self.w.write_all(data)?;
        self.w.write_all(b"\r\n")?;
        self.w.flush()
    }
}

pub type StreamFn = Box<dyn FnOnce(&mut ChunkWriter<'_>) -> io::Result<()> + Send>;

pub enum Body {
    Full(Vec<u8>),
    /// Chunked. Returning `Err` drops the connection without the final
    /// chunk, which is how a cut watch looks to a client.
    Stream(StreamFn),
}

pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Body,
}

impl Response {
    pub fn json(status: u16, v: &serde_json::Value) -> Response {
        Response::with_type(status, "application/json", v.to_string().into_bytes())
    }

    pub fn with_type(status: u16, content_type: &str, body: Vec<u8>) -> Response {
        Response {
            status,
            headers: vec![("Content-Type".into(), content_type.into())],
            body: Body::Full(body),
        }
    }

    pub fn header(mut self, k: &str, v: &str) -> Response {
        self.headers.push((k.into(), v.into()));
        self
    }
}

pub type Handler = Arc<dyn Fn(Request) -> Response + Send + Sync>;

trait Conn: Read + Write + Send {}
impl<T: Read + Write + Send> Conn for T {}

pub struct HttpServer {
    addr: SocketAddr,
    tls: Option<Arc<rustls::ServerConfig>>,
    handler: Handler,
    conns: Mutex<HashMap<u64, TcpStream>>,
    next_id: AtomicU64,
    paused_until: Mutex<Option<Instant>>,
    stopping: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl HttpServer {
    /// Bind `addr` (port 0 picks one) and serve in background threads.
    pub fn start(
        addr: SocketAddr,
        tls: Option<Arc<rustls::ServerConfig>>,
        handler: Handler,
    ) -> io::Result<Arc<HttpServer>> {
        let listener = TcpListener::bind(addr)?;
        let server = Arc::new(HttpServer {
            addr: listener.local_addr()?,
            tls,
            handler,
            conns: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            paused_until: Mutex::new(None),
            stopping: AtomicBool::new(false),
        });
        let s = server.clone();
        std::thread::Builder::new()
            .name("kubesim-accept".into())
            .spawn(move || s.accept_loop(listener))?;
        Ok(server)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections accepted so far: each a TLS handshake over TLS.
    pub fn connections(&self) -> u64 {
        self.next_id.load(Ordering::SeqCst) - 1
    }

    /// Behave like an API server restart: drop every connection and refuse
    /// new ones for `d`; state is kept.
    pub fn pause(&self, d: Duration) {
        *lock(&self.paused_until) = Some(Instant::now() + d);
        self.drop_connections();
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
    }

    pub fn drop_connections(&self) {
        for (_, s) in lock(&self.conns).drain() {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.drop_connections();
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
    }

    fn accept_loop(self: Arc<Self>, first: TcpListener) {
        let mut listener = Some(first);
        loop {
            let l = match listener.take() {
                Some(l) => l,
                None => match TcpListener::bind(self.addr) {
                    Ok(l) => l,
                    Err(_) => {
                        std::thread::sleep(Duration::from_millis(20));
                        continue;
                    }
                },
            };
            for stream in l.incoming() {
                if self.stopping.load(Ordering::SeqCst) {
                    return;
                }
                let pause = *lock(&self.paused_until);
                if let Some(until) = pause {
                    drop(stream);
                    drop(l);
                    self.drop_connections();
                    let now = Instant::now();
                    if until > now {
                        std::thread::sleep(until - now);
                    }
                    *lock(&self.paused_until) = None;
                    break;
                }
                let Ok(stream) = stream else { continue };
                let s = self.clone();
                let _ = std::thread::Builder::new()
                    .name("kubesim-conn".into())
                    .spawn(move || s.serve_conn(stream));
            }
            if self.stopping.load(Ordering::SeqCst) {
                return;
            }
        }
    }

    fn serve_conn(self: Arc<Self>, stream: TcpStream) {
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        if let Ok(c) = stream.try_clone() {
            lock(&self.conns).insert(id, c);
        }
        let _ = stream.set_nodelay(true);
        let _ = stream.set_read_timeout(Some(Duration::from_secs(300)));
        let conn: Box<dyn Conn> = match &self.tls {
            Some(cfg) => match rustls::ServerConnection::new(cfg.clone()) {
                Ok(sc) => Box::new(rustls::StreamOwned::new(sc, stream)),
                Err(_) => {
                    lock(&self.conns).remove(&id);
                    return;
                }
            },
            None => Box::new(stream),
        };
        let mut reader = BufReader::with_capacity(16 * 1024, conn);
        loop {
            let req = match read_request(&mut reader) {
                Ok(Some(r)) => r,
                Ok(None) => break,
                Err(e) => {
                    if e.kind() == io::ErrorKind::InvalidData {
                        let resp =
                            Response::with_type(400, "text/plain", e.to_string().into_bytes());
                        let _ = write_response(reader.get_mut(), resp, false);
                    }
                    break;
                }
            };
            let keep_alive = !req
                .header("connection")
                .map(|c| c.eq_ignore_ascii_case("close"))
                .unwrap_or(false);
            let resp = (self.handler)(req);
            match write_response(reader.get_mut(), resp, keep_alive) {
                Ok(true) if keep_alive => continue,
                _ => break,
            }
        }
        lock(&self.conns).remove(&id);
    }
}

const MAX_HEAD: usize = 64 * 1024;
const MAX_BODY: usize = 16 << 20;

fn bad(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_string())
}

fn read_request(r: &mut impl BufRead) -> io::Result<Option<Request>> {
    let mut head = Vec::new();
    loop {
        let mut line = Vec::new();
        let n = r
            .by_ref()
            .take((MAX_HEAD + 1) as u64)
            .read_until(b'\n', &mut line)?;
        if n == 0 {
            return if head.is_empty() {
                Ok(None)
            } else {
                Err(bad("truncated request"))
            };
        }
        if line == b"\r\n" || line == b"\n" {
            if head.is_empty() {
                continue;
            }
            break;
        }
        head.push(String::from_utf8(line).map_err(|_| bad("header is not UTF-8"))?);
        if head.iter().map(String::len).sum::<usize>() > MAX_HEAD {
            return Err(bad("request head too large"));
        }
    }
    let mut parts = head[0].split_whitespace();
    let method = parts.next().ok_or_else(|| bad("no method"))?.to_string();
    let target = parts.next().ok_or_else(|| bad("no target"))?.to_string();
    let headers: Vec<(String, String)> = head[1..]
        .iter()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let (raw_path, raw_query) = match target.split_once('?') {
        Some((p, q)) => (p.to_string(), q.to_string()),
        None => (target.clone(), String::new()),
    };
    let path = percent_decode(&raw_path);
    let query = url::form_urlencoded::parse(raw_query.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    let mut req = Request {
        method,
        path,
        raw_query,
        query,
        headers,
        body: Vec::new(),
    };
    if let Some(len) = req.header("content-length") {
        let len: usize = len.parse().map_err(|_| bad("bad content-length"))?;
        if len > MAX_BODY {
            return Err(bad("body too large"));
        }
        let mut body = vec![0; len];
        r.read_exact(&mut body)?;
        req.body = body;
    } else if req
        .header("transfer-encoding")
        .map(|t| t.eq_ignore_ascii_case("chunked"))
        .unwrap_or(false)
    {
        req.body = read_chunked(r)?;
    }
    Ok(Some(req))
}

fn read_chunked(r: &mut impl BufRead) -> io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let mut line = String::new();
        r.read_line(&mut line)?;
        let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
            .map_err(|_| bad("bad chunk size"))?;
        if size == 0 {
            let mut trailer = String::new();
            while r.read_line(&mut trailer)? > 2 {
                trailer.clear();
            }
            return Ok(body);
        }
        if body.len() + size > MAX_BODY {
            return Err(bad("body too large"));
        }
        let start = body.len();
        body.resize(start + size, 0);
        r.read_exact(&mut body[start..])?;
        let mut crlf = [0u8; 2];
        r.read_exact(&mut crlf)?;
    }
}

pub fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(v) =
                u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or(""), 16)
            {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn reason_phrase(code: u16) -> &'static str {
    match code {
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        302 => "Found",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        409 => "Conflict",
        410 => "Gone",
        415 => "Unsupported Media Type",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Status",
    }
}

/// Returns Ok(true) if the connection may be reused.
fn write_response(w: &mut dyn Conn, resp: Response, keep_alive: bool) -> io::Result<bool> {
    let mut head = format!(
        "HTTP/1.1 {} {}\r\n",
        resp.status,
        reason_phrase(resp.status)
    );
    for (k, v) in &resp.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str(&format!(
        "Date: {}\r\n",
        crate::apiserver::time::http_date(std::time::SystemTime::now())
    ));
    if !keep_alive {
        head.push_str("Connection: close\r\n");
    }
    match resp.body {
        Body::Full(b) => {
            head.push_str(&format!("Content-Length: {}\r\n\r\n", b.len()));
            w.write_all(head.as_bytes())?;
            w.write_all(&b)?;
            w.flush()?;
            Ok(true)
        }
        Body::Stream(f) => {
            head.push_str("Transfer-Encoding: chunked\r\n\r\n");
            w.write_all(head.as_bytes())?;
            w.flush()?;
            let mut cw = ChunkWriter { w: &mut *w };
            f(&mut cw)?;
            w.write_all(b"0\r\n\r\n")?;
            w.flush()?;
            Ok(true)
        }
    }
}
