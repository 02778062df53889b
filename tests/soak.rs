//! The soak: the real operator binary on kubesim, driven by a
//! seeded random sequence of user operations and faults over three
//! namespaces and three names (so the same name lives in several namespaces
//! and collisions are frequent), checked by invariants at every quiet point.
//!
//! - `cargo test --test soak` runs three fixed seeds of about 20 s each.
//! - `scripts/soak.sh --minutes N [--seed S]` runs longer, or replays a seed.
//!
//! Environment: `OMO_SOAK_SECONDS` (total budget, default 60),
//! `OMO_SOAK_SEED_SECONDS` (per seed, default 20), `OMO_SOAK_SEED` (replay one
//! seed for the whole budget), `OMO_SOAK_FRESH=1` (fresh random seeds instead
//! of the suite's fixed ones), `OMO_SOAK_KEEP_GOING=1` (report every broken
//! invariant of every seed at the end instead of stopping at the first
//! quiet point that breaks one), `OMO_SOAK_VERBOSE=1` (print every seed's
//! operation log), `OMO_OPERATOR_BIN` (another operator build, as in e2e).
//!
//! The sequence of operations and faults is a function of the seed alone
//! (an operation that does not apply at the moment, such as deleting a model
//! that does not exist, is logged as skipped), so a seed replays the same
//! sequence; what the operator makes of it depends on timing. The soak's own
//! writes go through kubesim's direct methods, so every request in kubesim's
//! log is the operator's.
//!
//! Operations: create a model (its own Deployment, or another model's);
//! change version, replicas, strategy, deadline; an invalid strategy, a
//! missing container, and their repair; retarget; an unloadable version
//! (with and without rollbackOnFailure); `openmed.ai/rollback-to` naming a
//! retained version, one never retained, garbage, blanks, its removal, and
//! making a rollback permanent; delete, and delete-and-recreate under the
//! same name; the target Deployment deleted, created, recreated; a foreign
//! ConfigMap under the manifest name (also just before the model is created)
//! and its removal; hand edits to the Deployment's env vars, sidecar,
//! replicas, annotations and manifest digest, and to the model's ConfigMap.
//! Faults between them: watch cuts, forced 410s (as HTTP and in stream),
//! compaction, bursts of 500 and of 429 with Retry-After, a paused API,
//! lagging watches, SIGKILL of the operator and a restart.
//!
//! Not reached here: `TargetNotOptedIn` (docs/contract.md §6.2 step 5,
//! §9.8; every Deployment the soak creates carries the opt-in label
//! `openmed.ai/managed-target: "true"`, and no operation removes it), refused
//! writes (TargetPatchRejected / ConfigMapRejected, §9.19), paused
//! Deployments (§9.20), TLS and token rotation. tests/reconcile.rs and
//! tests/e2e.rs cover those.
//!
//! A quiet point: no model being deleted, rolling out, or behind its
//! generation; every watch stream of the operator re-established since the
//! last cut, 410, pause or restart; then no status change and no write for
//! 1.5 s. Invariants, checked from the API alone at each quiet point:
//! 1. a live model with a valid spec, a loadable version and nothing blocking
//!    it is Ready: its ConfigMap holds the canonical manifest and the
//!    version, its Deployment carries the manifest digest, the owner, the
//!    claim label, the configMapKeyRef and the spec's replicas, deadline and
//!    strategy, and serves. A blocked, invalid or manually rolled back model
//!    shows exactly that state;
//! 2. a model whose version cannot load is RolledBack to a version that
//!    served (or Failed when rollback is off or impossible), and is not
//!    retried by itself;
//! 3. a deleted model is gone (no finalizer left), owns no ConfigMap, claims
//!    no Deployment; a Deployment nobody claims has a blank preload;
//! 4. Events belong to the right object: each names a uid its (namespace,
//!    name) really had, at most one Event per (object, reason, generation),
//!    none of a deleted incarnation touched after a new one was created, and
//!    the Events a model's state requires exist with its own uid;
//! 5. foreign ConfigMaps are never written; Deployments keep their other
//!    containers, env vars, labels and annotations as the soak left them; a
//!    Deployment no model ever targeted is never written; the operator never
//!    creates or deletes a Deployment;
//! 6. three resync periods (`--resync-seconds 1`) of quiet pass with zero
//!    writes and no status change;
//! 7. the operator never panics or exits, and SIGTERM exits 0.

#[path = "common/operator.rs"]
mod harness;

use harness::*;
use kubesim::faults::RequestRecord;
use kubesim::Sim;
use openmed_operator::model::names::event_name;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const NAMESPACES: [&str; 3] = ["openmed", "team-b", "team-c"];
const NAMES: [&str; 3] = ["openmed-service", "ner", "deid"];
const V3: &str = "OpenMed/OpenMed-PII-SuperClinical-Small-44M-v3";
const V4: &str = "OpenMed/OpenMed-PII-SuperClinical-Small-44M-v4";
const LOADABLE: [&str; 4] = [V1, V2, V3, V4];
const UNLOADABLE: [&str; 2] = [BAD, "OpenMed/OpenMed-PII-unloadable-v5"];
/// A well-formed version the soak never sets: never retained.
const NEVER_SET: &str = "OpenMed/OpenMed-PII-SuperClinical-Small-44M-v9";
const PRELOAD: &str = "OPENMED_SERVICE_PRELOAD_MODELS";
const OWNER: &str = "openmed.ai/model-resource";
const HASH: &str = "openmed.ai/model-manifest-hash";
const CLAIM: &str = "openmed.ai/managed";
const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
const ROLLBACK_TO: &str = "openmed.ai/rollback-to";
const CONTAINER: &str = "openmed-service";
const RESYNC_SECONDS: u64 = 1;
/// Quiet: no status change and no write for this long.
const QUIET_FOR: Duration = Duration::from_millis(1500);
const QUIET_TIMEOUT: Duration = Duration::from_secs(60);
/// No model busy, but still writing or changing status after this long.
const QUIET_IDLE_TIMEOUT: Duration = Duration::from_secs(15);
/// Three resync periods and a little.
const WINDOW: Duration = Duration::from_millis(3 * 1000 * RESYNC_SECONDS + 300);
const DELETE_TIMEOUT: Duration = Duration::from_secs(30);
/// A seed starts no new batch of operations this close to its budget: the
/// last quiet point and its window need about this long.
const TAIL: Duration = Duration::from_secs(5);

// ---------------------------------------------------------------- PRNG ----

/// splitmix64: small, self-contained and good enough to pick operations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pct(&mut self, p: u64) -> bool {
        self.next() % 100 < p
    }

    fn pick<T: Clone>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len())].clone()
    }
}

// ----------------------------------------------------- operations, faults ----

/// A (namespace, name) of the pool: a model, its Deployment, its ConfigMap.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
struct Key {
    ns: usize,
    name: usize,
}

impl Key {
    fn ns(self) -> &'static str {
        NAMESPACES[self.ns]
    }
    fn name(self) -> &'static str {
        NAMES[self.name]
    }
    fn cm(self) -> String {
        format!("{}-model-manifest", self.name())
    }
    fn of(ns: &str, name: &str) -> Option<Key> {
        Some(Key {
            ns: NAMESPACES.iter().position(|n| *n == ns)?,
            name: NAMES.iter().position(|n| *n == name)?,
        })
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.ns(), self.name())
    }
}

#[derive(Debug, Clone, Copy)]
enum Pick {
    /// The last (even) or previous (odd) successful version in status.
    Retained(u64),
    NotRetained,
    Garbage,
    /// Whitespace only: counts as absent.
    Blank,
    Remove,
    /// Set spec.version to the annotation's version and remove it.
    MakePermanent {
        annotation_first: bool,
    },
}

#[derive(Debug, Clone)]
enum Op {
    CreateModel {
        m: Key,
        spec: Value,
    },
    RecreateModel {
        m: Key,
        spec: Value,
    },
    DeleteModel {
        m: Key,
    },
    PatchSpec {
        m: Key,
        what: &'static str,
        spec: Value,
    },
    RollbackTo {
        m: Key,
        pick: Pick,
    },
    DeleteDeployment {
        d: Key,
    },
    CreateDeployment {
        d: Key,
    },
    RecreateDeployment {
        d: Key,
    },
    ForeignConfigMap {
        m: Key,
    },
    /// Delete the model, put a foreign ConfigMap under its manifest name,
    /// create the model again.
    ForeignThenCreate {
        m: Key,
        spec: Value,
    },
    RemoveForeignConfigMap {
        m: Key,
    },
    EditEnv {
        d: Key,
        level: &'static str,
        toggle_extra: bool,
    },
    EditSidecar {
        d: Key,
        tag: u64,
    },
    EditReplicas {
        d: Key,
        replicas: i64,
    },
    EditAnnotation {
        d: Key,
        template: bool,
        n: u64,
    },
    GarbleHash {
        d: Key,
    },
    EditConfigMap {
        m: Key,
        kind: u64,
    },
}

#[derive(Debug, Clone)]
enum Fault {
    CutWatches,
    Expire {
        n: u32,
        in_stream: bool,
    },
    Compact,
    Fail {
        method: Option<&'static str>,
        path: &'static str,
        code: u16,
        count: u32,
    },
    Pause {
        ms: u64,
    },
    WatchLag {
        path: &'static str,
        ms: u64,
    },
    KillRestart {
        down_ms: u64,
    },
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::CreateModel { m, spec } => write!(f, "create model {m} {spec}"),
            Op::RecreateModel { m, spec } => write!(f, "delete and recreate model {m} {spec}"),
            Op::DeleteModel { m } => write!(f, "delete model {m}"),
            Op::PatchSpec { m, what, spec } => write!(f, "{what} of model {m}: spec {spec}"),
            Op::RollbackTo { m, pick } => write!(f, "rollback-to on model {m}: {pick:?}"),
            Op::DeleteDeployment { d } => write!(f, "delete Deployment {d}"),
            Op::CreateDeployment { d } => write!(f, "create Deployment {d}"),
            Op::RecreateDeployment { d } => write!(f, "delete and recreate Deployment {d}"),
            Op::ForeignConfigMap { m } => {
                write!(f, "foreign ConfigMap {}/{}", m.ns(), m.cm())
            }
            Op::RemoveForeignConfigMap { m } => {
                write!(f, "remove foreign ConfigMap {}/{}", m.ns(), m.cm())
            }
            Op::ForeignThenCreate { m, spec } => write!(
                f,
                "delete model {m}, foreign ConfigMap {}/{}, create model {m} {spec}",
                m.ns(),
                m.cm()
            ),
            Op::EditEnv {
                d,
                level,
                toggle_extra,
            } => write!(
                f,
                "hand edit Deployment {d}: LOG_LEVEL={level}{}",
                if *toggle_extra {
                    ", toggle EXTRA_FLAG"
                } else {
                    ""
                }
            ),
            Op::EditSidecar { d, tag } => write!(f, "hand edit Deployment {d}: sidecar ({tag})"),
            Op::EditReplicas { d, replicas } => {
                write!(f, "hand edit Deployment {d}: replicas {replicas}")
            }
            Op::EditAnnotation { d, template, n } => write!(
                f,
                "hand edit Deployment {d}: {} annotation note edit-{n}",
                if *template {
                    "pod template"
                } else {
                    "metadata"
                }
            ),
            Op::GarbleHash { d } => write!(f, "hand edit Deployment {d}: garble the manifest hash"),
            Op::EditConfigMap { m, kind } => write!(
                f,
                "hand edit ConfigMap {}/{}: {}",
                m.ns(),
                m.cm(),
                ["preload value", "manifest.json", "extra key"][*kind as usize % 3]
            ),
        }
    }
}

