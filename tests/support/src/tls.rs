//! TLS and sockets as a test client needs them: a request from a chosen
//! loopback address, and the certificate a server presented.

use super::*;

/// What a GET over TLS saw: status, head, body and the server's
/// certificate (DER).
pub struct TlsAnswer {
    pub code: u16,
    pub head: String,
    pub body: String,
    pub cert: Vec<u8>,
}

/// GET `path` over TLS with an optional bearer token. With `trust` (a
/// certificate and the name to check it for) the server must present a
/// certificate that verifies against it; without, any certificate is
/// taken and recorded, as a scraper with insecureSkipVerify does.
pub fn tls_get(
    addr: SocketAddr,
    path: &str,
    token: Option<&str>,
    trust: Option<(&[u8], &str)>,
) -> Result<TlsAnswer, String> {
    let sock =
        TcpStream::connect_timeout(&addr, Duration::from_secs(5)).map_err(|e| e.to_string())?;
    tls_get_on(sock, path, token, trust)
}

/// A TCP connection to `to` from the loopback address `from` (loopback
/// has all of 127.0.0.0/8: clients told apart by address).
pub fn connect_from(from: std::net::Ipv4Addr, to: SocketAddr) -> std::io::Result<TcpStream> {
    use std::os::fd::FromRawFd;
    let std::net::SocketAddr::V4(to) = to else {
        return Err(std::io::ErrorKind::Unsupported.into());
    };
    let sockaddr = |ip: std::net::Ipv4Addr, port: u16| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: a new socket, owned by the TcpStream made of it; the
    // addresses are live sockaddr_in values of the length given.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let sock = TcpStream::from_raw_fd(fd);
        let local = sockaddr(from, 0);
        if libc::bind(fd, (&local as *const libc::sockaddr_in).cast(), len) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let remote = sockaddr(*to.ip(), to.port());
        if libc::connect(fd, (&remote as *const libc::sockaddr_in).cast(), len) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(sock)
    }
}

/// [`tls_get`] over a connection already made.
pub fn tls_get_on(
    sock: TcpStream,
    path: &str,
    token: Option<&str>,
    trust: Option<(&[u8], &str)>,
) -> Result<TlsAnswer, String> {
    use rustls::pki_types::{CertificateDer, ServerName};
    use std::sync::Arc;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let recorder = Arc::new(Recorder(std::sync::Mutex::new(Vec::new()), provider));
    let (cfg, name) = match trust {
        Some((cert, name)) => {
            let mut roots = rustls::RootCertStore::empty();
            roots
                .add(CertificateDer::from(cert.to_vec()))
                .map_err(|e| e.to_string())?;
            (builder.with_root_certificates(roots), name)
        }
        None => (
            builder
                .dangerous()
                .with_custom_certificate_verifier(recorder.clone()),
            "localhost",
        ),
    };
    let cfg = Arc::new(cfg.with_no_client_auth());
    let name = ServerName::try_from(name.to_string()).map_err(|e| e.to_string())?;
    let conn = rustls::ClientConnection::new(cfg, name).map_err(|e| e.to_string())?;
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut tls = rustls::StreamOwned::new(conn, sock);
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        tls,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\n{auth}Connection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match tls.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if out.is_empty() => return Err(e.to_string()),
            Err(_) => break,
        }
    }
    let cert = match tls.conn.peer_certificates() {
        Some([first, ..]) => first.to_vec(),
        _ => recorder.0.lock().unwrap().clone(),
    };
    let out = String::from_utf8_lossy(&out).to_string();
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    Ok(TlsAnswer {
        code: status_of(head),
        head: head.to_string(),
        body: body.to_string(),
        cert,
    })
}

/// Takes any server certificate, and keeps it.
#[derive(Debug)]
struct Recorder(
    std::sync::Mutex<Vec<u8>>,
    std::sync::Arc<rustls::crypto::CryptoProvider>,
);

impl rustls::client::danger::ServerCertVerifier for Recorder {
    fn verify_server_cert(
        &self,
        end_entity: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        *self.0.lock().unwrap() = end_entity.to_vec();
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        let algs = &self.1.signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        let algs = &self.1.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algs)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.1.signature_verification_algorithms.supported_schemes()
    }
}
