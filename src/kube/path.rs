//! Request paths built from typed parts, never by pasting user input.

use super::error::{Error, Result};
use super::names::{is_dns_label, is_dns_subdomain};

/// A kind of object the operator reads or writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ResourceType {
    /// Empty for the core group.
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
}

impl ResourceType {
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

pub const CONFIG_MAPS: ResourceType = ResourceType {
    group: "",
    version: "v1",
    plural: "configmaps",
    kind: "ConfigMap",
    namespaced: true,
};
pub const EVENTS: ResourceType = ResourceType {
    group: "",
    version: "v1",
    plural: "events",
    kind: "Event",
    namespaced: true,
};
pub const DEPLOYMENTS: ResourceType = ResourceType {
    group: "apps",
    version: "v1",
    plural: "deployments",
    kind: "Deployment",
    namespaced: true,
};
pub const HORIZONTAL_POD_AUTOSCALERS: ResourceType = ResourceType {
    group: "autoscaling",
    version: "v2",
    plural: "horizontalpodautoscalers",
    kind: "HorizontalPodAutoscaler",
    namespaced: true,
};
pub const LEASES: ResourceType = ResourceType {
    group: "coordination.k8s.io",
    version: "v1",
    plural: "leases",
    kind: "Lease",
    namespaced: true,
};
/// Created (never stored) to ask who a metrics caller's token names.
pub const TOKEN_REVIEWS: ResourceType = ResourceType {
    group: "authentication.k8s.io",
    version: "v1",
    plural: "tokenreviews",
    kind: "TokenReview",
    namespaced: false,
};
/// Created (never stored) to ask whether that caller may read `/metrics`.
pub const SUBJECT_ACCESS_REVIEWS: ResourceType = ResourceType {
    group: "authorization.k8s.io",
    version: "v1",
    plural: "subjectaccessreviews",
    kind: "SubjectAccessReview",
    namespaced: false,
};
pub const NAMESPACES: ResourceType = ResourceType {
    group: "",
    version: "v1",
    plural: "namespaces",
    kind: "Namespace",
    namespaced: false,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subresource {
    Status,
}

/// `/api[s]/{group}/{version}/[namespaces/{ns}/]{plural}[/{name}[/{sub}]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourcePath {
    rt: ResourceType,
    namespace: Option<String>,
    name: Option<String>,
    sub: Option<Subresource>,
}

impl ResourcePath {
    /// The collection of `rt`, in one namespace or (None) across all.
    pub fn collection(rt: ResourceType, namespace: Option<&str>) -> Result<ResourcePath> {
        let namespace = match namespace {
            Some(ns) if rt.namespaced => Some(checked_namespace(ns)?),
            Some(_) => return Err(Error::Config(format!("{} are not namespaced", rt.plural))),
            None => None,
        };
        Ok(ResourcePath {
            rt,
            namespace,
            name: None,
            sub: None,
        })
    }

    /// One named object. Namespaced kinds need a namespace.
    pub fn object(rt: ResourceType, namespace: Option<&str>, name: &str) -> Result<ResourcePath> {
        if rt.namespaced && namespace.is_none() {
            return Err(Error::Config(format!("{} need a namespace", rt.plural)));
        }
        let mut p = ResourcePath::collection(rt, namespace)?;
        if !is_dns_subdomain(name) {
            return Err(Error::Config(format!(
                "invalid object name {name:?}: must be a DNS-1123 subdomain"
            )));
        }
        p.name = Some(name.to_string());
        Ok(p)
    }

    pub fn status(mut self) -> ResourcePath {
        if self.name.is_some() {
            self.sub = Some(Subresource::Status);
        }
        self
    }

    pub fn resource_type(&self) -> ResourceType {
        self.rt
    }

    pub fn render(&self) -> String {
        let mut out = if self.rt.group.is_empty() {
            format!("/api/{}", self.rt.version)
        } else {
            format!("/apis/{}/{}", self.rt.group, self.rt.version)
        };
        if let Some(ns) = &self.namespace {
            out.push_str("/namespaces/");
            out.push_str(&encode_segment(ns));
        }
        out.push('/');
        out.push_str(self.rt.plural);
        if let Some(name) = &self.name {
            out.push('/');
            out.push_str(&encode_segment(name));
        }
        if let Some(Subresource::Status) = self.sub {
            out.push_str("/status");
        }
        out
    }
}

fn checked_namespace(ns: &str) -> Result<String> {
    if is_dns_label(ns) {
        Ok(ns.to_string())
    } else {
        Err(Error::Config(format!(
            "invalid namespace {ns:?}: must be a DNS-1123 label"
        )))
    }
}

/// Percent-encode everything outside RFC 3986 unreserved characters. Valid
/// names never need it; it is there so that a bug upstream cannot turn a name
/// into extra path segments.
pub fn encode_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_core_and_group_paths() {
        let p = ResourcePath::object(CONFIG_MAPS, Some("openmed"), "svc-model-manifest").unwrap();
        assert_eq!(
            p.render(),
            "/api/v1/namespaces/openmed/configmaps/svc-model-manifest"
        );
        let p = ResourcePath::object(DEPLOYMENTS, Some("a"), "b.c")
            .unwrap()
            .status();
        assert_eq!(
            p.render(),
            "/apis/apps/v1/namespaces/a/deployments/b.c/status"
        );
        let p = ResourcePath::collection(DEPLOYMENTS, None).unwrap();
        assert_eq!(p.render(), "/apis/apps/v1/deployments");
        let p = ResourcePath::object(NAMESPACES, None, "openmed").unwrap();
        assert_eq!(p.render(), "/api/v1/namespaces/openmed");
    }

    #[test]
    fn refuses_bad_names() {
        for bad in ["../secrets", "a/b", "", "A", "x y", "..", "a%2fb"] {
            assert!(
                ResourcePath::object(CONFIG_MAPS, Some("ns"), bad).is_err(),
                "{bad}"
            );
        }
        for bad in ["..", "a.b", "kube/system", "-x"] {
            assert!(
                ResourcePath::collection(CONFIG_MAPS, Some(bad)).is_err(),
                "{bad}"
            );
        }
        assert!(ResourcePath::object(CONFIG_MAPS, None, "x").is_err());
        assert!(ResourcePath::collection(NAMESPACES, Some("x")).is_err());
    }

    #[test]
    fn encodes_anything_odd() {
        assert_eq!(encode_segment("a/b c"), "a%2Fb%20c");
        assert_eq!(encode_segment("ok-name.1"), "ok-name.1");
    }
}