enum Step {
    Op(Op),
    Fault(Fault),
}

fn random_key(r: &mut Rng) -> Key {
    Key {
        ns: r.below(NAMESPACES.len()),
        name: r.below(NAMES.len()),
    }
}

fn random_spec(r: &mut Rng, m: Key) -> Value {
    let target = if r.pct(75) {
        m.name()
    } else {
        NAMES[r.below(NAMES.len())]
    };
    let version = if r.pct(85) {
        r.pick(&LOADABLE)
    } else {
        r.pick(&UNLOADABLE)
    };
    let mut rs = if r.pct(80) {
        json!({"type": "RollingUpdate", "maxSurge": 1, "maxUnavailable": 0})
    } else {
        json!({"type": "Recreate"})
    };
    rs["progressDeadlineSeconds"] = json!(r.pick(&[3, 4, 5]));
    rs["rollbackOnFailure"] = json!(r.pct(80));
    let mut spec = json!({
        "family": "PII", "version": version, "tier": "Small",
        "replicas": 1 + r.below(3), "rolloutStrategy": rs,
    });
    if target != m.name() || r.pct(20) {
        spec["targetRef"] = json!({"name": target});
    }
    spec
}

fn random_op(r: &mut Rng) -> Op {
    let m = random_key(r);
    let d = m;
    match r.below(100) {
        0..=9 => Op::CreateModel {
            m,
            spec: random_spec(r, m),
        },
        10..=13 => Op::RecreateModel {
            m,
            spec: random_spec(r, m),
        },
        14..=17 => Op::DeleteModel { m },
        18..=19 => Op::ForeignThenCreate {
            m,
            spec: random_spec(r, m),
        },
        20..=30 => Op::PatchSpec {
            m,
            what: "version",
            spec: json!({"version": r.pick(&LOADABLE)}),
        },
        31..=36 => Op::PatchSpec {
            m,
            what: "unloadable version",
            spec: json!({"version": r.pick(&UNLOADABLE), "rolloutStrategy": {
                "progressDeadlineSeconds": r.pick(&[3, 4]), "rollbackOnFailure": r.pct(75)}}),
        },
        37..=39 => Op::PatchSpec {
            m,
            what: "replicas",
            spec: json!({"replicas": 1 + r.below(3)}),
        },
        40..=42 => {
            let rs = if r.pct(70) {
                json!({"type": "RollingUpdate",
                       "maxSurge": r.pick(&[json!(0), json!(1), json!(2), json!("25%"), json!("50%")]),
                       "maxUnavailable": r.pick(&[json!(0), json!(1), json!("25%")])})
            } else {
                json!({"type": "Recreate"})
            };
            Op::PatchSpec {
                m,
                what: "strategy",
                spec: json!({ "rolloutStrategy": rs }),
            }
        }
        43..=44 => Op::PatchSpec {
            m,
            what: "deadline",
            spec: json!({"rolloutStrategy": {"progressDeadlineSeconds": r.pick(&[3, 4, 5, 6])}}),
        },
        45..=47 => Op::PatchSpec {
            m,
            what: "invalid strategy (both zero)",
            spec: json!({"rolloutStrategy": {"type": "RollingUpdate", "maxSurge": 0, "maxUnavailable": 0}}),
        },
        48..=51 => Op::PatchSpec {
            m,
            what: "repair",
            spec: json!({"rolloutStrategy": {"maxSurge": 1}, "targetRef": {"containerName": CONTAINER}}),
        },
        52..=53 => Op::PatchSpec {
            m,
            what: "missing container",
            spec: json!({"targetRef": {"containerName": "sidecar"}}),
        },
        54..=57 => Op::PatchSpec {
            m,
            what: "retarget",
            spec: json!({"targetRef": {"name": NAMES[r.below(NAMES.len())]}}),
        },
        58..=67 => {
            let pick = match r.below(10) {
                0..=3 => Pick::Retained(r.next()),
                4 => Pick::NotRetained,
                5 => Pick::Garbage,
                6 => Pick::Blank,
                7 => Pick::Remove,
                _ => Pick::MakePermanent {
                    annotation_first: r.pct(50),
                },
            };
            Op::RollbackTo { m, pick }
        }
        68..=70 => Op::DeleteDeployment { d },
        71..=73 => Op::CreateDeployment { d },
        74..=75 => Op::RecreateDeployment { d },
        76..=77 => Op::ForeignConfigMap { m },
        78..=79 => Op::RemoveForeignConfigMap { m },
        80..=83 => Op::EditEnv {
            d,
            level: r.pick(&["debug", "info", "warn"]),
            toggle_extra: r.pct(50),
        },
        84..=85 => Op::EditSidecar { d, tag: r.next() },
        86..=88 => Op::EditReplicas {
            d,
            replicas: 1 + r.below(3) as i64,
        },
        89..=91 => Op::EditAnnotation {
            d,
            template: r.pct(50),
            n: r.next() % 1000,
        },
        92..=94 => Op::GarbleHash { d },
        _ => Op::EditConfigMap {
            m,
            kind: r.next() % 3,
        },
    }
}

fn random_fault(r: &mut Rng) -> Fault {
    const PATHS: [&str; 6] = [
        ".*",
        "/events",
        "/deployments/",
        "/configmaps",
        "/openmedmodels",
        "/status$",
    ];
    match r.below(100) {
        0..=14 => Fault::CutWatches,
        15..=26 => Fault::Expire {
            n: 1 + r.below(3) as u32,
            in_stream: r.pct(50),
        },
        27..=34 => Fault::Compact,
        35..=54 => Fault::Fail {
            method: r.pick(&[None, Some("POST"), Some("PATCH"), Some("GET")]),
            path: r.pick(&PATHS),
            code: 500,
            count: 1 + r.below(5) as u32,
        },
        55..=66 => Fault::Fail {
            method: r.pick(&[None, Some("POST"), Some("PATCH")]),
            path: r.pick(&PATHS),
            code: 429,
            count: 1 + r.below(3) as u32,
        },
        67..=76 => Fault::Pause {
            ms: 500 + r.below(2000) as u64,
        },
        77..=86 => Fault::WatchLag {
            path: r.pick(&["openmedmodels", "deployments", "configmaps"]),
            ms: 200 + r.below(800) as u64,
        },
        _ => Fault::KillRestart {
            down_ms: r.below(800) as u64,
        },
    }
}

fn random_step(r: &mut Rng) -> Step {
    if r.pct(30) {
        Step::Fault(random_fault(r))
    } else {
        Step::Op(random_op(r))
    }
}

// ------------------------------------------------------- derived values ----

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

/// The desired spec of §2.2: the spec with every default filled in.
fn desired(m: &Value) -> Value {
    let sp = &m["spec"];
    let name = s(&m["metadata"]["name"]);
    let rs = &sp["rolloutStrategy"];
    let or = |v: &Value, d: Value| if v.is_null() { d } else { v.clone() };
    let trimmed = |v: &Value| json!(s(v).trim());
    json!({
        "family": trimmed(&sp["family"]),
        "version": trimmed(&sp["version"]),
        "tier": trimmed(&sp["tier"]),
        "replicas": sp["replicas"],
        "rolloutStrategy": {
            "type": trimmed(&rs["type"]),
            "maxUnavailable": or(&rs["maxUnavailable"], json!(0)),
            "maxSurge": or(&rs["maxSurge"], json!(1)),
            "rollbackOnFailure": or(&rs["rollbackOnFailure"], json!(true)),
            "progressDeadlineSeconds": or(&rs["progressDeadlineSeconds"], json!(600)),
        },
        "targetRef": {
            "name": or(&sp["targetRef"]["name"], json!(name)),
            "containerName": or(&sp["targetRef"]["containerName"], json!(CONTAINER)),
        },
        "manifestConfigMapName": or(&sp["manifestConfigMapName"], json!(format!("{name}-model-manifest"))),
    })
}

/// The only rule the soak can break past the CRD: RollingUpdate, both zero.
fn valid(d: &Value) -> bool {
    let zero = |v: &Value| *v == json!(0) || *v == json!("0%");
    let rs = &d["rolloutStrategy"];
    !(rs["type"] == "RollingUpdate" && zero(&rs["maxSurge"]) && zero(&rs["maxUnavailable"]))
}

fn unloadable(version: &str) -> bool {
    version.contains("unloadable")
}

/// The canonical manifest of §2.4 (keys written in sorted order).
fn manifest_json(spec: &Value) -> String {
    format!(
        "{{\"apiVersion\":\"openmed.ai/v1alpha1\",\"kind\":\"OpenMedModelManifest\",\"models\":[{{\"family\":{},\"tier\":{},\"version\":{}}}]}}",
        spec["family"], spec["tier"], spec["version"]
    )
}

fn digest(text: &str) -> String {
    format!("sha256:{:x}", Sha256::digest(text.as_bytes()))
}

fn rollback_to(m: &Value) -> Option<String> {
    let v = s(&m["metadata"]["annotations"][ROLLBACK_TO]).trim();
    (!v.is_empty()).then(|| v.to_string())
}

fn cond(st: &Value, i: usize) -> (&str, &str) {
    let c = &st["conditions"][i];
    (s(&c["status"]), s(&c["reason"]))
}

fn container<'a>(dep: &'a Value, name: &str) -> Option<&'a Value> {
    dep["spec"]["template"]["spec"]["containers"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == name)
}

fn preload_env(c: &Value) -> Option<&Value> {
    c["env"].as_array()?.iter().find(|e| e["name"] == PRELOAD)
}

/// Owners named by a Deployment's metadata and pod template annotations.
fn owners(dep: &Value) -> Vec<&str> {
    [
        &dep["metadata"]["annotations"][OWNER],
        &dep["spec"]["template"]["metadata"]["annotations"][OWNER],
    ]
    .into_iter()
    .filter_map(|v| v.as_str())
    .filter(|o| !o.is_empty())
    .collect()
}

