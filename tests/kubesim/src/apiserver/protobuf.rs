//! Request bodies in Kubernetes' protobuf encoding, for the kinds kubectl's
//! generators post that way (`kubectl create namespace|configmap|secret
//! generic|serviceaccount|role|clusterrole|rolebinding|clusterrolebinding|
//! token`): client-go sends built-in kinds as protobuf when it can, and
//! falls back to JSON only on a 415 for CBOR, never for protobuf.
//!
//! The envelope is apimachinery's (`runtime/serializer/protobuf`): the
//! magic `k8s\0`, then a `runtime.Unknown` (1 typeMeta {1 apiVersion, 2
//! kind}, 2 raw). The raw message is decoded by the field numbers of the
//! kind's `generated.proto` below, into the JSON the same object would
//! have been sent as; empty strings are left out, as JSON's `omitempty`.

use serde_json::{json, Map, Value};

const MAGIC: &[u8] = b"k8s\0";

/// How one field of a message becomes JSON.
enum Shape {
    Str,
    Int,
    Bool,
    Strs,
    /// `map<string, string>`.
    StrMap,
    /// `map<string, bytes>`, as JSON's base64.
    BytesMap,
    Msg(&'static [Field]),
    Msgs(&'static [Field]),
}

type Field = (u32, &'static str, Shape);

const OWNER_REF: &[Field] = &[
    (1, "kind", Shape::Str),
    (3, "name", Shape::Str),
    (4, "uid", Shape::Str),
    (5, "apiVersion", Shape::Str),
    (6, "controller", Shape::Bool),
    (7, "blockOwnerDeletion", Shape::Bool),
];
const OBJECT_META: &[Field] = &[
    (1, "name", Shape::Str),
    (2, "generateName", Shape::Str),
    (3, "namespace", Shape::Str),
    (5, "uid", Shape::Str),
    (6, "resourceVersion", Shape::Str),
    (11, "labels", Shape::StrMap),
    (12, "annotations", Shape::StrMap),
    (13, "ownerReferences", Shape::Msgs(OWNER_REF)),
    (14, "finalizers", Shape::Strs),
];
const SUBJECT: &[Field] = &[
    (1, "kind", Shape::Str),
    (2, "apiGroup", Shape::Str),
    (3, "name", Shape::Str),
    (4, "namespace", Shape::Str),
];
const ROLE_REF: &[Field] = &[
    (1, "apiGroup", Shape::Str),
    (2, "kind", Shape::Str),
    (3, "name", Shape::Str),
];
const BINDING: &[Field] = &[
    (1, "metadata", Shape::Msg(OBJECT_META)),
    (2, "subjects", Shape::Msgs(SUBJECT)),
    (3, "roleRef", Shape::Msg(ROLE_REF)),
];
const POLICY_RULE: &[Field] = &[
    (1, "verbs", Shape::Strs),
    (2, "apiGroups", Shape::Strs),
    (3, "resources", Shape::Strs),
    (4, "resourceNames", Shape::Strs),
    (5, "nonResourceURLs", Shape::Strs),
];
const REQUIREMENT: &[Field] = &[
    (1, "key", Shape::Str),
    (2, "operator", Shape::Str),
    (3, "values", Shape::Strs),
];
const LABEL_SELECTOR: &[Field] = &[
    (1, "matchLabels", Shape::StrMap),
    (2, "matchExpressions", Shape::Msgs(REQUIREMENT)),
];
const AGGREGATION_RULE: &[Field] = &[(1, "clusterRoleSelectors", Shape::Msgs(LABEL_SELECTOR))];
const CLUSTER_ROLE: &[Field] = &[
    (1, "metadata", Shape::Msg(OBJECT_META)),
    (2, "rules", Shape::Msgs(POLICY_RULE)),
    (3, "aggregationRule", Shape::Msg(AGGREGATION_RULE)),
];
const CONFIG_MAP: &[Field] = &[
    (1, "metadata", Shape::Msg(OBJECT_META)),
    (2, "data", Shape::StrMap),
    (3, "binaryData", Shape::BytesMap),
    (4, "immutable", Shape::Bool),
];
const SECRET: &[Field] = &[
    (1, "metadata", Shape::Msg(OBJECT_META)),
    (2, "data", Shape::BytesMap),
    (3, "type", Shape::Str),
    (4, "stringData", Shape::StrMap),
    (5, "immutable", Shape::Bool),
];
const OBJECT_REF: &[Field] = &[
    (1, "kind", Shape::Str),
    (2, "namespace", Shape::Str),
    (3, "name", Shape::Str),
    (4, "uid", Shape::Str),
    (5, "apiVersion", Shape::Str),
];
const NAME_REF: &[Field] = &[(1, "name", Shape::Str)];
const SERVICE_ACCOUNT: &[Field] = &[
    (1, "metadata", Shape::Msg(OBJECT_META)),
    (2, "secrets", Shape::Msgs(OBJECT_REF)),
    (3, "imagePullSecrets", Shape::Msgs(NAME_REF)),
    (4, "automountServiceAccountToken", Shape::Bool),
];
const NAMESPACE_SPEC: &[Field] = &[(1, "finalizers", Shape::Strs)];
const NAMESPACE: &[Field] = &[
    (1, "metadata", Shape::Msg(OBJECT_META)),
    (2, "spec", Shape::Msg(NAMESPACE_SPEC)),
];
const BOUND_REF: &[Field] = &[
    (1, "kind", Shape::Str),
    (2, "apiVersion", Shape::Str),
    (3, "name", Shape::Str),
    (4, "uid", Shape::Str),
];
const TOKEN_REQUEST_SPEC: &[Field] = &[
    (1, "audiences", Shape::Strs),
    (3, "boundObjectRef", Shape::Msg(BOUND_REF)),
    (4, "expirationSeconds", Shape::Int),
];
const TOKEN_REQUEST: &[Field] = &[
    (1, "metadata", Shape::Msg(OBJECT_META)),
    (2, "spec", Shape::Msg(TOKEN_REQUEST_SPEC)),
];

/// The message of each kind decoded here, by `apiVersion` and `kind`.
fn message_of(api_version: &str, kind: &str) -> Option<&'static [Field]> {
    Some(match (api_version, kind) {
        ("v1", "Namespace") => NAMESPACE,
        ("v1", "ConfigMap") => CONFIG_MAP,
        ("v1", "Secret") => SECRET,
        ("v1", "ServiceAccount") => SERVICE_ACCOUNT,
        ("authentication.k8s.io/v1", "TokenRequest") => TOKEN_REQUEST,
        ("rbac.authorization.k8s.io/v1", "Role" | "ClusterRole") => CLUSTER_ROLE,
        ("rbac.authorization.k8s.io/v1", "RoleBinding" | "ClusterRoleBinding") => BINDING,
        _ => return None,
    })
}

/// Why a body could not be decoded.
#[derive(Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// Well-formed, but of a kind not decoded here (the kind named).
    Unsupported(String),
    Malformed(&'static str),
}

/// One wire-format field: its number and its payload.
enum Wire<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

/// A cursor over one message's bytes.
struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Result<u64, DecodeError> {
        let mut v = 0u64;
        for i in 0..10 {
            let (&b, rest) = self
                .buf
                .split_first()
                .ok_or(DecodeError::Malformed("truncated varint"))?;
            self.buf = rest;
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(DecodeError::Malformed("varint too long"))
    }

    fn take(&mut self, n: u64) -> Result<&'a [u8], DecodeError> {
        let n = usize::try_from(n).map_err(|_| DecodeError::Malformed("length too large"))?;
        if n > self.buf.len() {
            return Err(DecodeError::Malformed("length past the end"));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    fn next(&mut self) -> Option<Result<(u32, Wire<'a>), DecodeError>> {
        if self.buf.is_empty() {
            return None;
        }
        Some(self.field())
    }

    fn field(&mut self) -> Result<(u32, Wire<'a>), DecodeError> {
        let key = self.varint()?;
        let number = u32::try_from(key >> 3).map_err(|_| DecodeError::Malformed("field number"))?;
        let wire = match key & 7 {
            0 => Wire::Varint(self.varint()?),
            2 => {
                let n = self.varint()?;
                Wire::Bytes(self.take(n)?)
            }
            1 => {
                self.take(8)?;
                Wire::Fixed
            }
            5 => {
                self.take(4)?;
                Wire::Fixed
            }
            _ => return Err(DecodeError::Malformed("wire type")),
        };
        Ok((number, wire))
    }
}

fn text(b: &[u8]) -> Result<String, DecodeError> {
    String::from_utf8(b.to_vec()).map_err(|_| DecodeError::Malformed("string is not UTF-8"))
}

/// A map entry: key 1, value 2.
fn entry(b: &[u8]) -> Result<(String, &[u8]), DecodeError> {
    let (mut key, mut value) = (String::new(), &[][..]);
    let mut r = Reader { buf: b };
    while let Some(f) = r.next() {
        match f? {
            (1, Wire::Bytes(k)) => key = text(k)?,
            (2, Wire::Bytes(v)) => value = v,
            _ => {}
        }
    }
    Ok((key, value))
}

fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | (u32::from(b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ABC[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Add one field's payload to `obj` as its shape says.
fn put(
    obj: &mut Map<String, Value>,
    name: &str,
    shape: &Shape,
    wire: Wire,
    depth: u32,
) -> Result<(), DecodeError> {
    let item = |obj: &mut Map<String, Value>, v: Value| {
        if let Value::Array(a) = obj.entry(name).or_insert_with(|| json!([])) {
            a.push(v);
        }
    };
    let pair = |obj: &mut Map<String, Value>, k: String, v: Value| {
        if let Value::Object(m) = obj.entry(name).or_insert_with(|| json!({})) {
            m.insert(k, v);
        }
    };
    match (shape, wire) {
        (Shape::Str, Wire::Bytes([])) => {}
        (Shape::Str, Wire::Bytes(b)) => drop(obj.insert(name.into(), json!(text(b)?))),
        (Shape::Int, Wire::Varint(v)) => drop(obj.insert(name.into(), json!(v as i64))),
        (Shape::Bool, Wire::Varint(v)) => drop(obj.insert(name.into(), json!(v != 0))),
        (Shape::Strs, Wire::Bytes(b)) => item(obj, json!(text(b)?)),
        (Shape::StrMap, Wire::Bytes(b)) => {
            let (k, v) = entry(b)?;
            pair(obj, k, json!(text(v)?));
        }
        (Shape::BytesMap, Wire::Bytes(b)) => {
            let (k, v) = entry(b)?;
            pair(obj, k, json!(base64(v)));
        }
        (Shape::Msg(fields), Wire::Bytes(b)) => {
            drop(obj.insert(name.into(), message(b, fields, depth + 1)?))
        }
        (Shape::Msgs(fields), Wire::Bytes(b)) => item(obj, message(b, fields, depth + 1)?),
        _ => return Err(DecodeError::Malformed("wire type does not match the field")),
    }
    Ok(())
}

/// Decode one message by its fields; fields not listed are skipped.
fn message(b: &[u8], fields: &[Field], depth: u32) -> Result<Value, DecodeError> {
    if depth > 8 {
        return Err(DecodeError::Malformed("nested too deep"));
    }
    let mut obj = Map::new();
    let mut r = Reader { buf: b };
    while let Some(f) = r.next() {
        let (number, wire) = f?;
        if let Some((_, name, shape)) = fields.iter().find(|(n, _, _)| *n == number) {
            put(&mut obj, name, shape, wire, depth)?;
        }
    }
    Ok(Value::Object(obj))
}

/// A protobuf request body as the JSON object it stands for.
pub fn decode(body: &[u8]) -> Result<Value, DecodeError> {
    let rest = body
        .strip_prefix(MAGIC)
        .ok_or(DecodeError::Malformed("no k8s protobuf magic"))?;
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), &[][..]);
    let mut r = Reader { buf: rest };
    while let Some(f) = r.next() {
        match f? {
            (1, Wire::Bytes(tm)) => {
                let mut t = Reader { buf: tm };
                while let Some(f) = t.next() {
                    match f? {
                        (1, Wire::Bytes(v)) => api_version = text(v)?,
                        (2, Wire::Bytes(k)) => kind = text(k)?,
                        _ => {}
                    }
                }
            }
            (2, Wire::Bytes(b)) => raw = b,
            _ => {}
        }
    }
    let fields = message_of(&api_version, &kind)
        .ok_or_else(|| DecodeError::Unsupported(format!("{api_version}, Kind={kind}")))?;
    let mut obj = message(raw, fields, 0)?;
    obj["apiVersion"] = json!(api_version);
    obj["kind"] = json!(kind);
    Ok(obj)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// Bodies kubectl v1.32 posted to a server, captured byte for byte.
    #[test]
    fn kubectls_generator_bodies_decode_to_their_json() {
        let crb = hex("6b3873000a320a1c726261632e617574686f72697a6174696f6e2e6b38732e696f2f76311212436c7573746572526f6c6542696e64696e67128b010a110a017812001a0022002a0032003800420012280a04557365721219726261632e617574686f72697a6174696f6e2e6b38732e696f1a03626f622200121c0a0e536572766963654163636f756e7412001a0373613122036e73311a2e0a19726261632e617574686f72697a6174696f6e2e6b38732e696f120b436c7573746572526f6c651a04766965771a002200");
        assert_eq!(
            decode(&crb).unwrap(),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": "x"},
                "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "bob"},
                    {"kind": "ServiceAccount", "name": "sa1", "namespace": "ns1"}],
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"}})
        );
        let token = hex("6b3873000a280a1861757468656e7469636174696f6e2e6b38732e696f2f7631120c546f6b656e52657175657374121a0a100a0012001a0022002a0032003800420012001a040a0012001a002200");
        assert_eq!(
            decode(&token).unwrap(),
            json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                "metadata": {}, "spec": {}})
        );
        let ns = hex("6b3873000a0f0a02763112094e616d657370616365121c0a140a047465616d12001a0022002a0032003800420012001a020a001a002200");
        assert_eq!(
            decode(&ns).unwrap(),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}, "spec": {}})
        );
        let cm = hex("6b3873000a0f0a0276311209436f6e6669674d6170121c0a120a02633112001a0022002a0032003800420012060a01611201621a002200");
        assert_eq!(
            decode(&cm).unwrap(),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c1"}, "data": {"a": "b"}})
        );
        let sa = hex("6b3873000a140a027631120e536572766963654163636f756e7412140a120a02733112001a0022002a003200380042001a002200");
        assert_eq!(
            decode(&sa).unwrap(),
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "s1"}})
        );
    }

    #[test]
    fn bad_bodies_are_errors_not_panics() {
        assert_eq!(
            decode(b"{}"),
            Err(DecodeError::Malformed("no k8s protobuf magic"))
        );
        // A length running past the end, a truncated varint, a kind not
        // decoded here.
        assert!(decode(&hex("6b387300 0a ff01".replace(' ', "").as_str())).is_err());
        assert!(decode(&hex("6b3873000aff")).is_err());
        let pod = hex("6b3873000a090a0276311203506f64");
        assert_eq!(
            decode(&pod),
            Err(DecodeError::Unsupported("v1, Kind=Pod".into()))
        );
        for n in 0..64u8 {
            let mut b = MAGIC.to_vec();
            b.extend((0..n).map(|i| i.wrapping_mul(37) ^ n));
            let _ = decode(&b);
        }
        assert_eq!(base64(b"abcd"), "YWJjZA==");
    }
}
