//! The metrics endpoint's TLS certificate: read from
//! `--metrics-cert-dir` (`tls.crt`, `tls.key`, re-read when they change, as
//! cert-manager rotates a mounted Secret), or, without one, a self-signed
//! certificate made at start, as controller-runtime does.
//!
//! The self-signed one is built here, in DER, from RFC 5280's structures: a
//! P-256 key from ring (rustls's provider, already in the graph), a v3
//! certificate naming the Service's DNS names and loopback, signed with
//! ECDSA-SHA256. No certificate crate is needed for one fixed shape.

use crate::lock::lock;
use rustls::crypto::ring::sign::any_supported_type;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// How long a self-signed certificate is valid (renewed a day before).
const SELF_SIGNED_FOR: Duration = Duration::from_secs(365 * 86_400);
/// Certificate files are looked at no more often than this.
const RECHECK: Duration = Duration::from_secs(1);

/// A rustls server configuration for `source` (TLS 1.2 and 1.3, no client
/// certificates: callers authenticate with a bearer token).
pub fn server_config(source: Arc<dyn ResolvesServerCert>) -> Result<rustls::ServerConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_no_client_auth()
        .with_cert_resolver(source))
}

/// A certificate and key made here, and remade before they expire.
#[derive(Debug)]
pub struct SelfSigned {
    names: Vec<String>,
    current: Mutex<(Arc<CertifiedKey>, SystemTime)>,
}

impl SelfSigned {
    /// For `names`: DNS names, or IP addresses written as such.
    pub fn new(names: Vec<String>) -> Result<SelfSigned, String> {
        let now = SystemTime::now();
        let made = make(&names, now)?;
        Ok(SelfSigned {
            names,
            current: Mutex::new((made, now + SELF_SIGNED_FOR)),
        })
    }

    fn current(&self) -> Option<Arc<CertifiedKey>> {
        let mut cur = lock(&self.current);
        let now = SystemTime::now();
        if now + Duration::from_secs(86_400) > cur.1 {
            match make(&self.names, now) {
                Ok(k) => *cur = (k, now + SELF_SIGNED_FOR),
                Err(e) => log::warn!("cannot renew the metrics certificate: {e}"),
            }
        }
        Some(cur.0.clone())
    }
}

impl ResolvesServerCert for SelfSigned {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current()
    }
}

/// The names the self-signed certificate carries: the metrics Service's
/// names in `namespace` (if known), localhost and the loopback addresses.
pub fn default_names(namespace: Option<&str>) -> Vec<String> {
    let mut names = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
    names.push(SERVICE.into());
    if let Some(ns) = namespace {
        for suffix in ["", ".svc", ".svc.cluster.local"] {
            names.push(format!("{SERVICE}.{ns}{suffix}"));
        }
    }
    names
}

/// The metrics Service the manifests ship.
const SERVICE: &str = "openmed-operator-metrics";

fn make(names: &[String], now: SystemTime) -> Result<Arc<CertifiedKey>, String> {
    let (cert, key) = self_signed(names, now)?;
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key));
    let signer = any_supported_type(&key).map_err(|e| format!("the new key: {e}"))?;
    Ok(Arc::new(CertifiedKey::new(
        vec![CertificateDer::from(cert)],
        signer,
    )))
}

/// A new P-256 key (PKCS#8 DER) and a certificate for it, signed by itself,
/// valid from an hour before `now` (clock skew) for [`SELF_SIGNED_FOR`].
pub fn self_signed(names: &[String], now: SystemTime) -> Result<(Vec<u8>, Vec<u8>), String> {
    use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_ASN1_SIGNING as ALG};
    let rng = ring::rand::SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ALG, &rng).map_err(|_| "no key made".to_string())?;
    let pair = EcdsaKeyPair::from_pkcs8(&ALG, pkcs8.as_ref(), &rng)
        .map_err(|_| "the key made is unusable".to_string())?;
    let mut serial = [0u8; 16];
    ring::rand::SecureRandom::fill(&rng, &mut serial).map_err(|_| "no randomness".to_string())?;
    // Positive and minimal in DER (a leading 0x00 before a byte below 0x80
    // is refused by strict parsers, Go's among them): 0x40..=0x7f.
    serial[0] = (serial[0] & 0x7f) | 0x40;
    let from = now.checked_sub(Duration::from_secs(3600)).unwrap_or(now);
    let tbs = der::tbs_certificate(
        &serial,
        names,
        pair.public_key().as_ref(),
        from,
        now + SELF_SIGNED_FOR,
    );
    let sig = pair
        .sign(&rng, &tbs)
        .map_err(|_| "cannot sign the certificate".to_string())?;
    let cert = der::seq(&[&tbs, &der::ecdsa_sha256(), &der::bit_string(sig.as_ref())]);
    Ok((cert, pkcs8.as_ref().to_vec()))
}