/// What a user owns in a Deployment: containers without the preload env
/// var, labels and annotations without the operator's keys.
fn user_view(dep: &Value) -> Value {
    let mut containers = dep["spec"]["template"]["spec"]["containers"].clone();
    if let Some(cs) = containers.as_array_mut() {
        for c in cs {
            if let Some(env) = c["env"].as_array_mut() {
                env.retain(|e| e["name"] != PRELOAD);
            }
        }
    }
    let strip = |v: &Value, prefixes: &[&str]| -> Value {
        let mut out = serde_json::Map::new();
        if let Some(o) = v.as_object() {
            for (k, x) in o {
                if !prefixes.iter().any(|p| k.starts_with(p)) {
                    out.insert(k.clone(), x.clone());
                }
            }
        }
        Value::Object(out)
    };
    let meta = &dep["metadata"];
    let tmeta = &dep["spec"]["template"]["metadata"];
    json!({
        "containers": containers,
        "labels": strip(&meta["labels"], &[CLAIM]),
        "annotations": strip(&meta["annotations"], &["openmed.ai/", "deployment.kubernetes.io/"]),
        "templateLabels": strip(&tmeta["labels"], &[]),
        "templateAnnotations": strip(&tmeta["annotations"], &["openmed.ai/"]),
    })
}

fn is_write(r: &RequestRecord) -> bool {
    matches!(r.method.as_str(), "POST" | "PUT" | "PATCH" | "DELETE")
}

fn on_object(r: &RequestRecord, collection: &str, ns: &str, name: &str) -> bool {
    let p = format!("/namespaces/{ns}/{collection}/{name}");
    r.path.ends_with(&p) || r.path.contains(&format!("{p}/"))
}

fn describe(r: &RequestRecord) -> String {
    format!("{} {} -> {} at {} ms", r.method, r.path, r.status, r.at_ms)
}

/// The operator's watch streams seen in the request log, each named by
/// resource, label selector and metadata-only; each stream's latest
/// successful watch must be at or after `since_ms`. Ok(when the last one
/// came back), or Err(the streams not back yet).
fn watches_back_at(requests: &[RequestRecord], since_ms: u64) -> Result<u64, Vec<String>> {
    let mut latest: BTreeMap<String, u64> = BTreeMap::new();
    for r in requests
        .iter()
        .filter(|r| r.verb == "watch" && r.status == 200)
    {
        let selector = r
            .query
            .split('&')
            .find_map(|kv| kv.strip_prefix("labelSelector="))
            .unwrap_or("");
        let key = format!(
            "{}{}{}",
            r.resource,
            if selector.is_empty() {
                String::new()
            } else {
                format!("?{selector}")
            },
            if r.accept.contains("PartialObjectMetadata") {
                " (metadata)"
            } else {
                ""
            }
        );
        let e = latest.entry(key).or_insert(0);
        *e = (*e).max(r.at_ms);
    }
    let missing: Vec<String> = latest
        .iter()
        .filter(|(_, at)| **at < since_ms)
        .map(|(k, _)| k.clone())
        .collect();
    if missing.is_empty() {
        Ok(latest.values().copied().max().unwrap_or(0))
    } else {
        Err(missing)
    }
}

// ----------------------------------------------------------- snapshots ----

/// Everything the checks read, taken at one moment.
struct Snap {
    models: Vec<Value>,
    deps: Vec<Value>,
    cms: Vec<Value>,
    events: Vec<Value>,
}

fn find<'a>(list: &'a [Value], ns: &str, name: &str) -> Option<&'a Value> {
    list.iter()
        .find(|o| o["metadata"]["namespace"] == ns && o["metadata"]["name"] == name)
}

impl Snap {
    fn take(sim: &Sim) -> Snap {
        Snap {
            models: sim.objects("openmed.ai", "openmedmodels", None),
            deps: sim.objects("apps", "deployments", None),
            cms: sim.objects("", "configmaps", None),
            events: sim.objects("", "events", None),
        }
    }
    fn model(&self, ns: &str, name: &str) -> Option<&Value> {
        find(&self.models, ns, name)
    }
    fn live(&self, ns: &str, name: &str) -> Option<&Value> {
        self.model(ns, name)
            .filter(|m| m["metadata"]["deletionTimestamp"].is_null())
    }
    fn dep(&self, ns: &str, name: &str) -> Option<&Value> {
        find(&self.deps, ns, name)
    }
    fn cm(&self, ns: &str, name: &str) -> Option<&Value> {
        find(&self.cms, ns, name)
    }
}

/// Why a model is not settled yet, if it is not.
fn busy(m: &Value) -> Option<String> {
    let st = &m["status"];
    if !m["metadata"]["deletionTimestamp"].is_null() {
        return Some("being deleted".into());
    }
    if st.is_null() {
        return Some("no status yet".into());
    }
    if st["observedGeneration"] != m["metadata"]["generation"] {
        return Some(format!(
            "observedGeneration {} of generation {}",
            st["observedGeneration"], m["metadata"]["generation"]
        ));
    }
    if st["phase"] == "RollingOut" {
        return Some("RollingOut".into());
    }
    let (status, reason) = cond(st, 1);
    if status != "False" {
        return Some(format!("Progressing={status}/{reason}"));
    }
    None
}

/// A Deployment's rollout state in one line, naming the Deployment
/// controller's Recreate wedge when it looks like one: a replica change
/// while two or more ReplicaSets are active (an old rollout still under way)
/// is a "scaling event" on every sync (upstream `isScalingEvent`), `scale`
/// does nothing for Recreate with several active sets unless the new one is
/// saturated, and the deadline (`syncRolloutStatus`) is never judged.
fn deployment_diagnosis(dep: &Value) -> String {
    let (sp, st) = (&dep["spec"], &dep["status"]);
    let progressing = st["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Progressing"))
        .cloned()
        .unwrap_or_default();
    // Called after a minute without progress: a deadline (at most 6 s here)
    // would have fired long ago if `syncRolloutStatus` still ran.
    let wedged = sp["strategy"]["type"] == "Recreate"
        && st["observedGeneration"] == dep["metadata"]["generation"]
        && (st["replicas"] != sp["replicas"] || st["updatedReplicas"] != sp["replicas"])
        && progressing["status"] == "True";
    format!(
        "{}generation {} observed {}, spec replicas {} strategy {}, status replicas {} updated {} available {}, Progressing {}/{} since {}",
        if wedged {
            "WEDGED (Recreate with a replica change while several ReplicaSets are active: upstream isScalingEvent/scale never roll it out nor judge its deadline): "
        } else {
            ""
        },
        dep["metadata"]["generation"],
        st["observedGeneration"],
        sp["replicas"],
        sp["strategy"]["type"],
        st["replicas"],
        st["updatedReplicas"],
        st["availableReplicas"],
        s(&progressing["status"]),
        s(&progressing["reason"]),
        s(&progressing["lastUpdateTime"]),
    )
}

// ----------------------------------------------------------- violations ----

#[derive(Debug, Clone)]
struct Violation {
    inv: &'static str,
    msg: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invariant {}: {}", self.inv, self.msg)
    }
}

const INV1: &str = "1 (converged state)";
const INV2: &str = "2 (unloadable version)";
const INV3: &str = "3 (delete and release)";
const INV4: &str = "4 (Events)";
const INV5: &str = "5 (hands off)";
const INV6: &str = "6 (quiet means no writes)";
const INV7: &str = "7 (process)";
const LIVENESS: &str = "liveness (reaches a quiet point)";

macro_rules! ensure {
    ($c:expr, $($m:tt)*) => {
        if !$c {
            return Err(format!($($m)*));
        }
    };
}

/// What a model's state may legitimately be at a quiet point.
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    Ready,
    Blocked(&'static str),
    Invalid,
    /// Rolled back and serving the retained spec; Some(target) for manual.
    RolledBack(Option<String>),
    FailedNoRollback,
    Rejected(String),
}

struct DeployRec {
    view: Value,
    created_ms: u64,
}

/// The state the checks read besides the cluster: what the soak did.
struct Ctx<'a> {
    snap: &'a Snap,
    before: &'a Snap,
    incarnations: &'a BTreeMap<Key, Vec<String>>,
    deploys: &'a BTreeMap<Key, DeployRec>,
    touched: &'a BTreeSet<Key>,
    foreign: &'a BTreeMap<Key, (String, u64)>,
    seen_ready: &'a BTreeSet<String>,
    requests: &'a [RequestRecord],
    out: Vec<Violation>,
    checks: u64,
}

