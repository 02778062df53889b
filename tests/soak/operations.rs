//! The seeded sequence: a splitmix64 PRNG, the pool's keys, the user
//! operations and faults, and how a seed picks each next step.

use crate::{CONTAINER, LOADABLE, NAMES, NAMESPACES, UNLOADABLE};
use serde_json::{json, Value};
use std::fmt;

// ---------------------------------------------------------------- PRNG ----

/// splitmix64: small, self-contained and good enough to pick operations.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    pub fn pct(&mut self, p: u64) -> bool {
        self.next() % 100 < p
    }

    pub fn pick<T: Clone>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len())].clone()
    }
}

// ----------------------------------------------------- operations, faults ----

/// A (namespace, name) of the pool: a model, its Deployment, its ConfigMap.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub struct Key {
    pub ns: usize,
    pub name: usize,
}

impl Key {
    pub fn ns(self) -> &'static str {
        NAMESPACES[self.ns]
    }
    pub fn name(self) -> &'static str {
        NAMES[self.name]
    }
    pub fn cm(self) -> String {
        format!("{}-model-manifest", self.name())
    }
    pub fn of(ns: &str, name: &str) -> Option<Key> {
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
pub enum Pick {
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
pub enum Op {
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
pub enum Fault {
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

pub enum Step {
    Op(Op),
    Fault(Fault),
}

fn random_key(r: &mut Rng) -> Key {
    Key {
        ns: r.below(NAMESPACES.len()),
        name: r.below(NAMES.len()),
    }
}

pub fn random_spec(r: &mut Rng, m: Key) -> Value {
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
        roll @ 20..=57 => random_spec_patch(r, m, roll),
        58..=67 => Op::RollbackTo {
            m,
            pick: random_pick(r),
        },
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

/// A change to the spec, for a `roll` of 20 to 57: the version (loadable
/// or not), replicas, strategy, deadline, an invalid strategy and its
/// repair, a missing container, another target.
fn random_spec_patch(r: &mut Rng, m: Key, roll: usize) -> Op {
    match roll {
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
        _ => unreachable!("not a spec patch: {roll}"),
    }
}

/// What `openmed.ai/rollback-to` is set to.
fn random_pick(r: &mut Rng) -> Pick {
    match r.below(10) {
        0..=3 => Pick::Retained(r.next()),
        4 => Pick::NotRetained,
        5 => Pick::Garbage,
        6 => Pick::Blank,
        7 => Pick::Remove,
        _ => Pick::MakePermanent {
            annotation_first: r.pct(50),
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

pub fn random_step(r: &mut Rng) -> Step {
    if r.pct(30) {
        Step::Fault(random_fault(r))
    } else {
        Step::Op(random_op(r))
    }
}
