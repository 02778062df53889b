//! Tenant policy (docs/install.md, "Tenant policy"): the chart's
//! `tenantPolicy` (the component manifests/components/tenant-policy, which
//! scripts/check-chart.sh shows renders the same) applied to the real
//! control plane, where kube-apiserver's admission judges models: the
//! ValidatingAdmissionPolicy plugin (upstream
//! `plugin/policy/validating.Plugin`, its `matchConditions` and `paramRef`)
//! and ResourceQuota admission (`resourcequota.QuotaAdmission`, the usage
//! kept by kube-controller-manager's resourcequota controller). kubesim
//! serves neither (docs/kubesim.md).

use crate::harness::{tmpdir, wait_until};
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

/// The chart's tenant policy bounding namespace `ns` (at most 2 replicas,
/// family PII, tiers Tiny and Small, 2 models), as `helm template` renders
/// it: the policy with its limits, its binding, the quota.
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

/// Polls `f` every 200 ms for at most `secs` seconds: whether it held.
fn within_secs(secs: u64, mut f: impl FnMut() -> bool) -> bool {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while std::time::Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    false
}

/// kube-controller-manager's resourcequota controller counts a kind once
/// its discovery (every 30 s) has found it: a quota made before then on
/// count/openmedmodels.openmed.ai gets no usage until the next full resync
/// (--resource-quota-sync-period, 5 min), and quota admission refuses every
/// model meanwhile (upstream `QuotaMonitor.SyncMonitors`).
fn wait_for_quota_discovery(plane: &Plane) {
    let kcm_log = plane.dir.join("controller-manager.log");
    let found = within_secs(90, || {
        std::fs::read_to_string(&kcm_log).is_ok_and(|l| {
            l.lines().any(|l| {
                l.contains("created object count evaluator")
                    && l.contains("openmedmodels.openmed.ai")
            })
        })
    });
    assert!(
        found,
        "the quota controller did not count OpenMedModels within 90 s"
    );
}

/// A bound namespace refuses a model over each limit with a message naming
/// the field and the limit; admits one within, which turns Ready; a
/// namespace the policy does not name is unaffected; the quota refuses the
/// model past its count; a tenant admin cannot edit the limits; a limit
/// tightened below a model refuses its next spec change, but none of the
/// operator's writes: the model still deletes cleanly.
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
    wait_for_quota_discovery(&plane);
    let policy = rendered_policy(&plane, &bound, &dir);
    apply(&plane, "", &policy).expect("applying the tenant policy");
    let rb = ["-n", &bound, "create", "rolebinding", "tenant-admin"];
    plane
        .kubectl(&[&rb[..], &["--clusterrole=admin", "--user=alice"]].concat())
        .expect("binding alice as the namespace's admin");
    // The policy and the quota take effect once the admission plugins'
    // informers (and the quota controller) have seen them.
    let over = model_yaml(&bound, "big", "PII", "Small", 3);
    let limit = format!("spec.replicas: 3 is more than 2, the most namespace {bound} allows");
    wait_until("the policy to judge the bound namespace", || {
        let args = ["apply", "--dry-run=server", "-f", "-", "--as", "alice"];
        matches!(plane.kubectl_with_input(&args, Some(&over)), Err(e) if e.contains(&limit))
    });
    let within = model_yaml(&bound, "within", "PII", "Small", 1);
    wait_until("quota admission to know the quota", || {
        let args = ["apply", "--dry-run=server", "-f", "-"];
        plane.kubectl_with_input(&args, Some(&within)).is_ok()
    });

    assert_refused(&plane, "alice", &over, &limit);
    let genomics = model_yaml(&bound, "g", "Genomics", "Small", 1);
    let families =
        format!("spec.family: Genomics is not one of the families namespace {bound} allows: PII");
    assert_refused(&plane, "alice", &genomics, &families);
    let large = model_yaml(&bound, "l", "PII", "Large", 1);
    assert_refused(
        &plane,
        "",
        &large,
        "spec.tier: Large is not one of the tiers",
    );
    let edit = [
        "patch",
        "validatingadmissionpolicy",
        "openmed-tenant-limits",
        "--type=json",
    ];
    let loosen = r#"[{"op":"replace","path":"/spec/variables/0/expression","value":"{}"}]"#;
    let denied = plane.kubectl(&[&edit[..], &["-p", loosen, "--as", "alice"]].concat());
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
    .expect("a namespace the policy does not name is not bounded");
    apply(&plane, "alice", &model_yaml(&bound, "b", "PII", "Tiny", 1)).expect("a second model");
    assert_refused(
        &plane,
        "alice",
        &model_yaml(&bound, "c", "PII", "Tiny", 1),
        "exceeded quota: openmed-models",
    );

    tighten_and_delete(&plane, &st, &bound);
    op.assert_clean_exit();
    let _ = plane.kubectl_with_input(&["delete", "--ignore-not-found", "-f", "-"], Some(&policy));
    for ns in [&bound, &free] {
        let _ = plane.kubectl(&["delete", "namespace", ns, "--wait=false"]);
    }
}

/// Tightens the limit below model `a` (2 replicas): its next spec change is
/// refused, a change of its labels is not, none of the operator's writes is
/// refused, and `a` deletes cleanly.
fn tighten_and_delete(plane: &Plane, st: &Story, ns: &str) {
    let tighten = format!(
        r#"[{{"op":"replace","path":"/spec/variables/0/expression","value":"{{\"{ns}\":1}}"}}]"#
    );
    let edit = [
        "patch",
        "validatingadmissionpolicy",
        "openmed-tenant-limits",
        "--type=json",
    ];
    plane
        .kubectl(&[&edit[..], &["-p", tighten.as_str()]].concat())
        .expect("tightening the limit");
    let changed = format!(r#"{{"spec":{{"version":"{V2}"}}}}"#);
    let patch = [
        "-n",
        ns,
        "patch",
        "openmedmodel",
        "a",
        "--type=merge",
        "-p",
        &changed,
    ];
    let refusal = format!("spec.replicas: 2 is more than 1, the most namespace {ns} allows");
    // A dry run until the plugin has the new limit, so that no real change
    // slips through before it.
    wait_until("the tightened limit to judge a's spec change", || {
        let dry = [&patch[..], &["--dry-run=server"]].concat();
        matches!(plane.kubectl(&dry), Err(e) if e.contains(&refusal))
    });
    let refused = plane
        .kubectl(&patch)
        .expect_err("a spec change over the tightened limit");
    assert!(refused.contains(&refusal), "{refused}");
    plane
        .kubectl(&["-n", ns, "label", "openmedmodel", "a", "team=search"])
        .expect("a change of labels alone is not judged");
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
        .filter(|e| e["objectRef"]["namespace"] == ns)
        .filter(|e| e["responseStatus"]["code"].as_u64().unwrap_or(0) >= 400)
        .filter(|e| {
            e["responseStatus"]["message"]
                .as_str()
                .unwrap_or("")
                .contains("openmed-tenant-limits")
        })
        .collect();
    assert!(
        refused.is_empty(),
        "the policy refused the operator's writes: {refused:#?}"
    );
}
