//! The roles a cluster starts with, and the controller that fills the
//! aggregated ones.
//!
//! The roles are the bootstrap policy's user-facing ones
//! (`plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go`,
//! `ClusterRoles`, `ClusterRoleBindings`): `cluster-admin` bound to
//! `system:masters`; `admin`, `edit` and `view`, which hold no rules of
//! their own but an `aggregationRule`; and the `system:aggregate-to-*`
//! roles carrying their rules for the resources kubesim serves. `edit` is
//! itself aggregated into `admin`, and `view` into `edit`.
//!
//! The aggregation controller is `ClusterRoleAggregationController`
//! (`pkg/controller/clusterroleaggregation`, `syncClusterRole`): for a role
//! with an `aggregationRule`, the rules of every other ClusterRole one of
//! its selectors matches, selector by selector and role by role in name
//! order, each rule once; written back only when they differ.

use crate::apiserver::selector::LabelSelector;
use crate::registry::kinds::FieldValidation;
use crate::registry::scale::selector_string;
use crate::registry::store::Store;
use serde_json::{json, Value};
use std::time::SystemTime;

const READ: &[&str] = &["get", "list", "watch"];
const WRITE: &[&str] = &["create", "delete", "deletecollection", "patch", "update"];
const AGGREGATE_TO: &str = "rbac.authorization.k8s.io/aggregate-to-";

fn rule(verbs: &[&str], group: &str, resources: &[&str]) -> Value {
    json!({"apiGroups": [group], "resources": resources, "verbs": verbs})
}

/// `addClusterRoleLabel`: bootstrap roles are marked as such and kept up
/// to date by the API server (`autoupdate`).
fn cluster_role(name: &str, labels: Value, body: Value) -> Value {
    let mut labels = labels;
    labels["kubernetes.io/bootstrapping"] = json!("rbac-defaults");
    let mut role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": name, "labels": labels,
            "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}}});
    if let (Some(r), Some(b)) = (role.as_object_mut(), body.as_object()) {
        r.extend(b.clone());
    }
    role
}

/// A role filled by aggregation from those labelled `aggregate-to-<to>`.
fn aggregated(name: &str, labels: Value, to: &str) -> Value {
    let selector = json!({"matchLabels": {format!("{AGGREGATE_TO}{to}"): "true"}});
    cluster_role(
        name,
        labels,
        json!({"aggregationRule": {"clusterRoleSelectors": [selector]}, "rules": []}),
    )
}

fn aggregate_to(to: &str, rules: Vec<Value>) -> Value {
    let labels = json!({format!("{AGGREGATE_TO}{to}"): "true"});
    cluster_role(
        &format!("system:aggregate-to-{to}"),
        labels,
        json!({"rules": rules}),
    )
}

/// The bootstrap ClusterRoles, as upstream's policy lists them, rules
/// narrowed to the groups kubesim serves.
pub fn cluster_roles() -> Vec<Value> {
    let rw: Vec<&str> = READ.iter().chain(WRITE).copied().collect();
    vec![
        cluster_role(
            "cluster-admin",
            json!({}),
            json!({"rules": [rule(&["*"], "*", &["*"]), {"nonResourceURLs": ["*"], "verbs": ["*"]}]}),
        ),
        aggregated("admin", json!({}), "admin"),
        aggregated(
            "edit",
            json!({format!("{AGGREGATE_TO}admin"): "true"}),
            "edit",
        ),
        aggregated(
            "view",
            json!({format!("{AGGREGATE_TO}edit"): "true"}),
            "view",
        ),
        aggregate_to(
            "admin",
            vec![
                rule(
                    &["create"],
                    "authorization.k8s.io",
                    &["localsubjectaccessreviews"],
                ),
                rule(&rw, "rbac.authorization.k8s.io", &["roles", "rolebindings"]),
            ],
        ),
        aggregate_to(
            "edit",
            vec![
                rule(
                    READ,
                    "",
                    &[
                        "pods/attach",
                        "pods/proxy",
                        "pods/exec",
                        "pods/portforward",
                        "secrets",
                        "services/proxy",
                    ],
                ),
                rule(&["impersonate"], "", &["serviceaccounts"]),
                rule(
                    WRITE,
                    "",
                    &[
                        "pods",
                        "pods/attach",
                        "pods/proxy",
                        "pods/exec",
                        "pods/portforward",
                    ],
                ),
                rule(
                    WRITE,
                    "",
                    &[
                        "replicationcontrollers",
                        "replicationcontrollers/scale",
                        "serviceaccounts",
                        "services",
                        "services/proxy",
                        "endpoints",
                        "persistentvolumeclaims",
                        "configmaps",
                        "secrets",
                    ],
                ),
                rule(
                    WRITE,
                    "apps",
                    &[
                        "statefulsets",
                        "statefulsets/scale",
                        "daemonsets",
                        "deployments",
                        "deployments/scale",
                        "deployments/rollback",
                        "replicasets",
                        "replicasets/scale",
                    ],
                ),
                rule(WRITE, "policy", &["poddisruptionbudgets"]),
            ],
        ),
        aggregate_to(
            "view",
            vec![
                rule(
                    READ,
                    "",
                    &[
                        "pods",
                        "replicationcontrollers",
                        "replicationcontrollers/scale",
                        "serviceaccounts",
                        "services",
                        "services/status",
                        "endpoints",
                        "persistentvolumeclaims",
                        "persistentvolumeclaims/status",
                        "configmaps",
                    ],
                ),
                rule(
                    READ,
                    "",
                    &[
                        "limitranges",
                        "resourcequotas",
                        "bindings",
                        "events",
                        "pods/status",
                        "resourcequotas/status",
                        "namespaces/status",
                        "replicationcontrollers/status",
                        "pods/log",
                    ],
                ),
                rule(READ, "", &["namespaces"]),
                rule(
                    READ,
                    "apps",
                    &[
                        "controllerrevisions",
                        "statefulsets",
                        "statefulsets/status",
                        "statefulsets/scale",
                        "daemonsets",
                        "daemonsets/status",
                        "deployments",
                        "deployments/status",
                        "deployments/scale",
                        "replicasets",
                        "replicasets/status",
                        "replicasets/scale",
                    ],
                ),
                rule(
                    READ,
                    "policy",
                    &["poddisruptionbudgets", "poddisruptionbudgets/status"],
                ),
            ],
        ),
    ]
}