/// `tls.crt` and `tls.key` in a directory, re-read when either changes
/// (checked at most once a second, on a handshake). A broken pair (half
/// written, mismatched) keeps the last good one and is logged.
#[derive(Debug)]
pub struct CertDir {
    dir: PathBuf,
    state: Mutex<Loaded>,
}

#[derive(Debug)]
struct Loaded {
    stamp: Option<FileStamp>,
    /// A pair that failed to load, not retried (nor logged) until it changes.
    refused: Option<FileStamp>,
    checked: Instant,
    key: Arc<CertifiedKey>,
}

/// What tells a changed file: modification time and size of each.
type FileStamp = [(SystemTime, u64); 2];

impl CertDir {
    /// Load the pair now: a directory without a usable one fails the start.
    pub fn open(dir: &Path) -> Result<CertDir, String> {
        let stamp = stamp(dir);
        let key = load(dir)?;
        Ok(CertDir {
            dir: dir.to_path_buf(),
            state: Mutex::new(Loaded {
                stamp,
                refused: None,
                checked: Instant::now(),
                key,
            }),
        })
    }

    fn current(&self) -> Arc<CertifiedKey> {
        let mut s = lock(&self.state);
        if s.checked.elapsed() >= RECHECK {
            s.checked = Instant::now();
            let now = stamp(&self.dir);
            if now != s.stamp && now != s.refused {
                match load(&self.dir) {
                    Ok(key) => {
                        log::info!("metrics certificate reloaded from {}", self.dir.display());
                        s.key = key;
                        s.stamp = now;
                    }
                    // Tried again once either file changes (the other one
                    // may be on its way).
                    Err(e) => {
                        log::warn!("keeping the metrics certificate: {e}");
                        s.refused = now;
                    }
                }
            }
        }
        s.key.clone()
    }
}

impl ResolvesServerCert for CertDir {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

fn stamp(dir: &Path) -> Option<FileStamp> {
    let one = |f: &str| {
        let m = std::fs::metadata(dir.join(f)).ok()?;
        Some((m.modified().ok()?, m.len()))
    };
    Some([one("tls.crt")?, one("tls.key")?])
}

fn load(dir: &Path) -> Result<Arc<CertifiedKey>, String> {
    let (crt, key) = (dir.join("tls.crt"), dir.join("tls.key"));
    let chain = CertificateDer::pem_file_iter(&crt)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("{}: {e}", crt.display()))?;
    if chain.is_empty() {
        return Err(format!("{}: no certificate", crt.display()));
    }
    let key = PrivateKeyDer::from_pem_file(&key).map_err(|e| format!("{}: {e}", key.display()))?;
    let signer = any_supported_type(&key).map_err(|e| format!("{}: {e}", dir.display()))?;
    let pair = CertifiedKey::new(chain, signer);
    match pair.keys_match() {
        Ok(()) | Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => {
            Ok(Arc::new(pair))
        }
        Err(e) => Err(format!("{}: tls.crt and tls.key: {e}", dir.display())),
    }
}

/// The DER (X.690) a v3 certificate needs, and nothing more.
mod der {
    use super::IpAddr;
    use std::time::SystemTime;

