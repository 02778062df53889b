//! Label selectors (`=`, `==`, `!=`, exists, `!`, `in`, `notin`) and field
//! selectors, as list and watch accept them.

use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
enum Req {
    Eq(String, String),
    Ne(String, String),
    Exists(String),
    NotExists(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector(Vec<Req>);

/// Split on commas that are not inside parentheses.
fn split_top(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut cur = String::new();
    for c in s.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    out.push(cur);
    out.into_iter()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

fn set_values(s: &str) -> Result<Vec<String>, String> {
    let inner = s
        .trim()
        .strip_prefix('(')
        .and_then(|x| x.strip_suffix(')'))
        .ok_or_else(|| format!("expected a parenthesised set, got {s:?}"))?;
    Ok(inner.split(',').map(|v| v.trim().to_string()).collect())
}

impl LabelSelector {
    pub fn parse(s: &str) -> Result<LabelSelector, String> {
        let mut reqs = Vec::new();
        for term in split_top(s) {
            let req = if let Some(k) = term.strip_prefix('!') {
                Req::NotExists(k.trim().to_string())
            } else if let Some((k, v)) = term.split_once("!=") {
                Req::Ne(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = term.split_once("==") {
                Req::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = term.split_once('=') {
                Req::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, rest)) = term.split_once(" notin ") {
                Req::NotIn(k.trim().into(), set_values(rest)?)
            } else if let Some((k, rest)) = term.split_once(" in ") {
                Req::In(k.trim().into(), set_values(rest)?)
            } else if term
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
            {
                Req::Exists(term)
            } else {
                return Err(format!("unable to parse requirement: {term:?}"));
            };
            reqs.push(req);
        }
        Ok(LabelSelector(reqs))
    }

    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels");
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Req::Eq(k, v) => get(k) == Some(v.as_str()),
            Req::Ne(k, v) => get(k) != Some(v.as_str()),
            Req::Exists(k) => get(k).is_some(),
            Req::NotExists(k) => get(k).is_none(),
            Req::In(k, vs) => get(k).map(|x| vs.iter().any(|v| v == x)).unwrap_or(false),
            Req::NotIn(k, vs) => get(k).map(|x| !vs.iter().any(|v| v == x)).unwrap_or(true),
        })
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

/// The fields each kind can be selected on (others are a 400, as on a real server).
fn field_value(kind: &str, field: &str, obj: &Value) -> Option<Option<String>> {
    let s = |p: &str| obj.pointer(p).and_then(Value::as_str).map(str::to_string);
    let v = match field {
        "metadata.name" => s("/metadata/name"),
        "metadata.namespace" => s("/metadata/namespace"),
        f if kind == "Event" => match f {
            "involvedObject.kind" => s("/involvedObject/kind"),
            "involvedObject.namespace" => s("/involvedObject/namespace"),
            "involvedObject.name" => s("/involvedObject/name"),
            "involvedObject.uid" => s("/involvedObject/uid"),
            "involvedObject.apiVersion" => s("/involvedObject/apiVersion"),
            "involvedObject.resourceVersion" => s("/involvedObject/resourceVersion"),
            "involvedObject.fieldPath" => s("/involvedObject/fieldPath"),
            "reason" => s("/reason"),
            "type" => s("/type"),
            "reportingComponent" => s("/reportingComponent"),
            // `event.ToSelectableFields`: the source component, or else
            // the reporting controller.
            "source" => s("/source/component")
                .filter(|c| !c.is_empty())
                .or_else(|| s("/reportingComponent")),
            _ => return None,
        },
        "status.phase" if kind == "Namespace" => s("/status/phase"),
        // `pod.ToSelectableFields` (pkg/registry/core/pod/strategy.go).
        f if kind == "Pod" => match f {
            "spec.nodeName" => s("/spec/nodeName"),
            "spec.restartPolicy" => s("/spec/restartPolicy"),
            "spec.schedulerName" => s("/spec/schedulerName"),
            "spec.serviceAccountName" => s("/spec/serviceAccountName"),
            "spec.hostNetwork" => Some(
                obj.pointer("/spec/hostNetwork")
                    .and_then(Value::as_bool)
                    .unwrap_or(false)
                    .to_string(),
            ),
            "status.phase" => s("/status/phase"),
            "status.podIP" => s("/status/podIP"),
            "status.nominatedNodeName" => s("/status/nominatedNodeName"),
            _ => return None,
        },
        // `ReplicaSetToSelectableFields` (pkg/registry/apps/replicaset/strategy.go).
        "status.replicas" if kind == "ReplicaSet" => Some(
            obj.pointer("/status/replicas")
                .and_then(Value::as_i64)
                .unwrap_or(0)
                .to_string(),
        ),
        _ => return None,
    };
    Some(v)
}

impl FieldSelector {
    pub fn parse(s: &str, kind: &str) -> Result<FieldSelector, String> {
        let mut out = Vec::new();
        for term in split_top(s) {
            let (k, eq, v) = if let Some((k, v)) = term.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = term.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = term.split_once('=') {
                (k, true, v)
            } else {
                return Err(format!("invalid field selector: {term:?}"));
            };
            let k = k.trim();
            if field_value(kind, k, &Value::Null).is_none() {
                return Err(format!("field label not supported: {k}"));
            }
            out.push((k.to_string(), eq, v.trim().to_string()));
        }
        Ok(FieldSelector(out))
    }

    pub fn matches(&self, kind: &str, obj: &Value) -> bool {
        self.0.iter().all(|(k, eq, v)| {
            let actual = field_value(kind, k, obj).flatten().unwrap_or_default();
            (actual == *v) == *eq
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"name": "a", "namespace": "ns", "labels": labels}})
    }

    #[test]
    fn label_operators() {
        let o = obj(json!({"app": "web", "tier": "fe"}));
        for (sel, want) in [
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app", true),
            ("!app", false),
            ("!missing", true),
            ("app in (web, api)", true),
            ("app notin (web)", false),
            ("missing notin (x)", true),
            ("app=web,tier=fe", true),
            ("app=web,tier=be", false),
            ("", true),
        ] {
            assert_eq!(
                LabelSelector::parse(sel).unwrap().matches(&o),
                want,
                "{sel}"
            );
        }
        assert!(LabelSelector::parse("a b c").is_err());
    }

    #[test]
    fn field_selectors() {
        let ev = json!({"metadata": {"name": "e", "namespace": "ns"}, "involvedObject": {"kind": "OpenMedModel", "name": "m", "uid": "u1"}, "type": "Warning", "reason": "TargetNotFound"});
        let f = FieldSelector::parse(
            "involvedObject.kind=OpenMedModel,involvedObject.uid=u1,type=Warning",
            "Event",
        )
        .unwrap();
        assert!(f.matches("Event", &ev));
        let f = FieldSelector::parse("reason!=TargetNotFound", "Event").unwrap();
        assert!(!f.matches("Event", &ev));
        assert!(FieldSelector::parse("spec.replicas=1", "Deployment").is_err());
        let f = FieldSelector::parse("metadata.name=e", "Event").unwrap();
        assert!(f.matches("Event", &ev));
    }
}
