//! The install as a user makes it, `kubectl apply -k manifests/`, once per
//! test process; and what the real API server then enforces of the CRD.

use crate::plane::{from_env, Plane};
use std::sync::OnceLock;

/// The repository's manifests folder.
fn manifests() -> String {
    format!("{}/manifests", env!("CARGO_MANIFEST_DIR"))
}

/// Installs `manifests/` whole, once per process, and waits for the CRD to
/// be served. The shipped operator Deployment is scaled to zero: its image
/// cannot run here, and the tests start the operator themselves as its
/// ServiceAccount.
pub fn once(plane: &Plane) {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    if let Err(e) = DONE.get_or_init(|| apply(plane)) {
        panic!("kubectl apply -k manifests/ on the real control plane failed:\n{e}");
    }
}

/// `kubectl apply -k manifests/` on `plane`, then the CRD served and the
/// shipped operator Deployment scaled to zero.
pub fn apply(plane: &Plane) -> Result<(), String> {
    plane.kubectl(&["apply", "-k", &manifests()])?;
    let crd = "crd/openmedmodels.openmed.ai";
    plane.kubectl(&["wait", "--for=condition=Established", "--timeout=60s", crd])?;
    let shipped = "deployment/openmed-operator";
    plane.kubectl(&["-n", "openmed-system", "scale", shipped, "--replicas=0"])?;
    Ok(())
}

/// The install is accepted whole; the CRD's CEL rule is enforced by the real
/// server (`maxUnavailable: 0` with `maxSurge: "0%"` is refused, with the
/// rule's message); `kubectl explain` reads the CRD's published schema.
#[test]
fn the_install_is_accepted_whole_and_the_crd_enforced() {
    let Some(plane) = from_env() else { return };
    let _plane = crate::shared();
    once(&plane);
    let again = plane
        .kubectl(&["apply", "-k", &manifests()])
        .expect("a second apply");
    assert!(
        again.lines().count() > 10,
        "a second apply -k named nothing:\n{again}"
    );
    assert!(
        again
            .lines()
            .all(|l| l.ends_with("unchanged") || l.ends_with("configured")),
        "a second apply -k is not idempotent:\n{again}"
    );
    plane
        .kubectl(&["create", "namespace", "cel-check"])
        .or_else(|e| {
            if e.contains("AlreadyExists") {
                Ok(e)
            } else {
                Err(e)
            }
        })
        .expect("namespace");
    let stalled = "apiVersion: openmed.ai/v1alpha1\nkind: OpenMedModel\nmetadata: {name: stalled, namespace: cel-check}\n\
        spec: {family: PII, version: v1, tier: Small, replicas: 1,\n  \
        rolloutStrategy: {type: RollingUpdate, maxUnavailable: 0, maxSurge: \"0%\"}}\n";
    let refused = plane
        .kubectl_with_input(&["apply", "-f", "-"], Some(stalled))
        .expect_err("a stalled RollingUpdate was admitted");
    assert!(
        refused.contains(
            "RollingUpdate with both maxUnavailable and maxSurge zero cannot make progress"
        ),
        "{refused}"
    );
    let fine = stalled.replace("maxSurge: \"0%\"", "maxSurge: 1");
    plane
        .kubectl_with_input(&["apply", "-f", "-"], Some(&fine))
        .expect("a RollingUpdate that can progress is admitted");
    let explained = plane
        .kubectl(&["explain", "omm.spec"])
        .expect("kubectl explain omm.spec");
    for field in [
        "family",
        "version",
        "tier",
        "replicas",
        "rolloutStrategy",
        "targetRef",
    ] {
        assert!(
            explained.contains(field),
            "explain omm.spec lacks {field}:\n{explained}"
        );
    }
    let _ = plane.kubectl(&["delete", "namespace", "cel-check", "--wait=false"]);
}
