//! The kinds the simulator serves: built-ins plus every CRD created at run
//! time, and the discovery documents kubectl reads to find them.

use serde_json::{json, Value};
use std::collections::BTreeMap;

#[derive(Debug, Clone, PartialEq)]
pub struct PrinterColumn {
    pub name: String,
    pub type_: String,
    pub json_path: String,
    pub priority: i64,
    pub description: String,
    pub format: String,
}

#[derive(Debug, Clone)]
pub struct ResourceDef {
    pub group: String,
    /// Served versions; the first is the storage version.
    pub versions: Vec<String>,
    pub plural: String,
    pub singular: String,
    pub kind: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    pub status_subresource: bool,
    /// Serves `/scale` as an `autoscaling/v1` `Scale` (Deployments).
    pub scale_subresource: bool,
    /// Whether metadata.generation is kept (spec-bearing kinds).
    pub generation: bool,
    /// Served from a CustomResourceDefinition.
    pub custom: bool,
    /// version → openAPIV3Schema (custom resources only).
    pub schemas: BTreeMap<String, Value>,
    pub columns: BTreeMap<String, Vec<PrinterColumn>>,
}

impl ResourceDef {
    pub fn key(&self) -> String {
        format!("{}/{}", self.group, self.plural)
    }

    pub fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{version}", self.group)
        }
    }

    pub fn storage_api_version(&self) -> String {
        self.api_version(&self.versions[0])
    }

    pub fn qualified_kind(&self) -> String {
        if self.group.is_empty() {
            self.kind.clone()
        } else {
            format!("{}.{}", self.kind, self.group)
        }
    }

    fn builtin(
        group: &str,
        version: &str,
        plural: &str,
        kind: &str,
        namespaced: bool,
    ) -> ResourceDef {
        ResourceDef {
            group: group.into(),
            versions: vec![version.into()],
            plural: plural.into(),
            singular: kind.to_lowercase(),
            kind: kind.into(),
            namespaced,
            short_names: vec![],
            categories: vec![],
            status_subresource: false,
            scale_subresource: false,
            generation: false,
            custom: false,
            schemas: BTreeMap::new(),
            columns: BTreeMap::new(),
        }
    }

    /// A custom resource's schema as the CRD's OpenAPI v3 publishes it
    /// (apiextensions-apiserver `builder.BuildOpenAPIV3`): named by the
    /// reversed group, version and kind, with `x-kubernetes-group-version-kind`,
    /// and `apiVersion`, `kind` and `metadata` described as for every
    /// object. What `kubectl explain` reads.
    pub fn openapi_schema(&self, version: &str) -> Option<(String, Value)> {
        let schema = self.schemas.get(version).filter(|_| self.custom)?;
        let mut s = schema.clone();
        let props = s["properties"].as_object_mut()?;
        props.insert("apiVersion".into(), json!({"type": "string", "description":
            "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources"}));
        props.insert("kind".into(), json!({"type": "string", "description":
            "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds"}));
        props.insert("metadata".into(), json!({"type": "object", "description":
            "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"}));
        s["x-kubernetes-group-version-kind"] =
            json!([{"group": self.group, "version": version, "kind": self.kind}]);
        let reversed: Vec<&str> = self.group.split('.').rev().collect();
        Some((format!("{}.{version}.{}", reversed.join("."), self.kind), s))
    }

    /// TokenReview and SubjectAccessReview: answered, not stored.
    pub fn is_review(&self) -> bool {
        matches!(
            self.plural.as_str(),
            "tokenreviews" | "subjectaccessreviews"
        )
    }

    fn shorts(mut self, s: &[&str]) -> Self {
        self.short_names = s.iter().map(|x| x.to_string()).collect();
        self
    }
}

#[derive(Debug, Clone)]
pub struct Registry {
    defs: Vec<ResourceDef>,
}

const VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

impl Registry {
    pub fn builtin() -> Registry {
        let mut defs = core_defs();
        defs.extend(group_defs());
        defs.extend(rbac_defs());
        defs.extend(extension_and_review_defs());
        Registry { defs }
    }

    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<&ResourceDef> {
        self.defs.iter().find(|d| {
            d.group == group && d.plural == plural && d.versions.iter().any(|v| v == version)
        })
    }

