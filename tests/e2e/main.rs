//! End to end: the real operator binary against the simulated API server.
//! Each test starts its own simulator (in process, 127.0.0.1, a free port)
//! and operator process; the harness is the `tests/support` crate.
//!
//! By subject: `rollout`, `targets`, `rollback`, `cluster` (many namespaces
//! and resources), `faults` (the API misbehaving) and `process` (flags,
//! logs, alert rules).

use openmed_test_support as harness;

mod cluster;
mod faults;
mod process;
mod rollback;
mod rollout;
mod targets;

use harness::*;
use std::process::Command;

// At the crate root: it runs itself again by its exact name, inside `unshare -n`.
#[test]
fn runs_in_an_isolated_network_namespace() {
    if std::env::var("OMO_IN_NETNS").is_ok() {
        // Inside: only loopback exists. Bring it up and run a whole rollout.
        let up = Command::new("ip")
            .args(["link", "set", "lo", "up"])
            .status()
            .unwrap();
        assert!(up.success());
        let (sim, _, mut op) = cluster_with(fast(), "netns-inner", "svc", &[]);
        sim.create(model("svc", "svc", V1, 600)).unwrap();
        wait_phase(&sim, "svc", "Ready", "RolloutSucceeded");
        op.assert_clean_exit();
        return;
    }
    let me = std::env::current_exe().unwrap();
    let out = Command::new("unshare")
        .args(["-n", "--"])
        .arg(&me)
        .args([
            "--exact",
            "runs_in_an_isolated_network_namespace",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("OMO_IN_NETNS", "1")
        .output()
        .expect("unshare is needed for this test (util-linux)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains("1 passed"), "{text}");
}
