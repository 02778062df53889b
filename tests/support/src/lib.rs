//! The process-level test harness: the real operator binary as a child
//! process, an in-process simulated cluster (kubesim) with the CRD and
//! namespace in place, and the fixtures and waits the process-level tests
//! share (e2e, ha, hostile, rbac, view, bench, soak, real). A dev-dependency
//! of the operator's package, used as `use openmed_test_support as harness;`
//! (the pure core's fixtures are `tests/common/`).

use kubesim::{Sim, SimConfig};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

mod cluster;
mod fake_server;
mod http;
mod operator;
mod proxy;
mod tls;
pub use cluster::*;
pub use fake_server::*;
pub use http::*;
pub use operator::*;

/// The median of a benchmark's figures over its rounds (the mean of the
/// middle two for an even count), with the lowest and highest: what
/// `tests/bench` and `tests/real` print (docs/performance.md).
pub fn median(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    let m = match v.len() {
        0 => return (f64::NAN, f64::NAN, f64::NAN),
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    };
    (m, v[0], v[v.len() - 1])
}

pub use proxy::*;
pub use tls::*;

/// The repository (this crate is `tests/support/` in it).
pub const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// The operator binary Cargo built for the integration test running now:
/// beside its directory of test executables (`target/<profile>/deps`).
pub fn operator_bin() -> String {
    let exe = std::env::current_exe().expect("the test executable's path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>");
    let bin = profile_dir.join("openmed-operator");
    assert!(
        bin.exists(),
        "no operator binary at {} (cargo builds it for integration tests; or set OMO_OPERATOR_BIN)",
        bin.display()
    );
    bin.display().to_string()
}

pub const NS: &str = "openmed";

pub const V1: &str = "OpenMed/OpenMed-PII-SuperClinical-Small-44M-v1";

pub const V2: &str = "OpenMed/OpenMed-PII-SuperClinical-Small-44M-v2";

pub const BAD: &str = "OpenMed/OpenMed-PII-unloadable-v3";

pub const MODEL: (&str, &str) = ("openmed.ai/v1alpha1", "OpenMedModel");

pub const WAIT: Duration = Duration::from_secs(40);

#[cfg(test)]
mod median_tests {
    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(super::median(vec![3.0, 1.0, 2.0]), (2.0, 1.0, 3.0));
        assert_eq!(super::median(vec![4.0, 1.0, 2.0, 3.0]), (2.5, 1.0, 4.0));
    }
}
