//! Who a request is, and whether RBAC lets it through, as kube-apiserver
//! decides: bearer tokens name a user and groups; the RBAC authorizer
//! (`plugin/pkg/auth/authorizer/rbac`: `VisitRulesFor`, `appliesTo`,
//! `RuleAllows`) looks at the ClusterRoleBindings, then the RoleBindings of
//! the request's namespace, and allows what one of their rules allows.
//! Aggregated ClusterRoles hold the rules `bootstrap`'s aggregation
//! controller wrote into them. The denial's text is
//! `forbiddenMessage` (apiserver `endpoints/handlers/responsewriters`).

use serde_json::Value;
use std::sync::Arc;

pub mod bootstrap;

/// An authenticated user that RBAC applies to (an admin token skips it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub groups: Vec<String>,
}

impl User {
    /// `system:serviceaccount:<ns>:<name>`, with the groups a service
    /// account's token carries.
    pub fn service_account(namespace: &str, name: &str) -> User {
        User {
            name: format!("system:serviceaccount:{namespace}:{name}"),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace}"),
                "system:authenticated".into(),
            ],
        }
    }
}

/// What is asked (the authorizer's `Attributes`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Request {
    pub verb: String,
    pub api_group: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    /// For a non-resource request (`/version`, `/metrics`): its path.
    pub path: Option<String>,
}

/// The RBAC objects to judge by: the stored objects themselves, shared, never copied: the authorizer
/// runs on every request (upstream's `RBACAuthorizer` reads them through
/// its listers' caches).
pub struct Policy<'a> {
    pub roles: &'a [Arc<Value>],
    pub cluster_roles: &'a [Arc<Value>],
    pub role_bindings: &'a [Arc<Value>],
    pub cluster_role_bindings: &'a [Arc<Value>],
}

fn strs(v: &Value) -> Vec<&str> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

fn applies_to(subject: &Value, user: &User, binding_ns: &str) -> bool {
    let name = subject["name"].as_str().unwrap_or("");
    match subject["kind"].as_str().unwrap_or("") {
        "User" => name == user.name,
        "Group" => user.groups.iter().any(|g| g == name),
        "ServiceAccount" => {
            let ns = subject["namespace"].as_str().unwrap_or(binding_ns);
            user.name
                .strip_prefix("system:serviceaccount:")
                .and_then(|rest| rest.strip_prefix(ns))
                .and_then(|rest| rest.strip_prefix(':'))
                == Some(name)
        }
        _ => false,
    }
}

/// `RuleAllows` (plugin/pkg/auth/authorizer/rbac): verbs, then either
/// `NonResourceURLMatches` or `APIGroupMatches`, `ResourceMatches` and
/// `ResourceNameMatches`.
fn rule_allows(rule: &Value, r: &Request) -> bool {
    let has = |field: &str, want: &str| strs(&rule[field]).iter().any(|v| *v == "*" || *v == want);
    if !has("verbs", &r.verb) {
        return false;
    }
    if let Some(path) = &r.path {
        return non_resource_url_matches(&strs(&rule["nonResourceURLs"]), path);
    }
    let names = strs(&rule["resourceNames"]);
    has("apiGroups", &r.api_group)
        && resource_matches(&strs(&rule["resources"]), &r.resource, &r.subresource)
        && (names.is_empty() || (!r.name.is_empty() && names.contains(&r.name.as_str())))
}

/// `ResourceMatches` (pkg/apis/rbac/v1/evaluation_helpers.go): `*`, the
/// exact `resource[/subresource]`, or `*/subresource` for a subresource.
/// `deployments/*` is no wildcard: it grants neither the Deployment nor a
/// real subresource.
fn resource_matches(rule_resources: &[&str], resource: &str, subresource: &str) -> bool {
    rule_resources.iter().any(|res| {
        *res == "*"
            || (subresource.is_empty() && *res == resource)
            || (!subresource.is_empty()
                && res
                    .split_once('/')
                    .is_some_and(|(r, s)| s == subresource && (r == resource || r == "*")))
    })
}

/// `NonResourceURLMatches`: `*`, the exact path, or a prefix ending in
/// `*` (every trailing `*` trimmed, as `strings.TrimRight` does).
fn non_resource_url_matches(urls: &[&str], path: &str) -> bool {
    urls.iter().any(|u| {
        *u == "*" || *u == path || (u.ends_with('*') && path.starts_with(u.trim_end_matches('*')))
    })
}

