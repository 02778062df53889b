//! Admission as upstream's plugins compute it: the
//! OwnerReferencesPermissionEnforcement plugin
//! (`plugin/pkg/admission/gc`, `gcPermissionsEnforcement.Validate`,
//! `isChangingOwnerReference`, `newBlockingOwnerDeletionRefs`).

mod common;

use common::{api, Api};
use kubesim::{Sim, SimConfig};
use serde_json::{json, Value};

const CMS: &str = "/api/v1/namespaces/default/configmaps";
const ROLES: &str = "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles";
const BINDINGS: &str = "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings";
const MERGE: &str = "application/merge-patch+json";

fn owner_ref(o: &Value, controller: bool) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "name": o["metadata"]["name"],
        "uid": o["metadata"]["uid"], "controller": controller, "blockOwnerDeletion": true})
}

/// The service account `default/writer`, allowed `verbs` on ConfigMaps.
fn writer(sim: &Sim, admin: &Api, verbs: &[&str]) -> Api {
    let role = json!({"metadata": {"name": "writer"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": verbs}]});
    let r = admin.put(&format!("{ROLES}/writer"), role.clone());
    if r.code == 404 {
        assert_eq!(admin.post(ROLES, role).code, 201);
    }
    let binding = json!({"metadata": {"name": "writer"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "writer"},
        "subjects": [{"kind": "ServiceAccount", "name": "writer", "namespace": "default"}]});
    admin.post(BINDINGS, binding);
    let mut w = api(sim);
    w.token = Some(sim.service_account_token("default", "writer"));
    w
}

#[test]
fn changing_owner_references_needs_delete_and_only_new_blocking_ones_need_finalizers() {
    let sim = Sim::start(SimConfig {
        tokens: Some(vec!["admin".into()]),
        ..SimConfig::default()
    })
    .unwrap();
    let mut admin = api(&sim);
    admin.token = Some("admin".into());
    let owner = admin.post(CMS, json!({"metadata": {"name": "owner"}})).body;
    let other = admin.post(CMS, json!({"metadata": {"name": "other"}})).body;
    let dep = json!({"metadata": {"name": "dep", "ownerReferences": [owner_ref(&owner, true)]}});
    assert_eq!(admin.post(CMS, dep).code, 201);
    let path = format!("{CMS}/dep");
    let set_refs = |a: &Api, refs: Value| {
        a.patch(&path, MERGE, json!({"metadata": {"ownerReferences": refs}}))
    };

    // Without delete on the object: an edit that leaves the references
    // alone is admitted, one that changes them is not.
    let w = writer(&sim, &admin, &["get", "update", "patch"]);
    let r = w.patch(&path, MERGE, json!({"metadata": {"labels": {"a": "b"}}}));
    assert_eq!(r.code, 200, "{}", r.body);
    let r = set_refs(&w, json!([owner_ref(&owner, false)]));
    assert_eq!(r.code, 403, "{}", r.body);
    let msg = r.body["message"].as_str().unwrap();
    assert!(
        msg.contains("cannot set an ownerRef on a resource you can't delete"),
        "{msg}"
    );

    // With delete: the reference to the same owner (same uid, blocking
    // before) is not new, so no finalizers permission is asked for ...
    let w = writer(&sim, &admin, &["get", "update", "patch", "delete"]);
    let r = set_refs(&w, json!([owner_ref(&owner, false)]));
    assert_eq!(r.code, 200, "{}", r.body);
    // ... but a blocking reference to another owner is.
    let r = set_refs(
        &w,
        json!([owner_ref(&owner, false), owner_ref(&other, false)]),
    );
    assert_eq!(r.code, 403, "{}", r.body);
    let msg = r.body["message"].as_str().unwrap();
    assert!(msg.contains("can't set finalizers on"), "{msg}");
}

/// kubesim does not claim the admission the tenant policy relies on
/// (docs/kubesim.md): it serves no ValidatingAdmissionPolicy, binding or
/// ResourceQuota, and its discovery lists none, so `kubectl apply` of the
/// tenant policy fails ("no matches for kind") instead of seeming to bound
/// models it would never judge. The real control plane's judgement is
/// `tests/real/tenant.rs`.
#[test]
fn the_tenant_policys_admission_is_refused_not_pretended() {
    let sim = Sim::start(SimConfig::default()).unwrap();
    let a = api(&sim);
    let vap = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies";
    let body = json!({"apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy", "metadata": {"name": "openmed-tenant-limits"}});
    assert_eq!(a.post(vap, body).code, 404);
    let quotas = "/api/v1/namespaces/default/resourcequotas";
    let quota = json!({"metadata": {"name": "openmed-models"},
        "spec": {"hard": {"count/openmedmodels.openmed.ai": "1"}}});
    assert_eq!(a.post(quotas, quota).code, 404);
    let groups = a.get("/apis").body;
    assert!(
        !groups.to_string().contains("admissionregistration.k8s.io"),
        "{groups}"
    );
    let core = a.get("/api/v1").body;
    let kinds: Vec<_> = core["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert!(
        !kinds.is_empty() && !kinds.contains(&"resourcequotas"),
        "{kinds:?}"
    );
}
