//! A throwaway CA and a server certificate for 127.0.0.1 / localhost (and
//! `kubesim.test`, reached through a test proxy), made
//! fresh for every simulator so no key material lives in the repository.

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::sync::Arc;

/// PEM texts clients need, plus the server-side configuration.
pub struct TlsMaterial {
    pub ca_pem: String,
    pub server_config: Arc<rustls::ServerConfig>,
}

/// A CA that is not the one the server presents, for "wrong CA" tests.
pub fn unrelated_ca_pem() -> Result<String, String> {
    let (cert, _) = make_ca("unrelated test CA")?;
    Ok(cert.pem())
}

fn make_ca(name: &str) -> Result<(rcgen::Certificate, KeyPair), String> {
    let key = KeyPair::generate().map_err(|e| e.to_string())?;
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(|e| e.to_string())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let cert = params.self_signed(&key).map_err(|e| e.to_string())?;
    Ok((cert, key))
}

pub fn generate() -> Result<TlsMaterial, String> {
    let (ca, ca_key) = make_ca("kubesim test CA")?;
    let key = KeyPair::generate().map_err(|e| e.to_string())?;
    let mut params = CertificateParams::new(vec![
        "127.0.0.1".to_string(),
        "::1".to_string(),
        "localhost".to_string(),
        // A name only the tests' CONNECT proxy resolves (tests/hostile.rs).
        "kubesim.test".to_string(),
    ])
    .map_err(|e| e.to_string())?;
    params
        .distinguished_name
        .push(DnType::CommonName, "kubesim");
    let cert = params
        .signed_by(&key, &ca, &ca_key)
        .map_err(|e| e.to_string())?;

    let chain: Vec<CertificateDer<'static>> = vec![cert.der().clone(), ca.der().clone()];
    let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(chain, key_der)
        .map_err(|e| e.to_string())?;
    // HTTP/1.1 only: Go clients then do not try HTTP/2.
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsMaterial {
        ca_pem: ca.pem(),
        server_config: Arc::new(cfg),
    })
}