fn role_rules<'a>(policy: &'a Policy, role_ref: &Value, ns: &str) -> Vec<&'a Value> {
    let name = role_ref["name"].as_str().unwrap_or("");
    let (pool, in_ns) = match role_ref["kind"].as_str() {
        Some("ClusterRole") => (policy.cluster_roles, None),
        _ => (policy.roles, Some(ns)),
    };
    pool.iter()
        .filter(|r| r["metadata"]["name"] == name)
        .filter(|r| in_ns.is_none_or(|ns| r["metadata"]["namespace"] == ns))
        .flat_map(|r| r["rules"].as_array().into_iter().flatten())
        .collect()
}

/// Whether some binding of `user` grants `r`.
pub fn allows(policy: &Policy, user: &User, r: &Request) -> bool {
    let bound = |b: &&Arc<Value>, ns: &str| {
        b["subjects"]
            .as_array()
            .is_some_and(|s| s.iter().any(|s| applies_to(s, user, ns)))
    };
    let cluster = policy
        .cluster_role_bindings
        .iter()
        .filter(|b| bound(b, ""))
        .flat_map(|b| role_rules(policy, &b["roleRef"], ""));
    let local = policy
        .role_bindings
        .iter()
        .filter(|b| !r.namespace.is_empty() && b["metadata"]["namespace"] == r.namespace.as_str())
        .filter(|b| bound(b, &r.namespace))
        .flat_map(|b| role_rules(policy, &b["roleRef"], &r.namespace));
    cluster.chain(local).any(|rule| rule_allows(rule, r))
}