/// `ClusterRoleBindings`: `cluster-admin` for the `system:masters` group.
pub fn cluster_role_bindings() -> Vec<Value> {
    vec![
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "cluster-admin",
            "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
            "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:masters"}]}),
    ]
}

/// Store the bootstrap roles and bindings (the API server's
/// `PostStartHook` `rbac/bootstrap-roles`), then aggregate them.
pub fn install(st: &mut Store, now: SystemTime) {
    let defs = ["clusterroles", "clusterrolebindings"].map(|p| {
        st.registry
            .find("rbac.authorization.k8s.io", "v1", p)
            .cloned()
    });
    let [Some(roles), Some(bindings)] = defs else {
        return;
    };
    for (def, objs) in [
        (roles, cluster_roles()),
        (bindings, cluster_role_bindings()),
    ] {
        for o in objs {
            let _ = st.create(&def, "", o, FieldValidation::Ignore, now);
        }
    }
    aggregate(st, now);
}

/// The rules `role`'s aggregationRule selects from `all` (`syncClusterRole`).
pub fn aggregated_rules(role: &Value, all: &[Value]) -> Vec<Value> {
    let name = &role["metadata"]["name"];
    let mut sorted: Vec<&Value> = all
        .iter()
        .filter(|r| r["metadata"]["name"] != *name)
        .collect();
    sorted.sort_by(|a, b| {
        a["metadata"]["name"]
            .as_str()
            .cmp(&b["metadata"]["name"].as_str())
    });
    let mut rules: Vec<Value> = Vec::new();
    let selectors = role["aggregationRule"]["clusterRoleSelectors"].as_array();
    for sel in selectors.into_iter().flatten() {
        let Ok(selector) = LabelSelector::parse(&selector_string(sel)) else {
            continue;
        };
        for r in sorted.iter().filter(|r| selector.matches(r)) {
            for rule in r["rules"].as_array().into_iter().flatten() {
                if !rules.contains(rule) {
                    rules.push(rule.clone());
                }
            }
        }
    }
    rules
}

/// One pass of the aggregation controller over every ClusterRole; chained
/// aggregation (`view` into `edit` into `admin`) settles within a pass or
/// two, as upstream's requeues do.
pub fn aggregate(st: &mut Store, now: SystemTime) {
    let Some(def) = st
        .registry
        .find("rbac.authorization.k8s.io", "v1", "clusterroles")
        .cloned()
    else {
        return;
    };
    for _ in 0..3 {
        let all: Vec<Value> = st.list(&def, None).iter().map(|o| (**o).clone()).collect();
        let mut changed = false;
        for role in all.iter().filter(|r| r["aggregationRule"].is_object()) {
            let rules = aggregated_rules(role, &all);
            if role["rules"].as_array().map(Vec::as_slice).unwrap_or(&[]) == rules.as_slice() {
                continue;
            }
            let mut new = role.clone();
            new["rules"] = Value::Array(rules);
            let name = role["metadata"]["name"].as_str().unwrap_or("").to_string();
            let (fv, require_rv) = (FieldValidation::Ignore, false);
            changed |= st
                .update(&def, "", &name, new, false, fv, require_rv, now)
                .is_ok();
        }
        if !changed {
            break;
        }
    }
}
