//! The soak's user operations for one fixed seed, on both clusters: the
//! sequence `tests/soak/operations.rs` draws for [`SEED`], its faults left
//! out (they are kubesim's own), each operation applied as the soak's driver
//! applies it and followed by a quiet point. A checkpoint after each records,
//! for every (namespace, name) of the pool, what a user sees of the model,
//! its Deployment and its ConfigMap, so that the differential compares the
//! two clusters over operations no scenario was written for.

use crate::cluster::Cluster;
use crate::harness::deployment_in;
use crate::observe::{busy, rollback_to, s, Edit};
use crate::operations::{random_spec, random_step, Key, Op, Pick, Rng, Step};
use crate::pool::*;
use crate::story::{text, written_fields, Seen, Story, MODEL};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// The soak's first CI seed (tests/soak/main.rs `CI_SEEDS`).
pub const SEED: u64 = 489_699_169;
/// How many user operations of the seed's sequence run.
const STEPS: usize = 24;
/// The bound on one quiet point, and on a model's deletion.
const SETTLE: Duration = Duration::from_secs(60);
/// How long nothing may change for the cluster to count as quiet.
const STILL: Duration = Duration::from_secs(2);
/// The soak's progress deadlines (3 to 6 s) are set to kubesim's 200 ms
/// warm-up. On the real plane a pod takes seconds to start while both
/// clusters run, and the deadline counts from the Progressing condition's
/// `lastUpdateTime`, which the API keeps to the second (upstream
/// `DeploymentTimedOut`): up to a second of it is gone before it starts.
/// Both clusters get each deadline this many times over.
const DEADLINE_FACTOR: i64 = 4;

/// The pool's namespaces besides the story's own, which stands for the first.
pub fn extra_namespaces() -> &'static [&'static str] {
    &NAMESPACES[1..]
}

/// One leg's run: the cluster, the story's namespace, the foreign
/// ConfigMaps it made.
struct Run<'a> {
    c: &'a dyn Cluster,
    base: String,
    foreign: BTreeSet<Key>,
}

/// The seed's first wave of models, then [`STEPS`] user operations, each
/// ending in a quiet point and a checkpoint.
pub fn seeded(st: &mut Story) {
    let mut run = Run {
        c: st.c,
        base: st.ns.clone(),
        foreign: BTreeSet::new(),
    };
    for k in keys() {
        run.create_deployment(k);
    }
    let mut rng = Rng(SEED);
    let mut wave = Vec::new();
    for k in keys() {
        if rng.pct(60) {
            let spec = paced(random_spec(&mut rng, k));
            wave.push(format!("{k}:{}", class(&run.create_model(k, &spec))));
        }
    }
    run.checkpoint(st, &format!("first wave {}", wave.join(" ")));
    let mut n = 0;
    while n < STEPS {
        let Step::Op(op) = random_step(&mut rng) else {
            continue;
        };
        n += 1;
        let out = class(&run.apply(&paced_op(op.clone())));
        run.checkpoint(st, &format!("#{n} {op} -> {out}"));
    }
}

/// A spec with its progress deadline [`DEADLINE_FACTOR`] times over.
fn paced(mut spec: Value) -> Value {
    if let Some(d) = spec.pointer_mut("/rolloutStrategy/progressDeadlineSeconds") {
        if let Some(s) = d.as_i64() {
            *d = json!(s * DEADLINE_FACTOR);
        }
    }
    spec
}

/// An operation with its spec [`paced`].
fn paced_op(op: Op) -> Op {
    match op {
        Op::CreateModel { m, spec } => Op::CreateModel {
            m,
            spec: paced(spec),
        },
        Op::RecreateModel { m, spec } => Op::RecreateModel {
            m,
            spec: paced(spec),
        },
        Op::ForeignThenCreate { m, spec } => Op::ForeignThenCreate {
            m,
            spec: paced(spec),
        },
        Op::PatchSpec { m, what, spec } => Op::PatchSpec {
            m,
            what,
            spec: paced(spec),
        },
        other => other,
    }
}

/// Every (namespace, name) of the pool.
fn keys() -> impl Iterator<Item = Key> {
    (0..NAMESPACES.len()).flat_map(|ns| (0..NAMES.len()).map(move |name| Key { ns, name }))
}

/// An outcome as a class: the servers word their refusals differently.
fn class(out: &str) -> String {
    match out.split_once(':') {
        Some(("refused", _)) => "refused".into(),
        Some(("skipped", why)) => format!("skipped:{why}"),
        _ if out.starts_with("gave up") => out.into(),
        _ => "ok".into(),
    }
}

