//! Tenant policy (docs/install.md, "Tenant policy"): the chart's
//! `tenantPolicy` (the component manifests/components/tenant-policy, which
//! scripts/check-chart.sh shows renders the same) applied to the real
//! control plane, where kube-apiserver's admission judges models: the
//! ValidatingAdmissionPolicy plugin (upstream
//! `plugin/policy/validating.Plugin`, its `matchConditions` and `paramRef`)
//! and ResourceQuota admission (`resourcequota.QuotaAdmission`, the usage
//! kept by kube-controller-manager's resourcequota controller). kubesim
//! serves neither (docs/kubesim.md).

use crate::harness::{tmpdir, wait_for, wait_until};
use crate::install;
use crate::plane::{from_env, Plane};
use crate::story::{Story, V1, V2};

/// An OpenMedModel as a user writes it for `kubectl apply`.
fn model_yaml(ns: &str, name: &str, family: &str, tier: &str, replicas: u32) -> String {
    format!(
        "apiVersion: openmed.ai/v1alpha1\nkind: OpenMedModel\nmetadata: {{name: {name}, namespace: {ns}}}\n\
         spec: {{family: {family}, version: {V1}, tier: {tier}, replicas: {replicas},\n  \
         rolloutStrategy: {{type: RollingUpdate}}, targetRef: {{name: {name}}}}}\n"
    )
}

/// `kubectl apply` of `yaml` (as `user` when not empty): Ok, or what
/// kubectl printed when refused.
fn apply(plane: &Plane, user: &str, yaml: &str) -> Result<String, String> {
    let mut args = vec!["apply", "-f", "-"];
    if !user.is_empty() {
        args.extend(["--as", user]);
    }
    plane.kubectl_with_input(&args, Some(yaml))
}

/// The chart's tenant policy for namespace `ns` (at most 2 replicas, family
/// PII, tiers Tiny and Small, 2 models), as `helm template` renders it.
fn rendered_policy(plane: &Plane, ns: &str, dir: &std::path::Path) -> String {
    let values = dir.join("tenant-values.yaml");
    let limits = "{maxReplicas: 2, families: [PII], tiers: [Tiny, Small], maxModels: 2}";
    std::fs::write(
        &values,
        format!("tenantPolicy:\n  enabled: true\n  namespaces:\n    {ns}: {limits}\n"),
    )
    .expect("writing the values");
    let values = values.to_str().unwrap_or_default();
    plane
        .helm(&[
            "template",
            "openmed-operator",
            "charts/openmed-operator",
            "-n",
            "openmed-system",
            "-f",
            values,
            "--show-only",
            "templates/tenant-policy.yaml",
        ])
        .expect("helm template of the tenant policy")
}

/// Refused at `kubectl apply`, with `message`.
fn assert_refused(plane: &Plane, user: &str, yaml: &str, message: &str) {
    match apply(plane, user, yaml) {
        Ok(out) => panic!("admitted, expected a refusal naming {message:?}: {out}\n{yaml}"),
        Err(e) => assert!(e.contains(message), "refused without {message:?}: {e}"),
    }
}

