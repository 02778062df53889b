//! One seed: the simulator and the operator, the steps applied (the soak's
//! own writes through kubesim's direct methods), quiet points waited for
//! and judged, and the seed's summary and failure report.

use crate::harness::*;
use crate::invariants::*;
use crate::observe::*;
use crate::operations::*;
use crate::{CONTAINER, HASH, NAMES, NAMESPACES, NEVER_SET, ROLLBACK_TO};
use kubesim::faults::RequestRecord;
use kubesim::Sim;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::time::{Duration, Instant};

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
        let sim = &self.sim;
        let read = || sim.object("apps", "deployments", d.ns(), d.name());
        let patch = |body: &Value| sim.merge_patch("apps/v1", "Deployment", d.ns(), d.name(), body);
        match crate::observe::edit_deployment(read, patch, edit) {
            Edit::Done(after) => {
                if let Some(rec) = self.deploys.get_mut(&d) {
                    rec.view = user_view(&after);
                }
                format!("edited (generation {})", after["metadata"]["generation"])
            }
            Edit::Absent => "skipped: no Deployment".into(),
            Edit::Refused(e) => format!("refused: {e}"),
            Edit::GaveUp => "gave up after 8 conflicts".into(),
        }
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

    /// A patch to a RollingUpdate that cannot progress is refused by the
    /// CRD's rule (422), and the stored spec stays as it was.
    fn expect_refused_if_stalled(&mut self, m: Key, before: &Value, patch: &Value, out: &str) {
        if valid(&kubesim::apiserver::patch::merge_patch(before, patch)) {
            return;
        }
        let after = self.live(m).map(|o| o["spec"].clone());
        let refused = out.starts_with("refused") && out.contains("cannot make progress");
        if !refused || after.as_ref().is_some_and(|a| a != before) {
            let msg = format!("{m:?}: a stalled strategy was not refused: {out}");
            self.violate(INV8, msg);
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
            Op::RecreateModel { m, spec } => self.recreate_model(*m, spec),
            Op::DeleteModel { m } => {
                if self.model(*m).is_none() {
                    return "skipped: no model".into();
                }
                self.delete_model(*m)
            }
            Op::PatchSpec { m, what, spec } => {
                let before = self.live(*m).map(|o| o["spec"].clone());
                let out = self.patch_model(*m, &json!({ "spec": spec }));
                if let Some(before) = before {
                    self.expect_refused_if_stalled(*m, &before, spec, &out);
                }
                if spec["targetRef"]["name"].is_string() {
                    self.touch(m.ns, spec, *m);
                }
                format!("{what}: {out}")
            }
            Op::RollbackTo { m, pick } => self.rollback_to(*m, pick),
            Op::DeleteDeployment { d } => self.delete_deployment(*d),
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
            Op::ForeignConfigMap { m } => self.create_foreign_config_map(*m),
            Op::ForeignThenCreate { m, spec } => self.foreign_then_create(*m, spec),
            Op::RemoveForeignConfigMap { m } => self.remove_foreign_config_map(*m),
            Op::EditEnv {
                d,
                level,
                toggle_extra,
            } => self.edit_env(*d, level, *toggle_extra),
            Op::EditSidecar { d, tag } => self.edit_sidecar(*d, *tag),
            Op::EditReplicas { d, replicas } => self.edit_replicas(*d, *replicas),
            Op::EditAnnotation { d, template, n } => self.edit_annotation(*d, *template, *n),
            Op::GarbleHash { d } => self.garble_hash(*d),
            Op::EditConfigMap { m, kind } => self.edit_config_map(*m, *kind),
        }
    }

    fn recreate_model(&mut self, m: Key, spec: &Value) -> String {
        let mut out = String::new();
        if self.model(m).is_some() {
            out = format!("deleted ({}), ", self.delete_model(m));
        }
        out + &self.create_model(m, spec)
    }

    /// `openmed.ai/rollback-to`: set to what `pick` names, or removed.
    fn rollback_to(&mut self, m: Key, pick: &Pick) -> String {
        let Some(model) = self.live(m) else {
            return "skipped: no live model".into();
        };
        match pick {
            Pick::Retained(k) => self.rollback_to_retained(m, &model, *k),
            Pick::NotRetained => self.annotate(m, Some(NEVER_SET)),
            Pick::Garbage => self.annotate(m, Some("no such version at all!")),
            Pick::Blank => self.annotate(m, Some("   ")),
            Pick::Remove => self.annotate(m, None),
            Pick::MakePermanent { annotation_first } => {
                self.make_rollback_permanent(m, &model, *annotation_first)
            }
        }
    }

    /// A retained version: the previous one mostly.
    fn rollback_to_retained(&mut self, m: Key, model: &Value, k: u64) -> String {
        let st = &model["status"];
        let retained: Vec<String> = [&st["lastSuccessfulSpec"], &st["previousSuccessfulSpec"]]
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
        format!("to {t}: {}", self.annotate(m, Some(&t)))
    }

    /// spec.version set to the rollback-to version and the annotation
    /// removed, in either order.
    fn make_rollback_permanent(&mut self, m: Key, model: &Value, annotation_first: bool) -> String {
        let Some(t) = rollback_to(model) else {
            return "skipped: no rollback-to".into();
        };
        let version = json!({"spec": {"version": t}});
        let (a, b) = if annotation_first {
            let a = self.annotate(m, None);
            std::thread::sleep(Duration::from_millis(200));
            (a, self.patch_model(m, &version))
        } else {
            let a = self.patch_model(m, &version);
            std::thread::sleep(Duration::from_millis(200));
            (a, self.annotate(m, None))
        };
        format!("version {t}: {a}, {b}")
    }

    fn delete_deployment(&mut self, d: Key) -> String {
        if self.deployment(d).is_none() {
            return "skipped: no Deployment".into();
        }
        self.deploys.remove(&d);
        match self.sim.delete("apps/v1", "Deployment", d.ns(), d.name()) {
            Ok(()) => "deleted".into(),
            Err(e) => format!("refused: {e}"),
        }
    }

    /// A ConfigMap of someone else's under the model's manifest name.
    fn create_foreign_config_map(&mut self, m: Key) -> String {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": m.cm(), "namespace": m.ns(), "labels": {"team": "someone-else"}},
            "data": {"owner": "someone else"}});
        match self.sim.create(cm) {
            Ok(o) => {
                let rv = s(&o["metadata"]["resourceVersion"]).to_string();
                self.foreign.insert(m, (rv, self.sim.clock_ms()));
                "created".into()
            }
            Err(e) => format!("refused: {e}"),
        }
    }

    fn foreign_then_create(&mut self, m: Key, spec: &Value) -> String {
        let mut out = String::new();
        if self.model(m).is_some() {
            out = format!("deleted ({}), ", self.delete_model(m));
        }
        out += &format!("foreign ConfigMap {}, ", self.create_foreign_config_map(m));
        out + &self.create_model(m, spec)
    }

    fn remove_foreign_config_map(&mut self, m: Key) -> String {
        if self.foreign.remove(&m).is_none() {
            return "skipped: no foreign ConfigMap".into();
        }
        match self.sim.delete("v1", "ConfigMap", m.ns(), &m.cm()) {
            Ok(()) => "deleted".into(),
            Err(e) => format!("refused: {e}"),
        }
    }

    /// The main container's LOG_LEVEL set, EXTRA_FLAG added or removed.
    fn edit_env(&mut self, d: Key, level: &str, toggle_extra: bool) -> String {
        self.edit_deployment(d, |obj| {
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
            if toggle_extra {
                if env.iter().any(|e| e["name"] == "EXTRA_FLAG") {
                    env.retain(|e| e["name"] != "EXTRA_FLAG");
                } else {
                    env.push(json!({"name": "EXTRA_FLAG", "value": "on"}));
                }
            }
        })
    }

    fn edit_sidecar(&mut self, d: Key, tag: u64) -> String {
        self.edit_deployment(d, |obj| {
            if let Some(c) = obj["spec"]["template"]["spec"]["containers"]
                .as_array_mut()
                .and_then(|cs| cs.iter_mut().find(|c| c["name"] == "proxy"))
            {
                c["image"] = json!(format!("envoy:1.{}", 28 + tag % 4));
                if tag % 2 == 0 {
                    c["env"] = json!([{"name": "PROXY_MODE", "value": format!("m{}", tag % 7)}]);
                }
            }
        })
    }

    fn edit_replicas(&mut self, d: Key, replicas: i64) -> String {
        if self.deployment(d).is_none() {
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

    fn edit_annotation(&mut self, d: Key, template: bool, n: u64) -> String {
        self.edit_deployment(d, move |obj| {
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

    /// The manifest digest on the pod template replaced by a wrong one.
    fn garble_hash(&mut self, d: Key) -> String {
        let Some(dep) = self.deployment(d) else {
            return "skipped: no Deployment".into();
        };
        if dep["spec"]["template"]["metadata"]["annotations"][HASH].is_null() {
            return "skipped: no hash annotation".into();
        }
        self.edit_deployment(d, |obj| {
            obj["spec"]["template"]["metadata"]["annotations"][HASH] =
                json!("sha256:0000000000000000000000000000000000000000000000000000000000000000");
        })
    }

    /// The operator's ConfigMap edited by hand: its preload, its manifest,
    /// or a key of its own.
    fn edit_config_map(&mut self, m: Key, kind: u64) -> String {
        let cm = self.sim.object("", "configmaps", m.ns(), &m.cm());
        let data = match config_map_edit(cm.as_ref(), kind) {
            Ok(data) => data,
            Err(skipped) => return skipped.into(),
        };
        match self
            .sim
            .merge_patch("v1", "ConfigMap", m.ns(), &m.cm(), &json!({ "data": data }))
        {
            Ok(_) => format!("data {data}"),
            Err(e) => format!("refused: {e}"),
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
            let busy_now = busy_models(&models);
            let fingerprint = status_fingerprint(&models);
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
                return Err(self.no_quiet_point(t, &models, &busy_now, &waiting_for));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Why no quiet point came: the invariant it breaks (liveness while a
    /// watch is not back, 6 while nothing is busy, 3 while only deletions
    /// are), the busy models, their Deployments and the last writes.
    fn no_quiet_point(
        &self,
        t: Instant,
        models: &[Value],
        busy_now: &[String],
        waiting_for: &[String],
    ) -> Violation {
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
        Violation {
            inv,
            msg: format!(
                "no quiet point within {:.1?}; busy: {busy_now:?}; their Deployments: {targets:#?}; watches not back since the last disconnect at {} ms: {waiting_for:?}; last writes: {recent:?}",
                t.elapsed(),
                self.disconnect_ms
            ),
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
            self.writes_during_quiet(&requests, t0, w1 - w0);
        }
        self.judge(&snap, &before, &requests);
        self.check_log();
        for m in &snap.models {
            if m["status"]["phase"] == "Ready" {
                self.seen_ready.insert(s(&m["metadata"]["uid"]).to_string());
            }
        }
        self.note_states(&snap);
        self.violations.len() == broken_before
    }

    /// Invariant 6 broken: `n` writes since `t0` (ms), in a window of quiet.
    fn writes_during_quiet(&mut self, requests: &[RequestRecord], t0: u64, n: u64) {
        let during: Vec<String> = requests
            .iter()
            .filter(|r| r.at_ms >= t0 && is_write(r))
            .map(describe)
            .collect();
        self.violate(
            INV6,
            format!(
                "{n} writes during {WINDOW:?} of quiet ({RESYNC_SECONDS} s resync): {during:#?}"
            ),
        );
    }

    /// Every invariant judged on `snap` (and `before`, the start of the
    /// window), each violation recorded.
    fn judge(&mut self, snap: &Snap, before: &Snap, requests: &[RequestRecord]) {
        let mut ctx = Ctx {
            snap,
            before,
            incarnations: &self.incarnations,
            deploys: &self.deploys,
            touched: &self.touched,
            foreign: &self.foreign,
            seen_ready: &self.seen_ready,
            requests,
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
    }

    /// Each model's phase and first condition, for the log.
    fn note_states(&mut self, snap: &Snap) {
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

/// The models still busy (being deleted, rolling out, behind their
/// generation), with why.
fn busy_models(models: &[Value]) -> Vec<String> {
    models
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
        .collect()
}

/// What a quiet point must not see change: every model's uid, generation
/// and status.
fn status_fingerprint(models: &[Value]) -> String {
    serde_json::to_string(
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
    .unwrap_or_default()
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic".into())
}

/// One seed: its summary line and, if it broke something, the report.
pub fn soak_one(seed: u64, secs: u64, keep_going: bool) -> (String, Option<String>) {
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