impl Run<'_> {
    fn ns(&self, k: Key) -> String {
        match k.ns {
            0 => self.base.clone(),
            i => format!("{}-{}", self.base, NAMESPACES[i]),
        }
    }

    fn model(&self, k: Key) -> Option<Value> {
        self.c
            .object("openmed.ai", "openmedmodels", &self.ns(k), k.name())
    }

    fn live(&self, k: Key) -> Option<Value> {
        self.model(k)
            .filter(|m| m["metadata"]["deletionTimestamp"].is_null())
    }

    fn deployment(&self, k: Key) -> Option<Value> {
        self.c.object("apps", "deployments", &self.ns(k), k.name())
    }

    fn config_map(&self, k: Key) -> Option<Value> {
        self.c.object("", "configmaps", &self.ns(k), &k.cm())
    }

    fn outcome(r: Result<Value, String>) -> String {
        match r {
            Ok(_) => "ok".into(),
            Err(e) => format!("refused: {e}"),
        }
    }

    fn create_deployment(&self, k: Key) -> String {
        Self::outcome(self.c.create(deployment_in(&self.ns(k), k.name(), 2)))
    }

    fn create_model(&self, k: Key, spec: &Value) -> String {
        let obj = json!({
            "apiVersion": MODEL.0, "kind": MODEL.1,
            "metadata": {"name": k.name(), "namespace": self.ns(k)},
            "spec": spec,
        });
        Self::outcome(self.c.create(obj))
    }

    /// Deletes a model and waits (bounded) until it and the ConfigMap it
    /// owned are gone, so that the garbage collector's pace (upstream
    /// `attemptToDeleteItem`) is not what the next step meets.
    fn delete_model(&self, k: Key) -> String {
        let uid = self
            .model(k)
            .map(|m| s(&m["metadata"]["uid"]).to_string())
            .unwrap_or_default();
        if let Err(e) = self.c.delete(MODEL.0, MODEL.1, &self.ns(k), k.name()) {
            return format!("refused: {e}");
        }
        let owned = |cm: &Value| {
            cm["metadata"]["ownerReferences"]
                .as_array()
                .is_some_and(|rs| rs.iter().any(|r| r["uid"] == uid.as_str()))
        };
        let t = Instant::now();
        while t.elapsed() < SETTLE {
            if self.model(k).is_none() && !self.config_map(k).is_some_and(|cm| owned(&cm)) {
                return "ok".into();
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "{k} on {}: the model or its ConfigMap still there after {SETTLE:?}",
            self.c.name()
        )
    }

    fn patch_model(&self, k: Key, patch: &Value) -> String {
        if self.live(k).is_none() {
            return "skipped: no live model".into();
        }
        Self::outcome(
            self.c
                .merge_patch(MODEL.0, MODEL.1, &self.ns(k), k.name(), patch),
        )
    }

    fn annotate(&self, k: Key, value: Option<&str>) -> String {
        self.patch_model(
            k,
            &json!({"metadata": {"annotations": {ROLLBACK_TO: value}}}),
        )
    }

    fn apply(&mut self, op: &Op) -> String {
        match op {
            Op::CreateModel { m, spec } => match self.model(*m) {
                Some(_) => "skipped: exists".into(),
                None => self.create_model(*m, spec),
            },
            Op::RecreateModel { m, spec } => {
                if self.model(*m).is_some() {
                    self.delete_model(*m);
                }
                self.create_model(*m, spec)
            }
            Op::DeleteModel { m } => match self.model(*m) {
                Some(_) => self.delete_model(*m),
                None => "skipped: no model".into(),
            },
            Op::PatchSpec { m, spec, .. } => self.patch_model(*m, &json!({ "spec": spec })),
            Op::RollbackTo { m, pick } => self.rollback_to(*m, pick),
            Op::DeleteDeployment { d } => self.delete_deployment(*d),
            Op::CreateDeployment { d } => match self.deployment(*d) {
                Some(_) => "skipped: exists".into(),
                None => self.create_deployment(*d),
            },
            Op::RecreateDeployment { d } => {
                self.delete_deployment(*d);
                self.create_deployment(*d)
            }
            Op::ForeignConfigMap { m } => self.foreign_config_map(*m),
            Op::ForeignThenCreate { m, spec } => {
                if self.model(*m).is_some() {
                    self.delete_model(*m);
                }
                self.foreign_config_map(*m);
                self.create_model(*m, spec)
            }
            Op::RemoveForeignConfigMap { m } => {
                if !self.foreign.remove(m) {
                    return "skipped: no foreign ConfigMap".into();
                }
                self.c
                    .delete("v1", "ConfigMap", &self.ns(*m), &m.cm())
                    .map_or_else(|e| format!("refused: {e}"), |()| "ok".into())
            }
            other => self.edit(other),
        }
    }

    /// `openmed.ai/rollback-to` set to what `pick` names, or removed, as
    /// the soak's driver does.
    fn rollback_to(&self, k: Key, pick: &Pick) -> String {
        let Some(model) = self.live(k) else {
            return "skipped: no live model".into();
        };
        match pick {
            Pick::Retained(n) => {
                let st = &model["status"];
                let retained: Vec<&str> =
                    [&st["lastSuccessfulSpec"], &st["previousSuccessfulSpec"]]
                        .into_iter()
                        .filter_map(|sp| sp["version"].as_str())
                        .collect();
                match retained.len() {
                    0 => "skipped: nothing retained yet".into(),
                    l => self.annotate(k, Some(retained[if n % 4 == 0 { 0 } else { l - 1 }])),
                }
            }
            Pick::NotRetained => self.annotate(k, Some(NEVER_SET)),
            Pick::Garbage => self.annotate(k, Some("no such version at all!")),
            Pick::Blank => self.annotate(k, Some("   ")),
            Pick::Remove => self.annotate(k, None),
            Pick::MakePermanent { annotation_first } => {
                let Some(t) = rollback_to(&model) else {
                    return "skipped: no rollback-to".into();
                };
                let version = json!({"spec": {"version": t}});
                let mut outs = Vec::new();
                for annotation in [*annotation_first, !*annotation_first] {
                    outs.push(match annotation {
                        true => self.annotate(k, None),
                        false => self.patch_model(k, &version),
                    });
                    std::thread::sleep(Duration::from_millis(200));
                }
                outs.into_iter()
                    .find(|o| o != "ok")
                    .unwrap_or_else(|| "ok".into())
            }
        }
    }

    fn delete_deployment(&self, k: Key) -> String {
        if self.deployment(k).is_none() {
            return "skipped: no Deployment".into();
        }
        self.c
            .delete("apps/v1", "Deployment", &self.ns(k), k.name())
            .map_or_else(|e| format!("refused: {e}"), |()| "ok".into())
    }

    /// A ConfigMap of someone else's under the model's manifest name.
    fn foreign_config_map(&mut self, k: Key) -> String {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": k.cm(), "namespace": self.ns(k), "labels": {"team": "someone-else"}},
            "data": {"owner": "someone else"}});
        let out = Self::outcome(self.c.create(cm));
        if out == "ok" {
            self.foreign.insert(k);
        }
        out
    }
}