/// A bound namespace refuses a model over each limit with a message naming
/// the field and the limit; admits one within, which turns Ready; a
/// namespace without a binding is unaffected; the quota refuses the model
/// past its count; a tenant admin cannot edit the limits; a limit tightened
/// below a model refuses its next spec change, but neither its status
/// writes nor its finalizer's removal: it still deletes cleanly.
#[test]
fn the_tenant_policy_bounds_a_namespace_and_never_the_operators_writes() {
    let Some(plane) = from_env() else { return };
    let _plane = crate::shared();
    install::once(&plane);
    let pid = std::process::id();
    let (bound, free) = (format!("tenant-{pid}"), format!("free-{pid}"));
    let dir = tmpdir("tenant");
    let st = Story::new(&plane, &bound);
    let _free = Story::new(&plane, &free);
    // kube-controller-manager's resourcequota controller counts a kind once
    // its discovery (every 30 s) has found it: a quota made before then on
    // count/openmedmodels.openmed.ai gets no usage until the next full
    // resync (--resource-quota-sync-period, 5 min), and quota admission
    // refuses every model meanwhile (upstream `QuotaMonitor.SyncMonitors`).
    let kcm_log = plane.dir.join("controller-manager.log");
    wait_until("the quota controller to count OpenMedModels", || {
        std::fs::read_to_string(&kcm_log).is_ok_and(|l| {
            l.lines().any(|l| {
                l.contains("created object count evaluator")
                    && l.contains("openmedmodels.openmed.ai")
            })
        })
    });
    let policy = rendered_policy(&plane, &bound, &dir);
    apply(&plane, "", &policy).expect("applying the tenant policy");
    let rb = ["-n", &bound, "create", "rolebinding", "tenant-admin"];
    plane
        .kubectl(&[&rb[..], &["--clusterrole=admin", "--user=alice"]].concat())
        .expect("binding alice as the namespace's admin");
    // Bindings and quotas take effect once the admission plugins' informers
    // and the quota controller have seen them.
    let over = model_yaml(&bound, "big", "PII", "Small", 3);
    wait_until("the policy to judge the bound namespace", || {
        let mut args = vec!["apply", "--dry-run=server", "-f", "-"];
        args.extend(["--as", "alice"]);
        matches!(plane.kubectl_with_input(&args, Some(&over)), Err(e) if e.contains("ValidatingAdmissionPolicy"))
    });
    // Quota admission knows the quota once its informer has the status the
    // controller wrote: until then it refuses ("status unknown").
    let within = model_yaml(&bound, "within", "PII", "Small", 1);
    wait_until("quota admission to know the quota", || {
        let args = ["apply", "--dry-run=server", "-f", "-"];
        plane.kubectl_with_input(&args, Some(&within)).is_ok()
    });

    let limit = format!("spec.replicas: 3 is more than 2, the most namespace {bound} allows");
    assert_refused(&plane, "alice", &over, &limit);
    let genomics = model_yaml(&bound, "g", "Genomics", "Small", 1);
    assert_refused(
        &plane,
        "alice",
        &genomics,
        "spec.family: Genomics is not allowed",
    );
    let large = model_yaml(&bound, "l", "PII", "Large", 1);
    assert_refused(&plane, "", &large, "spec.tier: Large is not allowed");
    let limits = ["-n", "openmed-system", "patch", "configmap"];
    let edit = ["-p", r#"{"data":{"maxReplicas":"100"}}"#, "--as", "alice"];
    let cm = format!("openmed-tenant-{bound}");
    let denied = plane.kubectl(&[&limits[..], &[cm.as_str()], &edit[..]].concat());
    assert!(
        matches!(&denied, Err(e) if e.contains("forbidden")),
        "{denied:?}"
    );

    let mut op = crate::operator_on_real(&plane, &bound, &dir, &["--namespace", &free]);
    st.deployment("a", 1, true);
    st.model("a", "a", V1, 600);
    st.wait_serving("a", V1);
    apply(
        &plane,
        "",
        &model_yaml(&free, "big", "Genomics", "Large", 5),
    )
    .expect("a namespace without a binding is not judged");
    apply(&plane, "alice", &model_yaml(&bound, "b", "PII", "Tiny", 1)).expect("a second model");
    assert_refused(
        &plane,
        "alice",
        &model_yaml(&bound, "c", "PII", "Tiny", 1),
        "exceeded quota: openmed-models",
    );

    tighten_and_delete(&plane, &st, &cm, &bound);
    op.assert_clean_exit();
    let _ = plane.kubectl_with_input(&["delete", "--ignore-not-found", "-f", "-"], Some(&policy));
    for ns in [&bound, &free] {
        let _ = plane.kubectl(&["delete", "namespace", ns, "--wait=false"]);
    }
}

/// Tightens the limit below model `a` (2 replicas): its next spec change is
/// refused, a change of its labels is not, the operator's writes are never
/// refused, and `a` deletes cleanly.
fn tighten_and_delete(plane: &Plane, st: &Story, cm: &str, ns: &str) {
    let tighten = ["-n", "openmed-system", "patch", "configmap", cm];
    plane
        .kubectl(&[&tighten[..], &["-p", r#"{"data":{"maxReplicas":"1"}}"#]].concat())
        .expect("tightening the limit");
    let changed = format!(r#"{{"spec":{{"version":"{V2}"}}}}"#);
    let patch = ["-n", ns, "patch", "openmedmodel", "a", "--type=merge", "-p"];
    let _ = wait_for(
        "the tightened limit to refuse a's spec change",
        || plane.kubectl(&[&patch[..], &[changed.as_str()]].concat()),
        |r| matches!(r, Err(e) if e.contains("spec.replicas: 2 is more than 1")),
    );
    plane
        .kubectl(&["-n", ns, "label", "openmedmodel", "a", "team=search"])
        .expect("a change of labels alone is not judged");
    // The Deployment scaled by hand: the operator reconciles and writes a's
    // status under the tightened limit.
    st.c.merge_patch(
        "apps/v1",
        "Deployment",
        ns,
        "a",
        &serde_json::json!({"spec": {"replicas": 1}}),
    )
    .expect("scaling a's Deployment");
    plane
        .kubectl(&["-n", ns, "delete", "openmedmodel", "a", "--timeout=60s"])
        .expect("a model over the tightened limit deletes");
    wait_until("model a to go", || {
        st.c.object("openmed.ai", "openmedmodels", ns, "a")
            .is_none()
    });
    let refused: Vec<_> = plane
        .audit_events()
        .into_iter()
        .filter(|e| {
            e["userAgent"]
                .as_str()
                .unwrap_or("")
                .starts_with("openmed-operator")
        })
        .filter(|e| {
            e["objectRef"]["namespace"] == ns && e["objectRef"]["resource"] == "openmedmodels"
        })
        .filter(|e| e["responseStatus"]["code"] == 403)
        .collect();
    assert!(
        refused.is_empty(),
        "the operator's writes were refused: {refused:#?}"
    );
}