impl Ctx<'_> {
    fn expect(&mut self, inv: &'static str, ok: bool, msg: impl FnOnce() -> String) {
        self.checks += 1;
        if !ok {
            self.out.push(Violation { inv, msg: msg() });
        }
    }

    /// §6.2: what blocks `spec` of the model `ns/name` (uid), if anything.
    fn block(&self, ns: &str, name: &str, uid: &str, spec: &Value) -> Option<&'static str> {
        let snap = self.snap;
        let Some(dep) = snap.dep(ns, s(&spec["targetRef"]["name"])) else {
            return Some("TargetNotFound");
        };
        if container(dep, s(&spec["targetRef"]["containerName"])).is_none() {
            return Some("ContainerNotFound");
        }
        let me = format!("{ns}/{name}");
        for o in owners(dep) {
            let (ons, oname) = o.split_once('/').unwrap_or(("", o));
            if o != me && snap.live(ons, oname).is_some() {
                return Some("TargetConflict");
            }
        }
        if let Some(cm) = snap.cm(ns, s(&spec["manifestConfigMapName"])) {
            let ours = cm["metadata"]["annotations"][OWNER] == me.as_str()
                || cm["metadata"]["ownerReferences"]
                    .as_array()
                    .is_some_and(|rs| {
                        rs.iter()
                            .any(|r| r["controller"] == true && r["uid"] == uid)
                    });
            if !ours {
                return Some("ConfigMapConflict");
            }
        }
        None
    }

    /// The outcomes the contract allows for a live model, and the invariant
    /// that names them.
    fn expectations(&self, m: &Value, d: &Value) -> (&'static str, Vec<Outcome>) {
        let ns = s(&m["metadata"]["namespace"]);
        let name = s(&m["metadata"]["name"]);
        let uid = s(&m["metadata"]["uid"]);
        let st = &m["status"];
        if !valid(d) {
            return (INV1, vec![Outcome::Invalid]);
        }
        if let Some(b) = self.block(ns, name, uid, d) {
            return (INV1, vec![Outcome::Blocked(b)]);
        }
        let base = || -> (&'static str, Vec<Outcome>) {
            if !unloadable(s(&d["version"])) {
                return (INV1, vec![Outcome::Ready]);
            }
            if d["rolloutStrategy"]["rollbackOnFailure"] == false {
                return (INV2, vec![Outcome::FailedNoRollback]);
            }
            let last = &st["lastSuccessfulSpec"];
            if last.is_object()
                && last["targetRef"]["name"] == d["targetRef"]["name"]
                && self.block(ns, name, uid, last).is_none()
            {
                return (INV2, vec![Outcome::RolledBack(None)]);
            }
            // Nothing usable to go back to when it failed (§9.D5), or the
            // spec it went back to is blocked now.
            let mut v = vec![Outcome::RolledBack(None), Outcome::FailedNoRollback];
            let rb = &st["rollbackSpec"];
            if let Some(b) = rb
                .is_object()
                .then(|| self.block(ns, name, uid, rb))
                .flatten()
            {
                v.push(Outcome::Blocked(b));
            }
            (INV2, v)
        };
        let Some(target) = rollback_to(m) else {
            return base();
        };
        let matched = [&st["lastSuccessfulSpec"], &st["previousSuccessfulSpec"]]
            .into_iter()
            .find(|sp| sp["version"] == target.as_str());
        match matched {
            None => (INV1, vec![Outcome::Rejected(target)]),
            // A rollback to what the spec asks for is no rollback (§6.5),
            // unless that rollback was already under way.
            Some(sp) if sp == d => {
                let (inv, mut v) = base();
                v.push(Outcome::RolledBack(Some(target)));
                (inv, v)
            }
            Some(sp) => {
                let mut v = vec![Outcome::RolledBack(Some(target))];
                if let Some(b) = self.block(ns, name, uid, sp) {
                    v.push(Outcome::Blocked(b));
                }
                (INV1, v)
            }
        }
    }

    /// The ConfigMap and Deployment of `spec` carry it for model ns/name.
    fn serves(&self, ns: &str, name: &str, uid: &str, spec: &Value) -> Result<(), String> {
        let me = format!("{ns}/{name}");
        let manifest = manifest_json(spec);
        let cm_name = s(&spec["manifestConfigMapName"]);
        let cm = self
            .snap
            .cm(ns, cm_name)
            .ok_or(format!("ConfigMap {cm_name} missing"))?;
        ensure!(
            cm["data"][PRELOAD] == spec["version"],
            "ConfigMap {cm_name} preloads {} instead of {}",
            cm["data"][PRELOAD],
            spec["version"]
        );
        ensure!(
            s(&cm["data"]["manifest.json"]) == format!("{manifest}\n"),
            "ConfigMap {cm_name} manifest.json is {}",
            cm["data"]["manifest.json"]
        );
        ensure!(
            cm["metadata"]["annotations"][OWNER] == me.as_str(),
            "ConfigMap {cm_name} owner annotation {}",
            cm["metadata"]["annotations"][OWNER]
        );
        ensure!(
            cm["metadata"]["ownerReferences"]
                .as_array()
                .is_some_and(|rs| rs
                    .iter()
                    .any(|r| r["controller"] == true && r["uid"] == uid)),
            "ConfigMap {cm_name} has no controller reference to uid {uid}: {}",
            cm["metadata"]["ownerReferences"]
        );
        let dname = s(&spec["targetRef"]["name"]);
        let dep = self
            .snap
            .dep(ns, dname)
            .ok_or(format!("Deployment {dname} missing"))?;
        let tmeta = &dep["spec"]["template"]["metadata"];
        ensure!(
            dep["metadata"]["annotations"][OWNER] == me.as_str()
                && tmeta["annotations"][OWNER] == me.as_str(),
            "Deployment {dname} owner annotations {} / {}",
            dep["metadata"]["annotations"][OWNER],
            tmeta["annotations"][OWNER]
        );
        ensure!(
            dep["metadata"]["labels"][CLAIM] == "true",
            "Deployment {dname} has no claim label"
        );
        let want = digest(&manifest);
        ensure!(
            tmeta["annotations"][HASH] == want.as_str(),
            "Deployment {dname} template hash {} instead of {want}",
            tmeta["annotations"][HASH]
        );
        let cname = s(&spec["targetRef"]["containerName"]);
        let c = container(dep, cname).ok_or(format!("container {cname} missing"))?;
        let env = preload_env(c).ok_or(format!("container {cname} has no {PRELOAD}"))?;
        ensure!(
            env["valueFrom"] == json!({"configMapKeyRef": {"name": cm_name, "key": PRELOAD}})
                && env.get("value").is_none(),
            "Deployment {dname} preload env is {env}"
        );
        Ok(())
    }

    fn holds(&self, m: &Value, d: &Value, o: &Outcome) -> Result<(), String> {
        let ns = s(&m["metadata"]["namespace"]);
        let name = s(&m["metadata"]["name"]);
        let uid = s(&m["metadata"]["uid"]);
        let st = &m["status"];
        let phase = s(&st["phase"]);
        let ready = cond(st, 0);
        match o {
            Outcome::Ready => {
                ensure!(
                    phase == "Ready" && ready == ("True", "RolloutSucceeded"),
                    "phase {phase}, Ready {ready:?}"
                );
                ensure!(
                    st["desiredVersion"] == d["version"] && st["activeVersion"] == d["version"],
                    "desired {} active {} for spec {}",
                    st["desiredVersion"],
                    st["activeVersion"],
                    d["version"]
                );
                ensure!(
                    st["manifestHash"] == digest(&manifest_json(d)).as_str(),
                    "status.manifestHash {}",
                    st["manifestHash"]
                );
                self.serves(ns, name, uid, d)?;
                let dep = self.snap.dep(ns, s(&d["targetRef"]["name"])).unwrap();
                let (sp, ds) = (&dep["spec"], &dep["status"]);
                let rs = &d["rolloutStrategy"];
                ensure!(
                    sp["replicas"] == d["replicas"]
                        && sp["progressDeadlineSeconds"] == rs["progressDeadlineSeconds"]
                        && sp["strategy"]["type"] == rs["type"],
                    "Deployment replicas {} deadline {} strategy {} for spec {} {} {}",
                    sp["replicas"],
                    sp["progressDeadlineSeconds"],
                    sp["strategy"],
                    d["replicas"],
                    rs["progressDeadlineSeconds"],
                    rs
                );
                if rs["type"] == "RollingUpdate" {
                    ensure!(
                        sp["strategy"]["rollingUpdate"]["maxSurge"] == rs["maxSurge"]
                            && sp["strategy"]["rollingUpdate"]["maxUnavailable"]
                                == rs["maxUnavailable"],
                        "Deployment strategy {} for {}",
                        sp["strategy"],
                        rs
                    );
                } else {
                    ensure!(
                        sp["strategy"]["rollingUpdate"].is_null(),
                        "Recreate with {}",
                        sp["strategy"]
                    );
                }
                let n = d["replicas"].as_i64().unwrap_or(0);
                let count = |k: &str| ds[k].as_i64().unwrap_or(0);
                ensure!(
                    ds["observedGeneration"].as_i64() >= dep["metadata"]["generation"].as_i64()
                        && count("updatedReplicas") >= n
                        && count("availableReplicas") >= n
                        && count("replicas") == count("updatedReplicas"),
                    "Deployment does not serve: {ds}"
                );
                Ok(())
            }
            Outcome::Blocked(b) => {
                let want_phase = if *b == "TargetNotFound" {
                    "Pending"
                } else {
                    "Failed"
                };
                ensure!(
                    phase == want_phase && ready == ("False", *b) && cond(st, 2) == ("True", *b),
                    "phase {phase}, Ready {ready:?}, Degraded {:?}",
                    cond(st, 2)
                );
                Ok(())
            }
            Outcome::Invalid => {
                ensure!(
                    phase == "Failed" && ready == ("False", "InvalidSpec"),
                    "phase {phase}, Ready {ready:?}"
                );
                Ok(())
            }
            Outcome::RolledBack(manual) => {
                ensure!(
                    phase == "RolledBack"
                        && cond(st, 1) == ("False", "RollbackComplete")
                        && cond(st, 3) == ("True", "RollbackSucceeded"),
                    "phase {phase}, Ready {ready:?}, Progressing {:?}, RolledBack {:?}",
                    cond(st, 1),
                    cond(st, 3)
                );
                let rb = &st["rollbackSpec"];
                ensure!(rb.is_object(), "no rollbackSpec");
                ensure!(
                    st["activeVersion"] == rb["version"] && !unloadable(s(&rb["version"])),
                    "activeVersion {} rollbackSpec version {}",
                    st["activeVersion"],
                    rb["version"]
                );
                match manual {
                    Some(t) => {
                        ensure!(
                            st["rollbackRequest"] == format!("manual:{t}").as_str()
                                && st["activeVersion"] == t.as_str()
                                && cond(st, 2).1 == "ManualRollback",
                            "rollbackRequest {} active {} Degraded {:?} for a manual rollback to {t}",
                            st["rollbackRequest"],
                            st["activeVersion"],
                            cond(st, 2)
                        );
                    }
                    None => {
                        ensure!(
                            st["rollbackRequest"]
                                == format!("automatic:{}", s(&d["version"])).as_str()
                                && st["failedSpecHash"] == st["desiredSpecHash"]
                                && cond(st, 2).1 == "DesiredVersionFailed",
                            "rollbackRequest {} failedSpecHash {} desiredSpecHash {} Degraded {:?}",
                            st["rollbackRequest"],
                            st["failedSpecHash"],
                            st["desiredSpecHash"],
                            cond(st, 2)
                        );
                    }
                }
                self.serves(ns, name, uid, rb)
            }
            Outcome::FailedNoRollback => {
                ensure!(
                    phase == "Failed"
                        && ready == ("False", "RolloutFailed")
                        && cond(st, 3).1 == "RollbackDisabled",
                    "phase {phase}, Ready {ready:?}, RolledBack {:?}",
                    cond(st, 3)
                );
                ensure!(
                    st["failedSpecHash"] == st["desiredSpecHash"]
                        && st["desiredVersion"] == d["version"],
                    "failedSpecHash {} desiredSpecHash {} desiredVersion {}",
                    st["failedSpecHash"],
                    st["desiredSpecHash"],
                    st["desiredVersion"]
                );
                Ok(())
            }
            Outcome::Rejected(t) => {
                ensure!(
                    phase == "Failed"
                        && ready == ("False", "RollbackTargetUnavailable")
                        && cond(st, 3).1 == "RollbackRejected"
                        && st["rollbackRequest"] == format!("manual:{t}").as_str(),
                    "phase {phase}, Ready {ready:?}, RolledBack {:?}, rollbackRequest {}",
                    cond(st, 3),
                    st["rollbackRequest"]
                );
                Ok(())
            }
        }
    }

    /// Invariants 1 and 2 for one live model, and the Events its state
    /// requires (4).
    fn judge_model(&mut self, m: &Value) {
        let ns = s(&m["metadata"]["namespace"]);
        let name = s(&m["metadata"]["name"]);
        let uid = s(&m["metadata"]["uid"]).to_string();
        let generation = m["metadata"]["generation"].clone();
        let st = &m["status"];
        let types: Vec<&str> = (0..4).map(|i| s(&st["conditions"][i]["type"])).collect();
        let stamped = st["conditions"].as_array().is_some_and(|cs| {
            cs.len() == 4 && cs.iter().all(|c| c["observedGeneration"] == generation)
        });
        self.expect(
            INV1,
            types == ["Ready", "Progressing", "Degraded", "RolledBack"] && stamped,
            || format!("{ns}/{name}: conditions not the four of §5.2 stamped with generation {generation}: {}", st["conditions"]),
        );
        let d = desired(m);
        let (inv, outcomes) = self.expectations(m, &d);
        let mut why = Vec::new();
        for o in &outcomes {
            match self.holds(m, &d, o) {
                Ok(()) => {
                    why.clear();
                    break;
                }
                Err(e) => why.push(format!("not {o:?}: {e}")),
            }
        }
        self.expect(inv, why.is_empty(), || {
            format!(
                "{ns}/{name} (uid {uid}, generation {generation}, spec {}, rollback-to {:?}) should be one of {outcomes:?}; {}; status {}",
                m["spec"],
                rollback_to(m),
                why.join("; "),
                st
            )
        });
        if self.seen_ready.contains(&uid) {
            self.expect(INV2, st["lastSuccessfulSpec"].is_object(), || {
                format!(
                    "{ns}/{name} served before, yet status has no lastSuccessfulSpec (§9.10): {st}"
                )
            });
        }
        let snap = self.snap;
        for any_of in required_events(st) {
            let found = snap.events.iter().any(|e| {
                e["metadata"]["namespace"] == ns
                    && e["involvedObject"]["uid"] == uid.as_str()
                    && any_of.contains(&s(&e["reason"]))
            });
            self.expect(INV4, found, || {
                let mine: Vec<String> = snap
                    .events
                    .iter()
                    .filter(|e| {
                        e["metadata"]["namespace"] == ns && e["involvedObject"]["name"] == name
                    })
                    .map(|e| {
                        format!(
                            "{} {} uid {} count {}",
                            s(&e["metadata"]["name"]),
                            s(&e["reason"]),
                            s(&e["involvedObject"]["uid"]),
                            e["count"]
                        )
                    })
                    .collect();
                format!(
                    "{ns}/{name} (uid {uid}) is {}/{} but has no {} Event of its own; Events naming {ns}/{name}: {mine:?}",
                    s(&st["phase"]),
                    cond(st, 0).1,
                    any_of.join(" or ")
                )
            });
        }
    }
}