/// The hand edits: read, change, write back with the resourceVersion read
/// as a precondition (as `kubectl edit` does), again on a conflict.
impl Run<'_> {
    fn edit(&self, op: &Op) -> String {
        match op {
            Op::EditEnv {
                d,
                level,
                toggle_extra,
            } => self.edit_template(*d, |t| {
                let Some(env) = t["spec"]["containers"]
                    .as_array_mut()
                    .and_then(|cs| cs.iter_mut().find(|c| c["name"] == CONTAINER))
                    .and_then(|c| c["env"].as_array_mut())
                else {
                    return;
                };
                for e in env.iter_mut().filter(|e| e["name"] == "LOG_LEVEL") {
                    e["value"] = json!(level);
                }
                if *toggle_extra && env.iter().any(|e| e["name"] == "EXTRA_FLAG") {
                    env.retain(|e| e["name"] != "EXTRA_FLAG");
                } else if *toggle_extra {
                    env.push(json!({"name": "EXTRA_FLAG", "value": "on"}));
                }
            }),
            Op::EditSidecar { d, tag } => self.edit_template(*d, |t| {
                if let Some(c) = t["spec"]["containers"]
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
            Op::EditReplicas { d, replicas } => match self.deployment(*d) {
                None => "skipped: no Deployment".into(),
                Some(_) => Self::outcome(self.c.merge_patch(
                    "apps/v1",
                    "Deployment",
                    &self.ns(*d),
                    d.name(),
                    &json!({"spec": {"replicas": replicas}}),
                )),
            },
            Op::EditAnnotation { d, template, n } => self.edit_deployment(*d, |obj| {
                let at = match template {
                    true => &mut obj["spec"]["template"]["metadata"]["annotations"],
                    false => &mut obj["metadata"]["annotations"],
                };
                if !at.is_object() {
                    *at = json!({});
                }
                at["team.example/note"] = json!(format!("edit-{n}"));
            }),
            Op::GarbleHash { d } => match self.deployment(*d) {
                None => "skipped: no Deployment".into(),
                Some(dep) if dep["spec"]["template"]["metadata"]["annotations"][HASH].is_null() => {
                    "skipped: no hash annotation".into()
                }
                Some(_) => self.edit_template(*d, |t| {
                    t["metadata"]["annotations"][HASH] =
                        json!(format!("sha256:{}", "0".repeat(64)));
                }),
            },
            Op::EditConfigMap { m, kind } => self.edit_config_map(*m, *kind),
            other => format!("skipped: not an edit: {other}"),
        }
    }

    fn edit_template(&self, d: Key, edit: impl Fn(&mut Value)) -> String {
        self.edit_deployment(d, |obj| edit(&mut obj["spec"]["template"]))
    }

    fn edit_deployment(&self, d: Key, edit: impl Fn(&mut Value)) -> String {
        let ns = self.ns(d);
        let read = || self.deployment(d);
        let patch = |body: &Value| {
            self.c
                .merge_patch("apps/v1", "Deployment", &ns, d.name(), body)
        };
        match crate::observe::edit_deployment(read, patch, edit) {
            Edit::Done(_) => "ok".into(),
            Edit::Absent => "skipped: no Deployment".into(),
            Edit::Refused(e) => format!("refused: {e}"),
            Edit::GaveUp => "gave up after 8 conflicts".into(),
        }
    }

    /// The operator's ConfigMap edited by hand: its preload, its manifest,
    /// or a key of its own.
    fn edit_config_map(&self, m: Key, kind: u64) -> String {
        let data = match crate::observe::config_map_edit(self.config_map(m).as_ref(), kind) {
            Ok(data) => data,
            Err(skipped) => return skipped.into(),
        };
        Self::outcome(self.c.merge_patch(
            "v1",
            "ConfigMap",
            &self.ns(m),
            &m.cm(),
            &json!({ "data": data }),
        ))
    }
}

/// Quiet points and checkpoints.
impl Run<'_> {
    /// Waits for a quiet point, then records every key.
    fn checkpoint(&self, st: &mut Story, step: &str) {
        self.wait_quiet(step);
        let mut seen = Seen::new();
        for k in keys() {
            for (f, v) in self.seen(k) {
                seen.insert(format!("{k} {f}"), v);
            }
        }
        eprintln!("seeded on {}: {step}", self.c.name());
        st.checkpoints.push((step.to_string(), seen));
    }

    /// What a user sees of key `k`: the model (Story's fields), the
    /// Deployment's fields the operator writes, whose ConfigMap it is.
    fn seen(&self, k: Key) -> Seen {
        let story = Story {
            c: self.c,
            ns: self.ns(k),
            checkpoints: Vec::new(),
        };
        let mut seen = match self.model(k) {
            None => Seen::from([("model".into(), "absent".into())]),
            Some(m) => {
                let target = m["spec"]["targetRef"]["name"].as_str().unwrap_or(k.name());
                let mut seen = story.seen(k.name(), target);
                seen.insert("model target".into(), target.into());
                seen
            }
        };
        if let Some(d) = self.deployment(k) {
            for (f, v) in written_fields(&d) {
                seen.insert(format!("own {f}"), v);
            }
        }
        let cm = match self.config_map(k) {
            None => "absent".into(),
            Some(cm) if cm["metadata"]["labels"][MANAGED_BY] == "openmed-operator" => {
                format!("the operator's, preload {}", text(&cm["data"][PRELOAD]))
            }
            Some(cm) => format!("foreign, labels {}", cm["metadata"]["labels"]),
        };
        seen.insert("configmap".into(), cm);
        seen
    }

    /// Waits until no model is busy and nothing changed for [`STILL`]; a
    /// cluster that does not settle within [`SETTLE`] fails the test.
    fn wait_quiet(&self, step: &str) {
        let t = Instant::now();
        let (mut last, mut since) = (String::new(), Instant::now());
        loop {
            let (print, busy) = self.fingerprint();
            if print != last {
                (last, since) = (print, Instant::now());
            } else if busy.is_empty() && since.elapsed() >= STILL {
                return;
            }
            assert!(
                t.elapsed() < SETTLE,
                "{step}: {} not quiet within {SETTLE:?}; busy: {busy:?}",
                self.c.name()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Everything a checkpoint reads, as one string, and the busy models.
    fn fingerprint(&self) -> (String, Vec<String>) {
        let mut print = String::new();
        let mut busy_models = Vec::new();
        for (i, pool_ns) in NAMESPACES.iter().enumerate() {
            let ns = self.ns(Key { ns: i, name: 0 });
            for m in self.c.objects("openmed.ai", "openmedmodels", Some(&ns)) {
                if let Some(why) = busy(&m) {
                    busy_models.push(format!("{}/{}: {why}", pool_ns, s(&m["metadata"]["name"])));
                }
                print += &format!(
                    "{}{}{}",
                    m["metadata"]["name"], m["metadata"]["generation"], m["status"]
                );
            }
            for d in self.c.objects("apps", "deployments", Some(&ns)) {
                print += &format!("{}{}", d["metadata"], d["spec"]);
            }
            for cm in self.c.objects("", "configmaps", Some(&ns)) {
                print += &format!("{}{}", cm["metadata"]["name"], cm["data"]);
            }
            for e in self.c.objects("", "events", Some(&ns)) {
                print += &format!("{}{}", e["reason"], e["count"]);
            }
        }
        (print, busy_models)
    }
}