    pub fn by_key(&self, key: &str) -> Option<&ResourceDef> {
        self.defs.iter().find(|d| d.key() == key)
    }

    pub fn by_kind(&self, api_version: &str, kind: &str) -> Option<&ResourceDef> {
        self.defs
            .iter()
            .find(|d| d.kind == kind && d.versions.iter().any(|v| d.api_version(v) == api_version))
    }

    pub fn has_group_version(&self, group: &str, version: &str) -> bool {
        self.defs
            .iter()
            .any(|d| d.group == group && d.versions.iter().any(|v| v == version))
    }

    /// Group → versions, in registration order, core group excluded.
    pub fn groups(&self) -> Vec<(String, Vec<String>)> {
        let mut out: Vec<(String, Vec<String>)> = Vec::new();
        for d in self.defs.iter().filter(|d| !d.group.is_empty()) {
            match out.iter_mut().find(|(g, _)| *g == d.group) {
                Some((_, vs)) => {
                    for v in &d.versions {
                        if !vs.contains(v) {
                            vs.push(v.clone());
                        }
                    }
                }
                None => out.push((d.group.clone(), d.versions.clone())),
            }
        }
        out
    }

    pub fn add(&mut self, def: ResourceDef) {
        self.defs.retain(|d| d.key() != def.key());
        self.defs.push(def);
    }

    pub fn remove(&mut self, key: &str) {
        self.defs.retain(|d| d.key() != key || !d.custom);
    }