/// The generation in an Event's name (§2.6, possibly with a suffix).
fn generation_of(event: &str, name: &str, reason: &str) -> Option<i64> {
    event
        .split('-')
        .filter_map(|part| part.parse::<i64>().ok())
        .find(|g| event.starts_with(&event_name(name, reason, *g)))
}

/// The Events a settled state requires (each entry: any one of these
/// reasons), from the state table of §6.14.
fn required_events(st: &Value) -> Vec<Vec<&str>> {
    let phase = s(&st["phase"]);
    let (rs, reason) = cond(st, 0);
    let rolled = cond(st, 3);
    // Recovering from TargetDegraded posts no success Event (§9.D7).
    let success = |r: &'static str| -> Vec<&str> { vec![r, "TargetDegraded"] };
    match (phase, rs, reason) {
        ("Ready", "True", "RolloutSucceeded") => vec![success("RolloutSucceeded")],
        (
            _,
            "False",
            b @ ("TargetNotFound" | "ContainerNotFound" | "TargetConflict" | "ConfigMapConflict"),
        ) => vec![vec![b]],
        ("RolledBack", "False", "RolledBack") if rolled == ("True", "RollbackSucceeded") => {
            let mut v = vec![vec!["RollbackStarted"], success("RollbackSucceeded")];
            if s(&st["rollbackRequest"]).starts_with("automatic:") {
                v.push(vec!["RolloutFailed"]);
            }
            v
        }
        ("Failed", "False", "RolloutFailed") => vec![vec!["RolloutFailed"]],
        ("Failed", "False", "RollbackTargetUnavailable") => vec![vec!["RollbackRejected"]],
        _ => vec![],
    }
}

impl Ctx<'_> {
    /// Invariant 3: deleted models are gone and hold nothing.
    fn judge_release(&mut self) {
        let snap = self.snap;
        for m in &snap.models {
            self.expect(INV3, m["metadata"]["deletionTimestamp"].is_null(), || {
                format!(
                    "{}/{} still being deleted at a quiet point; finalizers {}",
                    s(&m["metadata"]["namespace"]),
                    s(&m["metadata"]["name"]),
                    m["metadata"]["finalizers"]
                )
            });
        }
        for dep in &snap.deps {
            let ns = s(&dep["metadata"]["namespace"]);
            let dname = s(&dep["metadata"]["name"]);
            let claimed_by_live: Vec<&Value> = owners(dep)
                .into_iter()
                .filter_map(|o| {
                    let (ons, oname) = o.split_once('/')?;
                    snap.live(ons, oname)
                })
                .collect();
            for o in owners(dep) {
                let (ons, oname) = o.split_once('/').unwrap_or(("", o));
                self.expect(INV3, snap.live(ons, oname).is_some(), || {
                    format!("Deployment {ns}/{dname} still names {o}, which no longer exists")
                });
            }
            if claimed_by_live.is_empty() {
                let loaded: Vec<&Value> = dep["spec"]["template"]["spec"]["containers"]
                    .as_array()
                    .map(|cs| cs.iter().filter_map(preload_env).collect())
                    .unwrap_or_default();
                self.expect(
                    INV3,
                    loaded.iter().all(|e| e["valueFrom"].is_null())
                        && dep["metadata"]["labels"][CLAIM].is_null(),
                    || {
                        format!(
                            "Deployment {ns}/{dname} is claimed by no live model, yet its preload is {loaded:?} and its claim label {}",
                            dep["metadata"]["labels"][CLAIM]
                        )
                    },
                );
            }
            // A model that kept a target hands every other one back (§6.15).
            for m in claimed_by_live {
                let st = &m["status"];
                let settled = st["phase"] == "Ready"
                    || (st["phase"] == "RolledBack" && cond(st, 3).1 == "RollbackSucceeded");
                if !settled {
                    continue;
                }
                let kept = if st["phase"] == "RolledBack" {
                    vec![st["rollbackSpec"]["targetRef"]["name"].clone()]
                } else {
                    vec![desired(m)["targetRef"]["name"].clone()]
                };
                self.expect(INV3, kept.contains(&json!(dname)), || {
                    format!(
                        "Deployment {ns}/{dname} still claimed by {}/{} ({}), which serves {kept:?}",
                        s(&m["metadata"]["namespace"]),
                        s(&m["metadata"]["name"]),
                        s(&st["phase"])
                    )
                });
            }
        }
        for cm in &snap.cms {
            let ns = s(&cm["metadata"]["namespace"]);
            let cname = s(&cm["metadata"]["name"]);
            let meta = &cm["metadata"];
            let ours = meta["labels"][MANAGED_BY] == "openmed-operator"
                || !meta["annotations"][OWNER].is_null();
            if !ours {
                continue;
            }
            let owner = s(&meta["annotations"][OWNER]);
            let (ons, oname) = owner.split_once('/').unwrap_or(("", owner));
            let live = snap.live(ons, oname);
            let uids: Vec<&str> = meta["ownerReferences"]
                .as_array()
                .map(|rs| {
                    rs.iter()
                        .filter(|r| r["controller"] == true)
                        .map(|r| s(&r["uid"]))
                        .collect()
                })
                .unwrap_or_default();
            self.expect(
                INV3,
                live.is_some_and(|m| uids == [s(&m["metadata"]["uid"])]),
                || {
                    format!(
                        "ConfigMap {ns}/{cname} (owner {owner:?}, controller uids {uids:?}) belongs to no live model"
                    )
                },
            );
        }
    }

    /// Invariant 4 over every Event: the right object, once per generation,
    /// and a deleted incarnation's Events left alone.
    fn judge_events(&mut self) {
        let snap = self.snap;
        let incarnations = self.incarnations;
        let mut groups: BTreeMap<(String, String, String, i64), Vec<String>> = BTreeMap::new();
        for e in &snap.events {
            let io = &e["involvedObject"];
            if io["kind"] != "OpenMedModel" {
                continue;
            }
            let ns = s(&e["metadata"]["namespace"]);
            let ename = s(&e["metadata"]["name"]);
            let name = s(&io["name"]);
            let uid = s(&io["uid"]);
            let reason = s(&e["reason"]);
            self.expect(INV4, io["namespace"] == ns, || {
                format!(
                    "Event {ns}/{ename} is about an object in namespace {}",
                    io["namespace"]
                )
            });
            let known = Key::of(ns, name)
                .and_then(|k| incarnations.get(&k))
                .is_some_and(|u| u.iter().any(|x| x == uid));
            self.expect(INV4, known, || {
                format!(
                    "Event {ns}/{ename} ({reason}) names uid {uid}, which {ns}/{name} never had (known: {:?})",
                    Key::of(ns, name).and_then(|k| incarnations.get(&k))
                )
            });
            match generation_of(ename, name, reason) {
                Some(g) => groups
                    .entry((ns.into(), uid.into(), reason.into(), g))
                    .or_default()
                    .push(ename.into()),
                None => self.expect(INV4, false, || {
                    format!("Event {ns}/{ename} ({reason} of {name}) is not named as §2.6 names it")
                }),
            }
            if let Some(live) = snap.live(ns, name) {
                let luid = s(&live["metadata"]["uid"]);
                let created = s(&live["metadata"]["creationTimestamp"]);
                let last = s(&e["lastTimestamp"]);
                let deletion = matches!(reason, "ModelRemoved" | "ModelRemovalSkipped");
                // Seconds resolution: only a later second is surely after.
                let after = last.get(..19) > created.get(..19);
                self.expect(INV4, uid == luid || deletion || !after, || {
                    format!(
                        "Event {ns}/{ename} ({reason}, count {}) of a deleted {ns}/{name} (uid {uid}) was written at {last}, after the live one (uid {luid}) was created at {created}",
                        e["count"]
                    )
                });
            }
        }
        for ((ns, uid, reason, g), names) in groups {
            self.expect(INV4, names.len() == 1, || {
                format!(
                    "{reason} at generation {g} of uid {uid} in {ns} is {} Events: {names:?}",
                    names.len()
                )
            });
        }
    }

    /// Invariant 5: what the operator does not own is left alone.
    fn judge_hands_off(&mut self) {
        let snap = self.snap;
        for (k, (rv, at)) in self.foreign {
            let cm = snap.cm(k.ns(), &k.cm());
            self.expect(
                INV5,
                cm.is_some_and(|c| c["metadata"]["resourceVersion"] == rv.as_str()),
                || {
                    format!(
                        "foreign ConfigMap {}/{} (resourceVersion {rv}) is now {:?}",
                        k.ns(),
                        k.cm(),
                        cm.map(|c| c["metadata"].clone())
                    )
                },
            );
            let writes: Vec<String> = self
                .requests
                .iter()
                .filter(|r| {
                    r.at_ms >= *at
                        && matches!(r.method.as_str(), "PATCH" | "PUT")
                        && on_object(r, "configmaps", k.ns(), &k.cm())
                })
                .map(describe)
                .collect();
            self.expect(INV5, writes.is_empty(), || {
                format!(
                    "the operator wrote the foreign ConfigMap {}/{}: {writes:?}",
                    k.ns(),
                    k.cm()
                )
            });
        }
        let present: BTreeSet<Key> = snap
            .deps
            .iter()
            .filter_map(|d| Key::of(s(&d["metadata"]["namespace"]), s(&d["metadata"]["name"])))
            .collect();
        let recorded: BTreeSet<Key> = self.deploys.keys().copied().collect();
        self.expect(INV5, present == recorded, || {
            format!("Deployments are {present:?}, the soak made {recorded:?}")
        });
        for (k, rec) in self.deploys {
            let Some(dep) = snap.dep(k.ns(), k.name()) else {
                continue;
            };
            let now = user_view(dep);
            self.expect(INV5, now == rec.view, || {
                format!(
                    "Deployment {k}: what the user owns changed\n   left: {}\n    now: {now}",
                    rec.view
                )
            });
            if !self.touched.contains(k) {
                let writes: Vec<String> = self
                    .requests
                    .iter()
                    .filter(|r| {
                        r.at_ms >= rec.created_ms
                            && is_write(r)
                            && on_object(r, "deployments", k.ns(), k.name())
                    })
                    .map(describe)
                    .collect();
                self.expect(INV5, writes.is_empty(), || {
                    format!("Deployment {k}, which no model ever targeted, was written: {writes:?}")
                });
            }
        }
    }

    /// Invariant 2 (not retried by itself) and 6 (status still) across the
    /// quiet window.
    fn judge_window(&mut self) {
        let (before, snap) = (self.before, self.snap);
        for m in &snap.models {
            let (ns, name) = (s(&m["metadata"]["namespace"]), s(&m["metadata"]["name"]));
            let was = before.model(ns, name);
            self.expect(
                INV6,
                was.is_some_and(|w| w["status"] == m["status"] && w["metadata"]["uid"] == m["metadata"]["uid"]),
                || format!("{ns}/{name}: status changed during the quiet window\n  before: {}\n   after: {}", was.map(|w| w["status"].clone()).unwrap_or_default(), m["status"]),
            );
        }
        for d in &snap.deps {
            let (ns, name) = (s(&d["metadata"]["namespace"]), s(&d["metadata"]["name"]));
            let was = before.dep(ns, name);
            self.expect(
                INV2,
                was.is_some_and(|w| w["metadata"]["generation"] == d["metadata"]["generation"]),
                || format!("Deployment {ns}/{name} changed generation during the quiet window ({:?} -> {})", was.map(|w| w["metadata"]["generation"].clone()), d["metadata"]["generation"]),
            );
        }
    }
}

