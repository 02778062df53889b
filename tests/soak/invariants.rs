//! The invariants of a quiet point (see the list in `main.rs`), checked
//! from the API alone against what the soak did: the outcomes the contract
//! allows for each model, and one `judge_*` for each invariant.

use crate::observe::*;
use crate::operations::Key;
use crate::{CLAIM, HASH, MANAGED_BY, OWNER, PRELOAD};
use kubesim::faults::RequestRecord;
use openmed_operator::model::names::event_name;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

// ----------------------------------------------------------- violations ----

#[derive(Debug, Clone)]
pub struct Violation {
    pub inv: &'static str,
    pub msg: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invariant {}: {}", self.inv, self.msg)
    }
}

const INV1: &str = "1 (converged state)";
const INV2: &str = "2 (unloadable version)";
pub const INV3: &str = "3 (delete and release)";
const INV4: &str = "4 (Events)";
const INV5: &str = "5 (hands off)";
pub const INV6: &str = "6 (quiet means no writes)";
pub const INV7: &str = "7 (process)";
pub const INV8: &str = "8 (a stalled strategy is refused)";
pub const LIVENESS: &str = "liveness (reaches a quiet point)";

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

pub struct DeployRec {
    pub view: Value,
    pub created_ms: u64,
}

/// The state the checks read besides the cluster: what the soak did.
pub struct Ctx<'a> {
    pub snap: &'a Snap,
    pub before: &'a Snap,
    pub incarnations: &'a BTreeMap<Key, Vec<String>>,
    pub deploys: &'a BTreeMap<Key, DeployRec>,
    pub touched: &'a BTreeSet<Key>,
    pub foreign: &'a BTreeMap<Key, (String, u64)>,
    pub seen_ready: &'a BTreeSet<String>,
    pub requests: &'a [RequestRecord],
    pub out: Vec<Violation>,
    pub checks: u64,
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
        let st = &m["status"];
        let phase = s(&st["phase"]);
        let ready = cond(st, 0);
        match o {
            Outcome::Ready => {
                ensure!(
                    phase == "Ready" && ready == ("True", "RolloutSucceeded"),
                    "phase {phase}, Ready {ready:?}"
                );
                self.holds_ready(m, d)
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
                self.holds_rolled_back(m, d, manual.as_deref())
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
                // The phase and Ready stay as the snapshot the rejection
                // replaced (9.D16); with nothing served yet, Failed.
                let before = &st["beforeRejection"];
                let kept = if before["conditions"]
                    .as_array()
                    .is_some_and(|c| c.len() == 4)
                {
                    phase == s(&before["phase"]) && ready == cond(before, 0)
                } else {
                    phase == "Failed" && ready == ("False", "RollbackTargetUnavailable")
                };
                ensure!(
                    kept && cond(st, 2) == ("True", "RollbackTargetUnavailable")
                        && cond(st, 3) == ("False", "RollbackRejected")
                        && st["rollbackRequest"] == format!("manual:{t}").as_str(),
                    "phase {phase}, Ready {ready:?}, Degraded {:?}, RolledBack {:?}, rollbackRequest {}, before {}",
                    cond(st, 2),
                    cond(st, 3),
                    st["rollbackRequest"],
                    before["phase"]
                );
                Ok(())
            }
        }
    }

    /// Ready: the status names the spec's version and manifest, and the
    /// target serves it as the spec says.
    fn holds_ready(&self, m: &Value, d: &Value) -> Result<(), String> {
        let ns = s(&m["metadata"]["namespace"]);
        let name = s(&m["metadata"]["name"]);
        let uid = s(&m["metadata"]["uid"]);
        let st = &m["status"];
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
        target_follows_spec(dep, d)
    }

    /// Rolled back: serving the retained spec, a version that loads, for
    /// the reason the request gives (manual to `manual`, or automatic).
    fn holds_rolled_back(&self, m: &Value, d: &Value, manual: Option<&str>) -> Result<(), String> {
        let ns = s(&m["metadata"]["namespace"]);
        let name = s(&m["metadata"]["name"]);
        let uid = s(&m["metadata"]["uid"]);
        let st = &m["status"];
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
                        && st["activeVersion"] == t
                        && cond(st, 2).1 == "ManualRollback",
                    "rollbackRequest {} active {} Degraded {:?} for a manual rollback to {t}",
                    st["rollbackRequest"],
                    st["activeVersion"],
                    cond(st, 2)
                );
            }
            None => {
                ensure!(
                    st["rollbackRequest"] == format!("automatic:{}", s(&d["version"])).as_str()
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

    /// Invariants 1 and 2 for one live model, and the Events its state
    /// requires (4).
    pub fn judge_model(&mut self, m: &Value) {
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

/// The target Deployment has the spec's replicas, deadline and strategy,
/// and serves: observed, every replica updated and available.
fn target_follows_spec(dep: &Value, d: &Value) -> Result<(), String> {
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
                && sp["strategy"]["rollingUpdate"]["maxUnavailable"] == rs["maxUnavailable"],
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

/// The generation and the rollback tag (`""` for none) in an Event's name
/// (§2.6, possibly with a uid suffix).
fn generation_of(event: &str, name: &str, reason: &str) -> Option<(i64, String)> {
    let parts: Vec<&str> = event.split('-').collect();
    let tags = parts
        .windows(2)
        .filter(|w| matches!(w[0], "manual" | "automatic"))
        .map(|w| format!("{}-{}", w[0], w[1]));
    for tag in std::iter::once(String::new()).chain(tags) {
        let r = if tag.is_empty() {
            reason.to_string()
        } else {
            format!("{reason}-{tag}")
        };
        let g = parts
            .iter()
            .filter_map(|p| p.parse::<i64>().ok())
            .find(|g| event.starts_with(&event_name(name, &r, *g)));
        if let Some(g) = g {
            return Some((g, tag));
        }
    }
    None
}

/// The Events a settled state requires (each entry: any one of these
/// reasons), from the state table of §6.14.
fn required_events(st: &Value) -> Vec<Vec<&str>> {
    let phase = s(&st["phase"]);
    let (rs, reason) = cond(st, 0);
    let rolled = cond(st, 3);
    // Recovering from TargetDegraded posts no success Event (§9.D7).
    let success = |r: &'static str| -> Vec<&str> { vec![r, "TargetDegraded"] };
    let mut required = match (phase, rs, reason) {
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
        _ => vec![],
    };
    // A rejected rollback-to (Degraded, whatever the phase kept) posted
    // its Warning (9.D16).
    if cond(st, 2) == ("True", "RollbackTargetUnavailable") {
        required.push(vec!["RollbackRejected"]);
    }
    required
}

impl Ctx<'_> {
    /// Invariant 3: deleted models are gone and hold nothing.
    pub fn judge_release(&mut self) {
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
            self.judge_deployment_release(dep);
        }
        for cm in &snap.cms {
            self.judge_config_map_release(cm);
        }
    }

    /// A Deployment names only live owners, is left blank when none claims
    /// it, and is handed back by a settled model that serves another.
    fn judge_deployment_release(&mut self, dep: &Value) {
        let snap = self.snap;
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

    /// An operator's ConfigMap belongs to the live model it names.
    fn judge_config_map_release(&mut self, cm: &Value) {
        let snap = self.snap;
        let ns = s(&cm["metadata"]["namespace"]);
        let cname = s(&cm["metadata"]["name"]);
        let meta = &cm["metadata"];
        let ours = meta["labels"][MANAGED_BY] == "openmed-operator"
            || !meta["annotations"][OWNER].is_null();
        if !ours {
            return;
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

    /// Invariant 4 over every Event: the right object, once per generation,
    /// and a deleted incarnation's Events left alone.
    pub fn judge_events(&mut self) {
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
                Some((g, tag)) => groups
                    .entry((ns.into(), uid.into(), format!("{reason}{tag}"), g))
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
    pub fn judge_hands_off(&mut self) {
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
    pub fn judge_window(&mut self) {
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