    pub fn api_versions() -> Value {
        json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]})
    }

    fn group_json(group: &str, versions: &[String]) -> Value {
        let vs: Vec<Value> = versions
            .iter()
            .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
            .collect();
        json!({"name": group, "versions": vs, "preferredVersion": vs[0]})
    }

    pub fn api_group_list(&self) -> Value {
        let groups: Vec<Value> = self
            .groups()
            .iter()
            .map(|(g, vs)| Registry::group_json(g, vs))
            .collect();
        json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
    }

    pub fn api_group(&self, group: &str) -> Option<Value> {
        let (g, vs) = self.groups().into_iter().find(|(g, _)| g == group)?;
        let mut v = Registry::group_json(&g, &vs);
        v["kind"] = json!("APIGroup");
        v["apiVersion"] = json!("v1");
        Some(v)
    }

    pub fn resource_list(&self, group: &str, version: &str) -> Option<Value> {
        if !self.has_group_version(group, version) {
            return None;
        }
        let mut resources = Vec::new();
        for d in self
            .defs
            .iter()
            .filter(|d| d.group == group && d.versions.iter().any(|v| v == version))
        {
            let verbs = if d.is_review() {
                json!(["create"])
            } else {
                json!(VERBS)
            };
            let mut r = json!({
                "name": d.plural, "singularName": d.singular, "namespaced": d.namespaced,
                "kind": d.kind, "verbs": verbs,
            });
            if !d.short_names.is_empty() {
                r["shortNames"] = json!(d.short_names);
            }
            if !d.categories.is_empty() {
                r["categories"] = json!(d.categories);
            }
            resources.push(r);
            if d.status_subresource {
                resources.push(json!({
                    "name": format!("{}/status", d.plural), "singularName": "", "namespaced": d.namespaced,
                    "kind": d.kind, "verbs": ["get", "patch", "update"],
                }));
            }
            if d.scale_subresource {
                resources.push(json!({
                    "name": format!("{}/scale", d.plural), "singularName": "", "namespaced": d.namespaced,
                    "group": "autoscaling", "version": "v1", "kind": "Scale", "verbs": ["get", "patch", "update"],
                }));
            }
            if d.group.is_empty() && d.plural == "serviceaccounts" {
                resources.push(json!({
                    "name": "serviceaccounts/token", "singularName": "", "namespaced": true,
                    "group": "authentication.k8s.io", "version": "v1", "kind": "TokenRequest", "verbs": ["create"],
                }));
            }
        }
        let gv = if group.is_empty() {
            version.to_string()
        } else {
            format!("{group}/{version}")
        };
        Some(
            json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
        )
    }

    /// Minimal OpenAPI v3 discovery so kubectl's default (strict) validation
    /// hands field validation to the server instead of refusing to run.
    pub fn openapi_root(&self) -> Value {
        let mut paths = serde_json::Map::new();
        paths.insert("api/v1".into(), json!({"serverRelativeURL": format!("/openapi/v3/api/v1?hash={}", self.openapi_hash("", "v1"))}));
        for (g, vs) in self.groups() {
            for v in vs {
                paths.insert(
                    format!("apis/{g}/{v}"),
                    json!({"serverRelativeURL": format!("/openapi/v3/apis/{g}/{v}?hash={}", self.openapi_hash(&g, &v))}),
                );
            }
        }
        json!({"paths": paths})
    }

    fn openapi_hash(&self, group: &str, version: &str) -> String {
        use sha2::{Digest, Sha256};
        let doc = self
            .openapi_doc(group, version)
            .map(|d| d.to_string())
            .unwrap_or_default();
        let h = Sha256::digest(doc.as_bytes());
        h.iter().take(16).map(|b| format!("{b:02X}")).collect()
    }

    pub fn openapi_doc(&self, group: &str, version: &str) -> Option<Value> {
        if !self.has_group_version(group, version) {
            return None;
        }
        let prefix = if group.is_empty() {
            format!("/api/{version}")
        } else {
            format!("/apis/{group}/{version}")
        };
        let mut paths = serde_json::Map::new();
        let mut schemas = serde_json::Map::new();
        for d in self
            .defs
            .iter()
            .filter(|d| d.group == group && d.versions.iter().any(|v| v == version))
        {
            let item = if d.namespaced {
                format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", d.plural)
            } else {
                format!("{prefix}/{}/{{name}}", d.plural)
            };
            let gvk = json!({"group": d.group, "version": version, "kind": d.kind});
            let op = json!({
                "x-kubernetes-group-version-kind": gvk,
                "x-kubernetes-action": "patch",
                "parameters": [{"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}}],
                "requestBody": {"content": {"application/merge-patch+json": {"schema": {"type": "object"}}, "application/json-patch+json": {"schema": {"type": "object"}}}},
                "responses": {"200": {"description": "OK"}},
            });
            paths.insert(item, json!({"patch": op}));
            if let Some((name, schema)) = d.openapi_schema(version) {
                schemas.insert(name, schema);
            }
        }
        Some(json!({
            "openapi": "3.0.0",
            "info": {"title": "Kubernetes", "version": "v1.32.0"},
            "paths": paths,
            "components": {"schemas": schemas},
        }))
    }
}

/// The core group's kinds.
fn core_defs() -> Vec<ResourceDef> {
    let mut ns = ResourceDef::builtin("", "v1", "namespaces", "Namespace", false).shorts(&["ns"]);
    ns.status_subresource = true;
    let cm = ResourceDef::builtin("", "v1", "configmaps", "ConfigMap", true).shorts(&["cm"]);
    let ev = ResourceDef::builtin("", "v1", "events", "Event", true).shorts(&["ev"]);
    let sa =
        ResourceDef::builtin("", "v1", "serviceaccounts", "ServiceAccount", true).shorts(&["sa"]);
    // Stored only (no endpoints, no proxying): the installs carry the
    // metrics Service.
    let mut svc = ResourceDef::builtin("", "v1", "services", "Service", true).shorts(&["svc"]);
    svc.categories = vec!["all".into()];
    svc.status_subresource = true;
    // Made by the simulated ReplicaSet controller (crate::controllers::objects).
    let mut pods = ResourceDef::builtin("", "v1", "pods", "Pod", true).shorts(&["po"]);
    pods.categories = vec!["all".into()];
    pods.status_subresource = true;
    vec![ns, cm, ev, sa, svc, pods]
}

/// Deployments and Leases, and the PodDisruptionBudgets and
/// HorizontalPodAutoscalers the installs carry.
fn group_defs() -> Vec<ResourceDef> {
    let mut deploy =
        ResourceDef::builtin("apps", "v1", "deployments", "Deployment", true).shorts(&["deploy"]);
    deploy.categories = vec!["all".into()];
    deploy.status_subresource = true;
    deploy.scale_subresource = true;
    deploy.generation = true;
    // Made by the simulated Deployment controller (crate::controllers::objects).
    let mut rs =
        ResourceDef::builtin("apps", "v1", "replicasets", "ReplicaSet", true).shorts(&["rs"]);
    rs.categories = vec!["all".into()];
    rs.status_subresource = true;
    rs.generation = true;
    let lease = ResourceDef::builtin("coordination.k8s.io", "v1", "leases", "Lease", true);
    // Stored only (no eviction API): the installs carry one.
    let mut pdb = ResourceDef::builtin(
        "policy",
        "v1",
        "poddisruptionbudgets",
        "PodDisruptionBudget",
        true,
    )
    .shorts(&["pdb"]);
    pdb.status_subresource = true;
    pdb.generation = true;
    let mut hpa = ResourceDef::builtin(
        "autoscaling",
        "v2",
        "horizontalpodautoscalers",
        "HorizontalPodAutoscaler",
        true,
    )
    .shorts(&["hpa"]);
    hpa.status_subresource = true;
    hpa.generation = true;
    vec![deploy, rs, lease, pdb, hpa]
}

fn rbac_defs() -> Vec<ResourceDef> {
    let rbac = "rbac.authorization.k8s.io";
    let cr = ResourceDef::builtin(rbac, "v1", "clusterroles", "ClusterRole", false);
    let crb = ResourceDef::builtin(
        rbac,
        "v1",
        "clusterrolebindings",
        "ClusterRoleBinding",
        false,
    );
    let role = ResourceDef::builtin(rbac, "v1", "roles", "Role", true);
    let rb = ResourceDef::builtin(rbac, "v1", "rolebindings", "RoleBinding", true);
    vec![cr, crb, role, rb]
}

/// CustomResourceDefinitions, and the reviews.
fn extension_and_review_defs() -> Vec<ResourceDef> {
    let mut crd = ResourceDef::builtin(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        false,
    )
    .shorts(&["crd", "crds"]);
    crd.status_subresource = true;
    crd.generation = true;
    // Reviews: created and answered, never stored (crate::apiserver::api::review).
    let token_review = ResourceDef::builtin(
        "authentication.k8s.io",
        "v1",
        "tokenreviews",
        "TokenReview",
        false,
    );
    let access_review = ResourceDef::builtin(
        "authorization.k8s.io",
        "v1",
        "subjectaccessreviews",
        "SubjectAccessReview",
        false,
    );
    vec![crd, token_review, access_review]
}

/// The strings of a JSON array; anything else reads as empty.
pub(crate) fn str_list(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Turn a (validated) CRD into the kind it serves.
pub fn def_from_crd(crd: &Value) -> ResourceDef {
    let spec = &crd["spec"];
    let names = &spec["names"];
    let s = |v: &Value| v.as_str().unwrap_or("").to_string();
    let mut versions: Vec<(String, bool, &Value)> = spec["versions"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|v| v["served"].as_bool().unwrap_or(true))
                .map(|v| (s(&v["name"]), v["storage"].as_bool().unwrap_or(false), v))
                .collect()
        })
        .unwrap_or_default();
    // Storage version first.
    versions.sort_by_key(|(_, storage, _)| !*storage);
    let mut schemas = BTreeMap::new();
    let mut columns = BTreeMap::new();
    let mut status_subresource = false;
    for (name, _, v) in &versions {
        if let Some(schema) = v.pointer("/schema/openAPIV3Schema") {
            schemas.insert(name.clone(), schema.clone());
        }
        if v.pointer("/subresources/status").is_some() {
            status_subresource = true;
        }
        let cols = v["additionalPrinterColumns"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|c| PrinterColumn {
                        name: s(&c["name"]),
                        type_: s(&c["type"]),
                        json_path: s(&c["jsonPath"]),
                        priority: c["priority"].as_i64().unwrap_or(0),
                        description: s(&c["description"]),
                        format: s(&c["format"]),
                    })
                    .collect()
            })
            .unwrap_or_default();
        columns.insert(name.clone(), cols);
    }
    ResourceDef {
        group: s(&spec["group"]),
        versions: versions.iter().map(|(n, _, _)| n.clone()).collect(),
        plural: s(&names["plural"]),
        singular: names["singular"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| s(&names["kind"]).to_lowercase()),
        kind: s(&names["kind"]),
        namespaced: spec["scope"].as_str() != Some("Cluster"),
        short_names: str_list(names.get("shortNames")),
        categories: str_list(names.get("categories")),
        status_subresource,
        scale_subresource: false,
        generation: true,
        custom: true,
        schemas,
        columns,
    }
}