// ---------------------------------------------------------------- soak ----

#[derive(Default, Debug, Clone)]
struct Stats {
    ops: u64,
    skipped: u64,
    faults: u64,
    kills: u64,
    quiet_points: u64,
    checks: u64,
}

struct Soak {
    seed: u64,
    seed_seconds: u64,
    sim: Sim,
    dir: PathBuf,
    op: Operator,
    rng: Rng,
    start: Instant,
    log: Vec<String>,
    /// Every uid each (namespace, name) had, oldest first.
    incarnations: BTreeMap<Key, Vec<String>>,
    deploys: BTreeMap<Key, DeployRec>,
    /// Deployment names some model has targeted at some point.
    touched: BTreeSet<Key>,
    /// Foreign ConfigMaps: resourceVersion at creation, creation time (ms).
    foreign: BTreeMap<Key, (String, u64)>,
    seen_ready: BTreeSet<String>,
    /// When (simulator clock, ms) the operator's watches last went down:
    /// a cut, a forced 410, the end of a pause, a restart.
    disconnect_ms: u64,
    /// When (simulator clock, ms) the last pause ends.
    pause_until_ms: u64,
    violations: Vec<Violation>,
    stats: Stats,
}

fn operator_args() -> [&'static str; 2] {
    ["--resync-seconds", "1"]
}

impl Soak {
    fn new(seed: u64, seed_seconds: u64) -> Soak {
        let sim = start_sim(fast());
        let dir = tmpdir(&format!("soak-{seed}"));
        for ns in NAMESPACES {
            create_namespace(&sim, ns);
        }
        let op = Operator::start(&sim.url(), &dir, &operator_args());
        let mut soak = Soak {
            seed,
            seed_seconds,
            sim,
            dir,
            op,
            rng: Rng(seed),
            start: Instant::now(),
            log: Vec::new(),
            incarnations: BTreeMap::new(),
            deploys: BTreeMap::new(),
            touched: BTreeSet::new(),
            foreign: BTreeMap::new(),
            seen_ready: BTreeSet::new(),
            disconnect_ms: 0,
            pause_until_ms: 0,
            violations: Vec::new(),
            stats: Stats::default(),
        };
        for ns in 0..NAMESPACES.len() {
            for name in 0..NAMES.len() {
                soak.create_deployment(Key { ns, name });
            }
        }
        soak.op.wait_ready();
        soak
    }

    fn note(&mut self, text: String) {
        let line = format!("{:7.2}s {text}", self.start.elapsed().as_secs_f64());
        self.log.push(line);
    }

    fn violate(&mut self, inv: &'static str, msg: String) {
        self.record(Violation { inv, msg });
    }

    /// Keeps a violation once, however many quiet points see it again.
    fn record(&mut self, v: Violation) {
        if !self
            .violations
            .iter()
            .any(|x| x.inv == v.inv && x.msg == v.msg)
        {
            self.violations.push(v);
        }
    }

    fn model(&self, m: Key) -> Option<Value> {
        self.sim
            .object("openmed.ai", "openmedmodels", m.ns(), m.name())
    }

    fn live(&self, m: Key) -> Option<Value> {
        self.model(m)
            .filter(|o| o["metadata"]["deletionTimestamp"].is_null())
    }

    fn deployment(&self, d: Key) -> Option<Value> {
        self.sim.object("apps", "deployments", d.ns(), d.name())
    }

    fn touch(&mut self, ns: usize, spec: &Value, owner: Key) {
        let target = spec["targetRef"]["name"].as_str().unwrap_or(owner.name());
        if let Some(k) = Key::of(NAMESPACES[ns], target) {
            self.touched.insert(k);
        }
    }

    fn create_deployment(&mut self, d: Key) -> String {
        match self.sim.create(deployment_in(d.ns(), d.name(), 2)) {
            Ok(obj) => {
                self.deploys.insert(
                    d,
                    DeployRec {
                        view: user_view(&obj),
                        created_ms: self.sim.clock_ms(),
                    },
                );
                format!("created uid {}", s(&obj["metadata"]["uid"]))
            }
            Err(e) => format!("refused: {e}"),
        }
    }

    fn create_model(&mut self, m: Key, spec: &Value) -> String {
        let obj = json!({
            "apiVersion": MODEL.0, "kind": MODEL.1,
            "metadata": {"name": m.name(), "namespace": m.ns()},
            "spec": spec,
        });
        match self.sim.create(obj) {
            Ok(o) => {
                let uid = s(&o["metadata"]["uid"]).to_string();
                self.incarnations.entry(m).or_default().push(uid.clone());
                self.touch(m.ns, spec, m);
                format!("created uid {uid}")
            }
            Err(e) => format!("refused: {e}"),
        }
    }