    pub fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        let n = content.len();
        if n < 0x80 {
            out.push(n as u8);
        } else {
            let bytes = n.to_be_bytes();
            let skip = bytes.iter().take_while(|b| **b == 0).count();
            out.push(0x80 | (bytes.len() - skip) as u8);
            out.extend_from_slice(&bytes[skip..]);
        }
        out.extend_from_slice(content);
        out
    }

    pub fn seq(parts: &[&[u8]]) -> Vec<u8> {
        tlv(0x30, &parts.concat())
    }

    pub fn oid(arcs: &[u64]) -> Vec<u8> {
        let mut body = Vec::new();
        let first = std::iter::once(arcs[0] * 40 + arcs[1]);
        for arc in first.chain(arcs[2..].iter().copied()) {
            let mut groups = vec![(arc & 0x7f) as u8];
            let mut rest = arc >> 7;
            while rest > 0 {
                groups.push(0x80 | (rest & 0x7f) as u8);
                rest >>= 7;
            }
            body.extend(groups.iter().rev());
        }
        tlv(0x06, &body)
    }

    pub fn bit_string(bits: &[u8]) -> Vec<u8> {
        tlv(0x03, &[&[0u8][..], bits].concat())
    }

    /// AlgorithmIdentifier for ecdsa-with-SHA256 (no parameters).
    pub fn ecdsa_sha256() -> Vec<u8> {
        seq(&[&oid(&[1, 2, 840, 10045, 4, 3, 2])])
    }

    /// UTCTime through 2049, GeneralizedTime after (RFC 5280 4.1.2.5).
    fn time(t: SystemTime) -> Vec<u8> {
        // 2026-11-30T02:37:22Z → 20261130023722Z
        let digits: String = crate::time::rfc3339(t)
            .chars()
            .filter(char::is_ascii_digit)
            .collect();
        if digits.as_str() < "2050" {
            tlv(0x17, format!("{}Z", &digits[2..]).as_bytes())
        } else {
            tlv(0x18, format!("{digits}Z").as_bytes())
        }
    }

    fn extension(id: &[u64], critical: bool, value: &[u8]) -> Vec<u8> {
        let crit = if critical {
            tlv(0x01, &[0xff])
        } else {
            Vec::new()
        };
        seq(&[&oid(id), &crit, &tlv(0x04, value)])
    }

    /// subjectAltName: dNSName [2] or iPAddress [7] per name.
    fn alt_names(names: &[String]) -> Vec<u8> {
        let each: Vec<Vec<u8>> = names
            .iter()
            .map(|n| match n.parse::<IpAddr>() {
                Ok(IpAddr::V4(a)) => tlv(0x87, &a.octets()),
                Ok(IpAddr::V6(a)) => tlv(0x87, &a.octets()),
                Err(_) => tlv(0x82, n.as_bytes()),
            })
            .collect();
        tlv(0x30, &each.concat())
    }

    pub fn tbs_certificate(
        serial: &[u8],
        names: &[String],
        public_key: &[u8],
        from: SystemTime,
        until: SystemTime,
    ) -> Vec<u8> {
        let cn = seq(&[&oid(&[2, 5, 4, 3]), &tlv(0x0c, b"openmed-operator")]);
        let name = seq(&[&tlv(0x31, &cn)]);
        let spki = seq(&[
            &seq(&[
                &oid(&[1, 2, 840, 10045, 2, 1]),
                &oid(&[1, 2, 840, 10045, 3, 1, 7]),
            ]),
            &bit_string(public_key),
        ]);
        let server_auth = seq(&[&oid(&[1, 3, 6, 1, 5, 5, 7, 3, 1])]);
        let extensions = seq(&[
            // keyUsage: digitalSignature.
            &extension(&[2, 5, 29, 15], true, &tlv(0x03, &[0x07, 0x80])),
            &extension(&[2, 5, 29, 37], false, &server_auth),
            &extension(&[2, 5, 29, 17], false, &alt_names(names)),
        ]);
        seq(&[
            &tlv(0xa0, &tlv(0x02, &[2])),
            &tlv(0x02, serial),
            &ecdsa_sha256(),
            &name,
            &seq(&[&time(from), &time(until)]),
            &name,
            &spki,
            &tlv(0xa3, &extensions),
        ])
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn lengths_and_object_identifiers_encode_as_x690_says() {
            assert_eq!(tlv(0x04, &[1, 2]), vec![0x04, 2, 1, 2]);
            let long = tlv(0x04, &[0; 300]);
            assert_eq!(&long[..4], &[0x04, 0x82, 0x01, 0x2c]);
            // 1.2.840.10045.2.1 (id-ecPublicKey), from RFC 5480.
            assert_eq!(
                oid(&[1, 2, 840, 10045, 2, 1]),
                vec![0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01]
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::pki_types::ServerName;

    /// A TLS handshake in memory: the client trusts only `roots`.
    fn handshake(
        server: rustls::ServerConfig,
        roots: &[CertificateDer<'static>],
        name: &str,
    ) -> Result<(), rustls::Error> {
        let mut store = rustls::RootCertStore::empty();
        for r in roots {
            store.add(r.clone())?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(store)
            .with_no_client_auth();
        let name = ServerName::try_from(name.to_string())
            .map_err(|_| rustls::Error::General("name".into()))?;
        let mut c = rustls::ClientConnection::new(Arc::new(client), name)?;
        let mut s = rustls::ServerConnection::new(Arc::new(server))?;
        for _ in 0..10 {
            pass(&mut c, &mut s)?;
            pass(&mut s, &mut c)?;
            if !c.is_handshaking() && !s.is_handshaking() {
                return Ok(());
            }
        }
        Err(rustls::Error::General("handshake did not finish".into()))
    }

    /// What `from` has to send, read and processed by `to`.
    fn pass<A, B, DA, DB>(from: &mut A, to: &mut B) -> Result<(), rustls::Error>
    where
        A: std::ops::DerefMut<Target = rustls::ConnectionCommon<DA>>,
        B: std::ops::DerefMut<Target = rustls::ConnectionCommon<DB>>,
        DB: rustls::SideData,
        DA: rustls::SideData,
    {
        let io = |e: std::io::Error| rustls::Error::General(e.to_string());
        let mut buf = Vec::new();
        from.write_tls(&mut buf).map_err(io)?;
        to.read_tls(&mut buf.as_slice()).map_err(io)?;
        to.process_new_packets().map(|_| ())
    }

    #[test]
    fn the_self_signed_certificate_verifies_for_its_names_and_no_others() {
        let names = default_names(Some("openmed-system"));
        let signed = Arc::new(SelfSigned::new(names).unwrap());
        let cert = signed.current().unwrap().cert[0].clone();
        let cfg = || server_config(signed.clone()).unwrap();
        for name in [
            "openmed-operator-metrics.openmed-system.svc",
            "localhost",
            "127.0.0.1",
        ] {
            handshake(cfg(), std::slice::from_ref(&cert), name).unwrap();
        }
        let wrong = handshake(cfg(), std::slice::from_ref(&cert), "example.com").unwrap_err();
        assert!(wrong.to_string().contains("not valid for name"), "{wrong}");
        // Another self-signed certificate is not trusted for this one.
        let other = SelfSigned::new(default_names(None)).unwrap();
        let stranger = other.current().unwrap().cert[0].clone();
        let refused = handshake(cfg(), &[stranger], "localhost").unwrap_err();
        assert!(
            refused.to_string().contains("invalid peer certificate"),
            "{refused}"
        );
    }

    fn pem(label: &str, der: &[u8]) -> String {
        // Base64 without a crate: the alphabet and 3-to-4 grouping.
        const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut b64 = String::new();
        for chunk in der.chunks(3) {
            let n = chunk.iter().fold(0u32, |acc, b| acc << 8 | u32::from(*b))
                << (8 * (3 - chunk.len()));
            for i in 0..4 {
                if i <= chunk.len() {
                    b64.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
                } else {
                    b64.push('=');
                }
            }
        }
        let lines: Vec<&str> = b64
            .as_bytes()
            .chunks(64)
            .map(|l| std::str::from_utf8(l).unwrap())
            .collect();
        format!(
            "-----BEGIN {label}-----\n{}\n-----END {label}-----\n",
            lines.join("\n")
        )
    }

    fn write_pair(dir: &Path, names: &[String]) -> CertificateDer<'static> {
        let (cert, key) = self_signed(names, SystemTime::now()).unwrap();
        std::fs::write(dir.join("tls.crt"), pem("CERTIFICATE", &cert)).unwrap();
        std::fs::write(dir.join("tls.key"), pem("PRIVATE KEY", &key)).unwrap();
        CertificateDer::from(cert)
    }

    #[test]
    fn a_certificate_directory_is_reread_when_its_files_change_and_a_broken_pair_is_kept_out() {
        let dir = std::env::temp_dir().join(format!("omo-certdir-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let names = vec!["localhost".to_string()];
        let first = write_pair(&dir, &names);
        let source = Arc::new(CertDir::open(&dir).unwrap());
        assert_eq!(source.current().cert[0], first);
        // Rotated, as cert-manager does: the next check serves the new one.
        std::thread::sleep(RECHECK);
        let second = write_pair(&dir, &["localhost".to_string(), "other".to_string()]);
        std::thread::sleep(RECHECK);
        assert_eq!(source.current().cert[0], second);
        handshake(
            server_config(source.clone()).unwrap(),
            std::slice::from_ref(&second),
            "localhost",
        )
        .unwrap();
        // A key that is not the certificate's is refused; the last good
        // pair stays in service.
        std::thread::sleep(RECHECK);
        let (_, other_key) = self_signed(&names, SystemTime::now()).unwrap();
        std::fs::write(dir.join("tls.key"), pem("PRIVATE KEY", &other_key)).unwrap();
        std::thread::sleep(RECHECK);
        assert_eq!(source.current().cert[0], second);
        // The pair in service still signs: its key was kept with it.
        handshake(
            server_config(source.clone()).unwrap(),
            std::slice::from_ref(&second),
            "localhost",
        )
        .unwrap();
        // A directory without a pair fails at start, naming the file.
        std::fs::remove_file(dir.join("tls.crt")).unwrap();
        let err = CertDir::open(&dir).unwrap_err();
        assert!(err.contains("tls.crt"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
