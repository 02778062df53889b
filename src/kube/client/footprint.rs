//! What one connection to the API server keeps while it waits in the pool
//! (the counting build, `src/memory/count.rs`): ureq's buffers at the HTTP
//! layer, rustls's state, and our TCP link's (docs/performance.md, memory
//! per connection). The operator keeps one a worker and one a watch, so
//! this is paid some twenty times over.

use super::*;
use crate::kube::endpoint::EndpointOptions;
use crate::kube::path::NAMESPACES;
use crate::memory::count::thread_live;
use kubesim::{Sim, SimConfig};

/// The most an idle TLS connection may keep, in bytes.
const BUDGET: i64 = 90 * 1024;

#[test]
fn an_idle_tls_connection_keeps_little_memory() {
    let sim = Sim::start(SimConfig {
        tls: true,
        ..SimConfig::default()
    })
    .unwrap();
    let dir = std::env::temp_dir().join(format!("omo-footprint-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca = dir.join("ca.crt");
    std::fs::write(&ca, sim.ca_pem().unwrap()).unwrap();
    let opts = EndpointOptions {
        server: Some(sim.url()),
        ca_file: Some(ca),
        ..Default::default()
    };
    let client = Client::new(
        Endpoint::resolve(&opts, &|_| None).unwrap(),
        ClientConfig::default(),
    )
    .unwrap();
    let path = ResourcePath::object(NAMESPACES, None, "default").unwrap();
    let before = thread_live();
    client.get(&path).unwrap();
    let kept = thread_live() - before;
    // A second request takes the pooled connection and leaves no more.
    client.get(&path).unwrap();
    let again = thread_live() - before - kept;
    eprintln!(
        "an idle TLS connection keeps {kept} B (budget {BUDGET}); a second request {again} B more"
    );
    assert!(
        kept <= BUDGET,
        "an idle TLS connection keeps {kept} B, over {BUDGET}"
    );
    assert!(
        again <= 1024,
        "a request on the pooled connection left {again} B more"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