    /// Delete a model and wait (bounded) for the operator to let it go.
    fn delete_model(&mut self, m: Key) -> String {
        if let Err(e) = self.sim.delete(MODEL.0, MODEL.1, m.ns(), m.name()) {
            return format!("refused: {e}");
        }
        let t = Instant::now();
        while t.elapsed() < DELETE_TIMEOUT {
            if self.model(m).is_none() {
                return format!("gone after {} ms", t.elapsed().as_millis());
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        let left = self.model(m).unwrap_or_default();
        self.violate(
            INV3,
            format!(
                "deleting {m} did not finish within {DELETE_TIMEOUT:?}; finalizers {} status {}",
                left["metadata"]["finalizers"], left["status"]
            ),
        );
        "NOT GONE".into()
    }

    /// Read-modify-write of a Deployment with a resourceVersion
    /// precondition, as `kubectl edit` does; records what the user left.
    fn edit_deployment(&mut self, d: Key, edit: impl Fn(&mut Value)) -> String {
        for _ in 0..8 {
            let Some(mut obj) = self.deployment(d) else {
                return "skipped: no Deployment".into();
            };
            let rv = obj["metadata"]["resourceVersion"].clone();
            edit(&mut obj);
            let patch = json!({
                "metadata": {"resourceVersion": rv, "annotations": obj["metadata"]["annotations"]},
                "spec": {"template": obj["spec"]["template"]},
            });
            match self
                .sim
                .merge_patch("apps/v1", "Deployment", d.ns(), d.name(), &patch)
            {
                Ok(after) => {
                    if let Some(rec) = self.deploys.get_mut(&d) {
                        rec.view = user_view(&after);
                    }
                    return format!("edited (generation {})", after["metadata"]["generation"]);
                }
                Err(e) if e.contains("modified") || e.contains("onflict") => continue,
                Err(e) => return format!("refused: {e}"),
            }
        }
        "gave up after 8 conflicts".into()
    }

    fn patch_model(&mut self, m: Key, patch: &Value) -> String {
        if self.live(m).is_none() {
            return "skipped: no live model".into();
        }
        match self
            .sim
            .merge_patch(MODEL.0, MODEL.1, m.ns(), m.name(), patch)
        {
            Ok(o) => format!("generation {}", o["metadata"]["generation"]),
            Err(e) => format!("refused: {e}"),
        }
    }

    fn annotate(&mut self, m: Key, value: Option<&str>) -> String {
        self.patch_model(
            m,
            &json!({"metadata": {"annotations": {ROLLBACK_TO: value}}}),
        )
    }

    fn apply_op(&mut self, op: &Op) -> String {
        match op {
            Op::CreateModel { m, spec } => {
                if self.model(*m).is_some() {
                    return "skipped: exists".into();
                }
                self.create_model(*m, spec)
            }
            Op::RecreateModel { m, spec } => {
                let mut out = String::new();
                if self.model(*m).is_some() {
                    out = format!("deleted ({}), ", self.delete_model(*m));
                }
                out + &self.create_model(*m, spec)
            }
            Op::DeleteModel { m } => {
                if self.model(*m).is_none() {
                    return "skipped: no model".into();
                }
                self.delete_model(*m)
            }
            Op::PatchSpec { m, what, spec } => {
                let out = self.patch_model(*m, &json!({ "spec": spec }));
                if spec["targetRef"]["name"].is_string() {
                    self.touch(m.ns, spec, *m);
                }
                format!("{what}: {out}")
            }
            Op::RollbackTo { m, pick } => {
                let Some(model) = self.live(*m) else {
                    return "skipped: no live model".into();
                };
                match pick {
                    Pick::Retained(k) => {
                        let st = &model["status"];
                        let retained: Vec<String> =
                            [&st["lastSuccessfulSpec"], &st["previousSuccessfulSpec"]]
                                .into_iter()
                                .filter_map(|sp| sp["version"].as_str().map(str::to_string))
                                .collect();
                        if retained.is_empty() {
                            return "skipped: nothing retained yet".into();
                        }
                        // The previous version mostly: the last one is
                        // usually what the spec asks for (no rollback).
                        let t = if k % 4 == 0 {
                            retained[0].clone()
                        } else {
                            retained[retained.len() - 1].clone()
                        };
                        format!("to {t}: {}", self.annotate(*m, Some(&t)))
                    }
                    Pick::NotRetained => self.annotate(*m, Some(NEVER_SET)),
                    Pick::Garbage => self.annotate(*m, Some("no such version at all!")),
                    Pick::Blank => self.annotate(*m, Some("   ")),
                    Pick::Remove => self.annotate(*m, None),
                    Pick::MakePermanent { annotation_first } => {
                        let Some(t) = rollback_to(&model) else {
                            return "skipped: no rollback-to".into();
                        };
                        let version = json!({"spec": {"version": t}});
                        let (a, b) = if *annotation_first {
                            let a = self.annotate(*m, None);
                            std::thread::sleep(Duration::from_millis(200));
                            (a, self.patch_model(*m, &version))
                        } else {
                            let a = self.patch_model(*m, &version);
                            std::thread::sleep(Duration::from_millis(200));
                            (a, self.annotate(*m, None))
                        };
                        format!("version {t}: {a}, {b}")
                    }
                }
            }
            Op::DeleteDeployment { d } => {
                if self.deployment(*d).is_none() {
                    return "skipped: no Deployment".into();
                }
                self.deploys.remove(d);
                match self.sim.delete("apps/v1", "Deployment", d.ns(), d.name()) {
                    Ok(()) => "deleted".into(),
                    Err(e) => format!("refused: {e}"),
                }
            }
            Op::CreateDeployment { d } => {
                if self.deployment(*d).is_some() {
                    return "skipped: exists".into();
                }
                self.create_deployment(*d)
            }
            Op::RecreateDeployment { d } => {
                if self.deployment(*d).is_some() {
                    self.deploys.remove(d);
                    let _ = self.sim.delete("apps/v1", "Deployment", d.ns(), d.name());
                }
                self.create_deployment(*d)
            }
            Op::ForeignConfigMap { m } => {
                let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": m.cm(), "namespace": m.ns(), "labels": {"team": "someone-else"}},
                    "data": {"owner": "someone else"}});
                match self.sim.create(cm) {
                    Ok(o) => {
                        let rv = s(&o["metadata"]["resourceVersion"]).to_string();
                        self.foreign.insert(*m, (rv, self.sim.clock_ms()));
                        "created".into()
                    }
                    Err(e) => format!("refused: {e}"),
                }
            }
            Op::ForeignThenCreate { m, spec } => {
                let mut out = String::new();
                if self.model(*m).is_some() {
                    out = format!("deleted ({}), ", self.delete_model(*m));
                }
                out += &format!(
                    "foreign ConfigMap {}, ",
                    self.apply_op(&Op::ForeignConfigMap { m: *m })
                );
                out + &self.create_model(*m, spec)
            }
            Op::RemoveForeignConfigMap { m } => {
                if self.foreign.remove(m).is_none() {
                    return "skipped: no foreign ConfigMap".into();
                }
                match self.sim.delete("v1", "ConfigMap", m.ns(), &m.cm()) {
                    Ok(()) => "deleted".into(),
                    Err(e) => format!("refused: {e}"),
                }
            }
            Op::EditEnv {
                d,
                level,
                toggle_extra,
            } => self.edit_deployment(*d, |obj| {
                let cs = &mut obj["spec"]["template"]["spec"]["containers"];
                let Some(c) = cs
                    .as_array_mut()
                    .and_then(|cs| cs.iter_mut().find(|c| c["name"] == CONTAINER))
                else {
                    return;
                };
                let Some(env) = c["env"].as_array_mut() else {
                    return;
                };
                for e in env.iter_mut() {
                    if e["name"] == "LOG_LEVEL" {
                        e["value"] = json!(level);
                    }
                }
                if *toggle_extra {
                    if env.iter().any(|e| e["name"] == "EXTRA_FLAG") {
                        env.retain(|e| e["name"] != "EXTRA_FLAG");
                    } else {
                        env.push(json!({"name": "EXTRA_FLAG", "value": "on"}));
                    }
                }
            }),
            Op::EditSidecar { d, tag } => self.edit_deployment(*d, |obj| {
                if let Some(c) = obj["spec"]["template"]["spec"]["containers"]
                    .as_array_mut()
                    .and_then(|cs| cs.iter_mut().find(|c| c["name"] == "proxy"))
                {
                    c["image"] = json!(format!("envoy:1.{}", 28 + tag % 4));
                    if tag % 2 == 0 {
                        c["env"] =
                            json!([{"name": "PROXY_MODE", "value": format!("m{}", tag % 7)}]);
                    }
                }
            }),
            Op::EditReplicas { d, replicas } => {
                if self.deployment(*d).is_none() {
                    return "skipped: no Deployment".into();
                }
                let patch = json!({"spec": {"replicas": replicas}});
                match self
                    .sim
                    .merge_patch("apps/v1", "Deployment", d.ns(), d.name(), &patch)
                {
                    Ok(_) => "scaled".into(),
                    Err(e) => format!("refused: {e}"),
                }
            }
            Op::EditAnnotation { d, template, n } => {
                let template = *template;
                let n = *n;
                self.edit_deployment(*d, move |obj| {
                    let at = if template {
                        &mut obj["spec"]["template"]["metadata"]["annotations"]
                    } else {
                        &mut obj["metadata"]["annotations"]
                    };
                    if !at.is_object() {
                        *at = json!({});
                    }
                    at["team.example/note"] = json!(format!("edit-{n}"));
                })
            }
            Op::GarbleHash { d } => {
                let Some(dep) = self.deployment(*d) else {
                    return "skipped: no Deployment".into();
                };
                if dep["spec"]["template"]["metadata"]["annotations"][HASH].is_null() {
                    return "skipped: no hash annotation".into();
                }
                self.edit_deployment(*d, |obj| {
                    obj["spec"]["template"]["metadata"]["annotations"][HASH] = json!(
                        "sha256:0000000000000000000000000000000000000000000000000000000000000000"
                    );
                })
            }
            Op::EditConfigMap { m, kind } => {
                let Some(cm) = self.sim.object("", "configmaps", m.ns(), &m.cm()) else {
                    return "skipped: no ConfigMap".into();
                };
                if cm["metadata"]["labels"][MANAGED_BY] != "openmed-operator" {
                    return "skipped: not the operator's".into();
                }
                let data = match kind {
                    0 => json!({ PRELOAD: "OpenMed/hand-edited" }),
                    1 => json!({"manifest.json": "{}"}),
                    _ => json!({"note": "added by hand"}),
                };
                match self.sim.merge_patch(
                    "v1",
                    "ConfigMap",
                    m.ns(),
                    &m.cm(),
                    &json!({ "data": data }),
                ) {
                    Ok(_) => format!("data {data}"),
                    Err(e) => format!("refused: {e}"),
                }
            }
        }
    }

    fn restart_operator(&mut self, down: Duration) {
        self.check_log();
        self.op.kill();
        std::thread::sleep(down);
        self.op = Operator::start(&self.sim.url(), &self.dir, &operator_args());
        self.disconnect_ms = self.sim.clock_ms();
    }

    fn check_log(&mut self) {
        let log = self.op.log();
        self.stats.checks += 1;
        if let Some(at) = log.find("panicked") {
            let from = log[..at].rfind('\n').map_or(0, |i| i + 1);
            let excerpt: String = log[from..].chars().take(2000).collect();
            self.violate(
                INV7,
                format!(
                    "the operator panicked ({}):\n{excerpt}",
                    self.op.log_path().display()
                ),
            );
        }
    }