/// The denial's message, as the API server words it.
pub fn forbidden_message(user: &User, r: &Request) -> String {
    let who = &user.name;
    if let Some(path) = &r.path {
        return format!("User {who:?} cannot {} path {path:?}", r.verb);
    }
    let resource = if r.subresource.is_empty() {
        r.resource.clone()
    } else {
        format!("{}/{}", r.resource, r.subresource)
    };
    let qualified = if r.api_group.is_empty() {
        r.resource.clone()
    } else {
        format!("{}.{}", r.resource, r.api_group)
    };
    let object = if r.name.is_empty() {
        qualified
    } else {
        format!("{qualified} {:?}", r.name)
    };
    let scope = if r.namespace.is_empty() {
        "at the cluster scope".to_string()
    } else {
        format!("in the namespace {:?}", r.namespace)
    };
    format!(
        "{object} is forbidden: User {who:?} cannot {} resource {resource:?} in API group {:?} {scope}",
        r.verb, r.api_group
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn req(verb: &str, group: &str, resource: &str, sub: &str, ns: &str, name: &str) -> Request {
        Request {
            verb: verb.into(),
            api_group: group.into(),
            resource: resource.into(),
            subresource: sub.into(),
            namespace: ns.into(),
            name: name.into(),
            path: None,
        }
    }

    type Objects = Vec<Arc<Value>>;

    /// Roles, cluster roles, role bindings and cluster role bindings: the
    /// account ops/op reads Deployments and patches model status anywhere,
    /// creates Leases in ops and updates the one named op.
    fn granted() -> (Objects, Objects, Objects, Objects) {
        let shared = |v: Vec<Value>| v.into_iter().map(Arc::new).collect();
        let cluster_roles = vec![json!({"metadata": {"name": "reader"}, "rules": [
            {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["openmed.ai"], "resources": ["openmedmodels/status"], "verbs": ["patch"]},
            {"nonResourceURLs": ["/metrics", "/debug/*"], "verbs": ["get"]}]})];
        let roles = vec![
            json!({"metadata": {"name": "lease", "namespace": "ops"}, "rules": [
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["op"], "verbs": ["get", "update"]}]}),
        ];
        let crbs = vec![
            json!({"metadata": {"name": "b"}, "roleRef": {"kind": "ClusterRole", "name": "reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "op", "namespace": "ops"}]}),
        ];
        let rbs = vec![
            json!({"metadata": {"name": "b", "namespace": "ops"}, "roleRef": {"kind": "Role", "name": "lease"},
            "subjects": [{"kind": "ServiceAccount", "name": "op"}]}),
        ];
        (
            shared(roles),
            shared(cluster_roles),
            shared(rbs),
            shared(crbs),
        )
    }

    /// Resource requests, and whether ops/op may make them.
    fn resource_cases() -> Vec<(Request, bool)> {
        vec![
            (req("get", "apps", "deployments", "", "a", "x"), true),
            (req("watch", "apps", "deployments", "", "", ""), true),
            (req("patch", "apps", "deployments", "", "a", "x"), false),
            (req("get", "", "deployments", "", "a", "x"), false),
            (
                req("patch", "openmed.ai", "openmedmodels", "status", "a", "m"),
                true,
            ),
            (
                req("patch", "openmed.ai", "openmedmodels", "", "a", "m"),
                false,
            ),
            (
                req("create", "coordination.k8s.io", "leases", "", "ops", ""),
                true,
            ),
            (
                req("update", "coordination.k8s.io", "leases", "", "ops", "op"),
                true,
            ),
            (
                req(
                    "update",
                    "coordination.k8s.io",
                    "leases",
                    "",
                    "ops",
                    "another",
                ),
                false,
            ),
            (
                req(
                    "update",
                    "coordination.k8s.io",
                    "leases",
                    "",
                    "elsewhere",
                    "op",
                ),
                false,
            ),
            (
                req("list", "coordination.k8s.io", "leases", "", "ops", ""),
                false,
            ),
        ]
    }

    /// Cases in the spirit of upstream's `TestRuleMatches` and
    /// `TestAppliesTo` (rbac_test.go, subject_locator tests): verbs,
    /// groups, subresources, resource names, wildcards, binding scope.
    #[test]
    fn rbac_allows_what_a_binding_grants_and_nothing_else() {
        let (roles, cluster_roles, rbs, crbs) = granted();
        let policy = Policy {
            roles: &roles,
            cluster_roles: &cluster_roles,
            role_bindings: &rbs,
            cluster_role_bindings: &crbs,
        };
        let op = User::service_account("ops", "op");
        let other = User::service_account("ops", "other");
        // `appliesToUser` compares the whole `serviceaccount.MakeUsername`:
        // a namespace or a name that only starts like the subject's is
        // another account.
        let near = [
            User::service_account("op", "op"),
            User::service_account("opsx", "op"),
            User::service_account("ops", "op2"),
        ];
        let cases = resource_cases();
        for (r, want) in cases {
            assert_eq!(allows(&policy, &op, &r), want, "{r:?}");
            assert!(!allows(&policy, &other, &r), "another account: {r:?}");
            for u in &near {
                assert!(!allows(&policy, u, &r), "{}: {r:?}", u.name);
            }
        }
        let metrics = Request {
            verb: "get".into(),
            path: Some("/metrics".into()),
            ..Default::default()
        };
        assert!(allows(&policy, &op, &metrics));
        let debug = Request {
            path: Some("/debug/pprof".into()),
            ..metrics.clone()
        };
        assert!(allows(&policy, &op, &debug));
        let other_path = Request {
            path: Some("/logs".into()),
            ..metrics
        };
        assert!(!allows(&policy, &op, &other_path));
    }

    /// Upstream's `TestRuleMatches` table (plugin/pkg/auth/authorizer/rbac
    /// rbac_test.go) and its subresource-resolution cases, through
    /// `rule_allows`; plus what `ResourceMatches` makes of `pods/*`.
    #[test]
    fn rules_match_as_upstreams_rule_allows() {
        let rule = |verbs: &[&str], groups: &[&str], res: &[&str]| json!({"verbs": verbs, "apiGroups": groups, "resources": res});
        let url_rule =
            |verbs: &[&str], urls: &[&str]| json!({"verbs": verbs, "nonResourceURLs": urls});
        let r =
            |verb: &str, group: &str, res: &str, sub: &str| req(verb, group, res, sub, "ns1", "");
        let tuples = [
            ("verb1", "group1"),
            ("verb1", "group2"),
            ("verb2", "group1"),
            ("verb2", "group2"),
        ];
        let star_verb = rule(&["*"], &["group1"], &["resource1"]);
        let star_group = rule(&["verb1"], &["*"], &["resource1"]);
        let star_res = rule(&["verb1"], &["group1"], &["*"]);
        let tuple = rule(
            &["verb1", "verb2"],
            &["group1", "group2"],
            &["resource1", "resource2"],
        );
        for (v, g) in tuples {
            for res in ["resource1", "resource2"] {
                let a = r(v, g, res, "");
                assert_eq!(
                    rule_allows(&star_verb, &a),
                    g == "group1" && res == "resource1",
                    "{a:?}"
                );
                assert_eq!(
                    rule_allows(&star_group, &a),
                    v == "verb1" && res == "resource1",
                    "{a:?}"
                );
                assert_eq!(
                    rule_allows(&star_res, &a),
                    v == "verb1" && g == "group1",
                    "{a:?}"
                );
                assert!(rule_allows(&tuple, &a), "{a:?}");
            }
        }
        let sub = rule(&["*"], &["*"], &["resource1/subresource1"]);
        assert!(rule_allows(
            &sub,
            &r("verb1", "group1", "resource1", "subresource1")
        ));
        assert!(!rule_allows(
            &sub,
            &r("verb1", "group2", "resource1", "subresource2")
        ));
        assert!(!rule_allows(
            &sub,
            &r("verb2", "group1", "resource2", "subresource1")
        ));
        assert!(!rule_allows(&sub, &r("verb2", "group1", "resource1", "")));
        // Subresource resolution: `pods` is not `pods/status`, nor back.
        let pods = rule(&["*"], &["*"], &["pods"]);
        assert!(rule_allows(&pods, &r("get", "", "pods", "")));
        assert!(!rule_allows(&pods, &r("get", "", "pods", "status")));
        let status = rule(&["*"], &["*"], &["pods/status"]);
        assert!(rule_allows(&status, &r("get", "", "pods", "status")));
        assert!(!rule_allows(&status, &r("get", "", "pods", "")));
        // `*/status` is any resource's status; `pods/*` is nothing real.
        let any_status = rule(&["get"], &[""], &["*/status"]);
        assert!(rule_allows(
            &any_status,
            &r("get", "", "services", "status")
        ));
        assert!(!rule_allows(&any_status, &r("get", "", "services", "")));
        let pods_star = rule(&["get"], &[""], &["pods/*"]);
        assert!(!rule_allows(&pods_star, &r("get", "", "pods", "")));
        assert!(!rule_allows(&pods_star, &r("get", "", "pods", "log")));
        let url = |verb: &str, path: &str| Request {
            verb: verb.into(),
            path: Some(path.into()),
            ..Default::default()
        };
        let paths = [
            "/foo",
            "/foo/bar",
            "/foo/baz",
            "/foo/bar/one",
            "/foo/baz/one",
        ];
        let star_url = url_rule(&["verb1"], &["*"]);
        let subpath = url_rule(&["verb1"], &["/foo/*"]);
        let exact = url_rule(&["*"], &["/foo", "/foo/bar/one"]);
        for p in paths {
            assert!(rule_allows(&star_url, &url("verb1", p)), "{p}");
            assert!(!rule_allows(&star_url, &url("verb2", p)), "{p}");
            assert_eq!(rule_allows(&subpath, &url("verb1", p)), p != "/foo", "{p}");
            let is_exact = p == "/foo" || p == "/foo/bar/one";
            assert_eq!(rule_allows(&exact, &url("verb2", p)), is_exact, "{p}");
        }
        for p in ["/notfoo", "/notfoo/bar", "/notfoo/baz/one"] {
            assert!(!rule_allows(&subpath, &url("verb1", p)), "{p}");
        }
        // Every trailing `*` is trimmed (`strings.TrimRight`).
        assert!(rule_allows(
            &url_rule(&["get"], &["/debug/**"]),
            &url("get", "/debug/pprof")
        ));
    }

    #[test]
    fn denials_read_as_the_api_servers() {
        let u = User::service_account("ops", "op");
        assert_eq!(
            forbidden_message(&u, &req("get", "apps", "deployments", "", "a", "x")),
            "deployments.apps \"x\" is forbidden: User \"system:serviceaccount:ops:op\" cannot get resource \"deployments\" in API group \"apps\" in the namespace \"a\""
        );
        assert_eq!(
            forbidden_message(&u, &req("list", "", "configmaps", "", "", "")),
            "configmaps is forbidden: User \"system:serviceaccount:ops:op\" cannot list resource \"configmaps\" in API group \"\" at the cluster scope"
        );
    }
}