    /// Apply a fault; what happened, for the log.
    fn apply_fault(&mut self, f: &Fault) -> &'static str {
        let now = self.sim.clock_ms();
        // kubesim does not extend a pause under way (its accept loop keeps
        // the first deadline), so pauses never overlap here.
        if matches!(f, Fault::Pause { .. }) && now < self.pause_until_ms + 100 {
            return "skipped: a pause is under way";
        }
        if let Fault::Pause { ms } = f {
            self.pause_until_ms = now + ms;
        }
        self.disconnect_ms = match f {
            Fault::CutWatches | Fault::Expire { .. } | Fault::KillRestart { .. } => now,
            Fault::Pause { ms } => now + ms,
            _ => self.disconnect_ms,
        }
        .max(self.disconnect_ms);
        let sim = &self.sim;
        match f {
            Fault::CutWatches => sim.cut_watches(),
            Fault::Expire { n, in_stream } => {
                sim.expire_next_watches(*n, *in_stream);
                sim.cut_watches();
            }
            Fault::Compact => sim.compact(),
            Fault::Fail {
                method,
                path,
                code,
                count,
            } => sim.fail_next(*method, path, *code, *count, (*code == 429).then_some(1)),
            Fault::Pause { ms } => sim.pause(Duration::from_millis(*ms)),
            Fault::WatchLag { path, ms } => sim.set_watch_lag(path, Duration::from_millis(*ms)),
            Fault::KillRestart { down_ms } => {
                self.stats.kills += 1;
                self.restart_operator(Duration::from_millis(*down_ms));
            }
        }
        "applied"
    }

    fn step(&mut self) {
        match random_step(&mut self.rng) {
            Step::Op(op) => {
                self.stats.ops += 1;
                let n = self.stats.ops + self.stats.faults;
                let out = self.apply_op(&op);
                if out.starts_with("skipped") {
                    self.stats.skipped += 1;
                }
                self.note(format!("#{n} {op} -> {out}"));
            }
            Step::Fault(f) => {
                self.stats.faults += 1;
                let n = self.stats.ops + self.stats.faults;
                let at = self.start.elapsed();
                let out = self.apply_fault(&f);
                if out.starts_with("skipped") {
                    self.stats.skipped += 1;
                }
                let line = format!("{:7.2}s #{n} FAULT {f:?} -> {out}", at.as_secs_f64());
                self.log.push(line);
            }
        }
        let pause = self.rng.below(400) as u64;
        std::thread::sleep(Duration::from_millis(pause));
    }

    /// Wait (bounded) until no model is busy and nothing has changed or
    /// been written for QUIET_FOR.
    fn wait_quiet(&mut self) -> Result<Duration, Violation> {
        self.sim.clear_faults();
        let t = Instant::now();
        let mut last = String::new();
        let mut last_writes = u64::MAX;
        let mut since = Instant::now();
        let mut waiting_for = Vec::new();
        loop {
            let models = self.sim.objects("openmed.ai", "openmedmodels", None);
            let busy_now: Vec<String> = models
                .iter()
                .filter_map(|m| {
                    busy(m).map(|why| {
                        format!(
                            "{}/{}: {why}",
                            s(&m["metadata"]["namespace"]),
                            s(&m["metadata"]["name"])
                        )
                    })
                })
                .collect();
            let fingerprint = serde_json::to_string(
                &models
                    .iter()
                    .map(|m| {
                        (
                            &m["metadata"]["uid"],
                            &m["metadata"]["generation"],
                            &m["status"],
                        )
                    })
                    .collect::<Vec<_>>(),
            )
            .unwrap_or_default();
            let w = writes(&self.sim);
            if fingerprint != last || w != last_writes || !busy_now.is_empty() {
                since = Instant::now();
                last = fingerprint;
                last_writes = w;
            }
            if busy_now.is_empty() && since.elapsed() >= QUIET_FOR {
                // Idle only counts once every watch is back since the last
                // disconnect, and has been for QUIET_FOR: before that the
                // operator may simply not have seen the last changes.
                let now = self.sim.clock_ms();
                match watches_back_at(&self.sim.requests(), self.disconnect_ms) {
                    Ok(at) if now.saturating_sub(at) >= QUIET_FOR.as_millis() as u64 => {
                        return Ok(t.elapsed());
                    }
                    Ok(_) => waiting_for.clear(),
                    Err(missing) => waiting_for = missing,
                }
            }
            if let Some(st) = self.op.exited() {
                return Err(Violation {
                    inv: INV7,
                    msg: format!("the operator exited by itself: {st:?}\n{}", self.op.log()),
                });
            }
            // Nothing busy, yet writes or status changes keep coming: many
            // resync periods are proof enough.
            let idle_but_writing = busy_now.is_empty() && t.elapsed() > QUIET_IDLE_TIMEOUT;
            if t.elapsed() > QUIET_TIMEOUT || idle_but_writing {
                let inv = if !waiting_for.is_empty() {
                    LIVENESS
                } else if busy_now.is_empty() {
                    INV6
                } else if busy_now.iter().all(|b| b.ends_with("being deleted")) {
                    INV3
                } else {
                    LIVENESS
                };
                let recent: Vec<String> = self
                    .sim
                    .requests()
                    .iter()
                    .rev()
                    .filter(|r| is_write(r))
                    .take(20)
                    .map(describe)
                    .collect();
                let targets: Vec<String> = models
                    .iter()
                    .filter(|m| busy(m).is_some())
                    .filter_map(|m| {
                        let ns = s(&m["metadata"]["namespace"]);
                        let target = desired(m)["targetRef"]["name"].clone();
                        let dep = self.sim.object("apps", "deployments", ns, s(&target))?;
                        Some(format!(
                            "{ns}/{}: {}",
                            s(&target),
                            deployment_diagnosis(&dep)
                        ))
                    })
                    .collect();
                return Err(Violation {
                    inv,
                    msg: format!(
                        "no quiet point within {:.1?}; busy: {busy_now:?}; their Deployments: {targets:#?}; watches not back since the last disconnect at {} ms: {waiting_for:?}; last writes: {recent:?}",
                        t.elapsed(),
                        self.disconnect_ms
                    ),
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// One quiet point: wait for it, watch three resyncs, check everything.
    /// Returns whether every invariant held.
    fn quiet_point(&mut self) -> bool {
        self.stats.quiet_points += 1;
        let broken_before = self.violations.len();
        match self.wait_quiet() {
            Err(v) => {
                self.note(format!(
                    "QUIET POINT {} never came",
                    self.stats.quiet_points
                ));
                self.record(v);
                return false;
            }
            Ok(took) => self.note(format!(
                "QUIET POINT {} after {} ms",
                self.stats.quiet_points,
                took.as_millis()
            )),
        }
        let before = Snap::take(&self.sim);
        let (w0, t0) = (writes(&self.sim), self.sim.clock_ms());
        std::thread::sleep(WINDOW);
        let w1 = writes(&self.sim);
        let snap = Snap::take(&self.sim);
        let requests = self.sim.requests();
        self.stats.checks += 1;
        if w1 != w0 {
            let during: Vec<String> = requests
                .iter()
                .filter(|r| r.at_ms >= t0 && is_write(r))
                .map(describe)
                .collect();
            self.violate(
                INV6,
                format!(
                    "{} writes during {WINDOW:?} of quiet ({RESYNC_SECONDS} s resync): {during:#?}",
                    w1 - w0
                ),
            );
        }
        let mut ctx = Ctx {
            snap: &snap,
            before: &before,
            incarnations: &self.incarnations,
            deploys: &self.deploys,
            touched: &self.touched,
            foreign: &self.foreign,
            seen_ready: &self.seen_ready,
            requests: &requests,
            out: Vec::new(),
            checks: 0,
        };
        ctx.judge_window();
        for m in &snap.models {
            if m["metadata"]["deletionTimestamp"].is_null() {
                ctx.judge_model(m);
            }
        }
        ctx.judge_release();
        ctx.judge_events();
        ctx.judge_hands_off();
        let (out, checks) = (ctx.out, ctx.checks);
        self.stats.checks += checks;
        for v in out {
            self.record(v);
        }
        self.check_log();
        for m in &snap.models {
            if m["status"]["phase"] == "Ready" {
                self.seen_ready.insert(s(&m["metadata"]["uid"]).to_string());
            }
        }
        let phases: Vec<String> = snap
            .models
            .iter()
            .map(|m| {
                format!(
                    "{}/{}={}/{}",
                    s(&m["metadata"]["namespace"]),
                    s(&m["metadata"]["name"]),
                    s(&m["status"]["phase"]),
                    cond(&m["status"], 0).1
                )
            })
            .collect();
        self.note(format!("  state: {}", phases.join(" ")));
        self.violations.len() == broken_before
    }

    fn run(&mut self, budget: Duration, keep_going: bool) {
        // A first wave of models, then batches of operations and faults,
        // each ending in a quiet point.
        for ns in 0..NAMESPACES.len() {
            for name in 0..NAMES.len() {
                if self.rng.pct(60) {
                    let m = Key { ns, name };
                    let spec = random_spec(&mut self.rng, m);
                    self.stats.ops += 1;
                    let out = self.create_model(m, &spec);
                    self.note(format!(
                        "#{} {} -> {out}",
                        self.stats.ops,
                        Op::CreateModel { m, spec }
                    ));
                }
            }
        }
        loop {
            let batch = 3 + self.rng.below(8);
            for _ in 0..batch {
                self.step();
            }
            if !self.quiet_point() && !keep_going {
                return;
            }
            if self.start.elapsed() + TAIL >= budget {
                break;
            }
        }
        self.check_log();
        let exit = catch_unwind(AssertUnwindSafe(|| self.op.assert_clean_exit()));
        self.stats.checks += 1;
        if let Err(p) = exit {
            self.violate(INV7, format!("SIGTERM: {}", panic_text(&p)));
        }
    }

    fn summary(&self) -> String {
        let st = &self.stats;
        format!(
            "SOAK seed={} seconds={:.1} ops={} skipped={} faults={} kills={} quiet_points={} checks={} violations={}",
            self.seed,
            self.start.elapsed().as_secs_f64(),
            st.ops,
            st.skipped,
            st.faults,
            st.kills,
            st.quiet_points,
            st.checks,
            self.violations.len()
        )
    }

    fn report(&self) -> String {
        let mut out = format!(
            "==== SOAK FAILURE seed {seed} ====\nreplay: OMO_SOAK_SEED={seed} OMO_SOAK_SECONDS={secs} cargo test --test soak -- --nocapture\n   (or scripts/soak.sh --seconds {secs} --seed {seed})\nbroken invariants ({}):\n",
            self.violations.len(),
            seed = self.seed,
            secs = self.seed_seconds,
        );
        for v in &self.violations {
            out.push_str(&format!("  - {v}\n"));
        }
        let ops_file = self.dir.join("operations.log");
        let _ = std::fs::write(&ops_file, self.log.join("\n") + "\n");
        out.push_str(&format!(
            "operation log ({} lines, all in {}):\n",
            self.log.len(),
            ops_file.display()
        ));
        for line in self.log.iter().skip(self.log.len().saturating_sub(120)) {
            out.push_str(&format!("  {line}\n"));
        }
        out.push_str(&format!("operator logs in {}\n", self.dir.display()));
        out
    }
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic".into())
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// One seed: its summary line and, if it broke something, the report.
fn soak_one(seed: u64, secs: u64, keep_going: bool) -> (String, Option<String>) {
    eprintln!(
        "SOAK seed {seed}: {secs} s (replay with OMO_SOAK_SEED={seed} OMO_SOAK_SECONDS={secs})"
    );
    let mut soak = Soak::new(seed, secs);
    let run = catch_unwind(AssertUnwindSafe(|| {
        soak.run(Duration::from_secs(secs), keep_going)
    }));
    if let Err(p) = run {
        soak.violate(
            LIVENESS,
            format!("the soak itself panicked: {}", panic_text(&p)),
        );
    }
    let summary = soak.summary();
    if std::env::var("OMO_SOAK_VERBOSE").is_ok_and(|v| v == "1") {
        eprintln!("{}", soak.log.join("\n"));
    }
    eprintln!("{summary}");
    if soak.violations.is_empty() {
        let _ = std::fs::remove_dir_all(&soak.dir);
        (summary, None)
    } else {
        let report = soak.report();
        eprintln!("{report}");
        (summary, Some(report))
    }
}

/// Seeds `cargo test --test soak` runs (`OMO_SOAK_FRESH=1`: fresh ones).
const CI_SEEDS: [u64; 3] = [489_699_169, 22_213_296, 520_919_065];

#[test]
fn soak() {
    let total = env_u64("OMO_SOAK_SECONDS").unwrap_or(60).max(10);
    let per_seed = env_u64("OMO_SOAK_SEED_SECONDS").unwrap_or(20).max(10);
    let keep_going = std::env::var("OMO_SOAK_KEEP_GOING").is_ok_and(|v| v == "1");
    let seeds: Vec<(u64, u64)> = match env_u64("OMO_SOAK_SEED") {
        Some(seed) => vec![(seed, total)],
        // The suite's gate: fixed seeds that cover every operation kind and
        // most faults, so a red run is a regression, not an open defect a
        // fresh seed happened to meet (issue 18's note lists those).
        None if std::env::var("OMO_SOAK_FRESH").map_or(true, |v| v != "1") => CI_SEEDS
            .iter()
            .take(total.div_ceil(per_seed) as usize)
            .map(|&s| (s, per_seed))
            .collect(),
        None => {
            let t = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos() as u64;
            let mut base = Rng(t ^ ((std::process::id() as u64) << 32));
            let n = total.div_ceil(per_seed);
            (0..n)
                .map(|_| (base.next() % 1_000_000_000, per_seed))
                .collect()
        }
    };
    let mut reports = Vec::new();
    for (seed, secs) in seeds {
        let (_, report) = soak_one(seed, secs, keep_going);
        if let Some(r) = report {
            reports.push(r);
            if !keep_going {
                break;
            }
        }
    }
    assert!(
        reports.is_empty(),
        "the soak broke {} invariant(s); the report is above:\n{}",
        reports.len(),
        reports
            .iter()
            .map(|r| r.lines().take(2).collect::<Vec<_>>().join("\n"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// The soak's own digest of the manifest agrees with the contract's vectors.
#[test]
fn the_soak_computes_manifest_digests_as_the_vectors_do() {
    let v: Value = serde_json::from_str(include_str!("fixtures/vectors.json")).unwrap();
    for (label, case) in v["cases"].as_object().unwrap() {
        let m = &case["resource"];
        let d = desired(m);
        assert_eq!(
            format!("{}\n", manifest_json(&d)),
            s(&case["manifest_json"]),
            "{label}"
        );
        assert_eq!(
            digest(&manifest_json(&d)),
            s(&case["manifest_hash"]),
            "{label}"
        );
    }
}
