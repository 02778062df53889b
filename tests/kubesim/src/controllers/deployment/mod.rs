//! The Deployment controller, ReplicaSet controller and kubelet, computed as
//! the real control plane computes them, on pods that are not API objects.
//!
//! Each function names the upstream function it mirrors (kubernetes
//! `pkg/controller/deployment/{sync,rolling,recreate,progress}.go` and
//! `pkg/controller/deployment/util/deployment_util.go`); the tests replay the
//! upstream tables (`TestNewRSNewReplicas`, `TestResolveFenceposts`,
//! `TestDeploymentComplete`, `TestScale`, ...). What differs is listed in the
//! README: pods start and stop at once, and one `sync` runs until nothing
//! changes instead of waiting for informer events.

use crate::apiserver::time::{parse_rfc3339, rfc3339};
use serde_json::{json, Value};
use std::time::{Duration, Instant, SystemTime};

mod objects;
mod progress;
mod replicas;
pub use objects::*;
pub use progress::*;
pub use replicas::*;

pub const REVISION: &str = "deployment.kubernetes.io/revision";

/// The parts of a Deployment's spec the controller reads.
#[derive(Debug, Clone, PartialEq)]
pub struct Spec {
    pub replicas: i64,
    pub recreate: bool,
    pub max_surge: Value,
    pub max_unavailable: Value,
    pub paused: bool,
    pub min_ready: Duration,
    /// None: no progress deadline (`HasProgressDeadline` false).
    pub progress_deadline: Option<i64>,
    pub history_limit: i64,
    pub generation: i64,
}

impl Spec {
    /// Read with the apps/v1 defaults (`SetDefaults_Deployment`).
    pub fn from_deployment(d: &Value) -> Spec {
        let s = &d["spec"];
        let ru = &s["strategy"]["rollingUpdate"];
        Spec {
            replicas: s["replicas"].as_i64().unwrap_or(1).max(0),
            recreate: s["strategy"]["type"] == "Recreate",
            max_surge: ru.get("maxSurge").cloned().unwrap_or(json!("25%")),
            max_unavailable: ru.get("maxUnavailable").cloned().unwrap_or(json!("25%")),
            paused: s["paused"].as_bool().unwrap_or(false),
            min_ready: Duration::from_secs(s["minReadySeconds"].as_u64().unwrap_or(0)),
            progress_deadline: match s.get("progressDeadlineSeconds") {
                None | Some(Value::Null) => Some(600),
                Some(v) => v.as_i64().filter(|n| *n < i32::MAX as i64),
            },
            history_limit: s["revisionHistoryLimit"].as_i64().unwrap_or(10),
            generation: d["metadata"]["generation"].as_i64().unwrap_or(0),
        }
    }

    /// `MaxUnavailable`: 0 for Recreate and for zero replicas, never more than replicas.
    pub fn max_unavailable(&self) -> i64 {
        if self.recreate || self.replicas == 0 {
            return 0;
        }
        let (_, unavailable) =
            resolve_fenceposts(&self.max_surge, &self.max_unavailable, self.replicas);
        unavailable.min(self.replicas)
    }

    /// `MaxSurge`: 0 for Recreate.
    pub fn max_surge(&self) -> i64 {
        if self.recreate {
            return 0;
        }
        resolve_fenceposts(&self.max_surge, &self.max_unavailable, self.replicas).0
    }
}

/// The controller's memory of one Deployment: its ReplicaSets.
#[derive(Debug, Default)]
pub struct State {
    /// Every ReplicaSet the Deployment owns, in creation order.
    pub sets: Vec<ReplicaSet>,
    seq: u64,
}

/// What one sync produced: the status, and the revision for the
/// Deployment's annotation.
pub struct Synced {
    pub status: Value,
    pub revision: Option<i64>,
}

/// One call's inputs.
pub struct Ctx<'a> {
    pub deployment: &'a Value,
    pub spec: Spec,
    pub name: String,
    pub hash: String,
    pub now: Instant,
    pub wall: SystemTime,
    pub outcome: &'a dyn Fn(&Value) -> PodOutcome,
}

impl State {
    /// The next instant after `now` a pod of it becomes ready, or available
    /// (`podutil.IsPodAvailable`): until then a sync that wrote nothing
    /// would write nothing again. Upstream, the pod's readiness event and
    /// `enqueueAfter` for minReadySeconds wake `syncDeployment` then.
    pub fn next_change(&self, now: Instant, min_ready: Duration) -> Option<Instant> {
        let ready = self
            .sets
            .iter()
            .flat_map(|r| &r.pods)
            .filter_map(|p| p.ready_at);
        let available = |t: Instant| t + min_ready + Duration::from_millis(1);
        ready
            .flat_map(|t| [t, available(t)])
            .filter(|&t| t > now)
            .min()
    }

    /// Forget the sets and pods named (deleted through the API): the next
    /// sync makes them again, as the controllers replace what is deleted
    /// (`ReplicaSetController.manageReplicas`, `getNewReplicaSet`).
    /// Returns whether anything was forgotten.
    pub fn forget(&mut self, sets: &dyn Fn(&str) -> bool, pods: &dyn Fn(&str) -> bool) -> bool {
        let before: usize = self.sets.iter().map(|r| 1 + r.pods.len()).sum();
        self.sets.retain(|r| !sets(&r.name));
        for rs in &mut self.sets {
            rs.pods.retain(|p| !pods(&p.name));
        }
        before != self.sets.iter().map(|r| 1 + r.pods.len()).sum::<usize>()
    }

    fn new_index(&self, hash: &str) -> Option<usize> {
        self.sets.iter().position(|r| r.hash == hash)
    }

    /// `syncDeployment`, run until a pass changes nothing, then status.
    pub fn sync(&mut self, ctx: &Ctx) -> Synced {
        let stored = ctx
            .deployment
            .get("status")
            .filter(|s| s.is_object())
            .unwrap_or(&Value::Null);
        let mut status = if stored.is_null() {
            json!({})
        } else {
            stored.clone()
        };
        check_paused_conditions(&ctx.spec, &mut status, ctx.wall);
        // Each round is one upstream sync, ending in the status it writes
        // (which the next round reads as the Deployment's status), then the
        // ReplicaSet controller and kubelet catch up.
        for _ in 0..20 {
            let before = status.clone();
            let (scaled, rollout) = self.sync_once(ctx, &mut status);
            let new = self.new_index(&ctx.hash);
            status = if rollout {
                self.sync_rollout_status(ctx, new, &status)
            } else {
                self.calculate_status(ctx, new, &status)
            };
            if ctx.spec.paused || (rollout && !scaled && deployment_complete(&ctx.spec, &before)) {
                self.cleanup(ctx);
            }
            let pods = self
                .sets
                .iter_mut()
                .fold(false, |c, rs| rs.reconcile_pods(ctx.now, ctx.outcome) | c);
            if !scaled && !pods {
                break;
            }
        }
        let new = self.new_index(&ctx.hash);
        let revision = new.and_then(|i| self.sets.get(i)).map(|r| r.revision);
        Synced {
            status: prune_zero_counts(status),
            revision,
        }
    }

    /// One pass of `syncDeployment`: scaling (paused, or a scaling event),
    /// else the strategy's rollout. Returns whether any ReplicaSet was
    /// resized or created, and whether it was a rollout (which ends in
    /// `syncRolloutStatus`; scaling ends in `syncDeploymentStatus`).
    fn sync_once(&mut self, ctx: &Ctx, status: &mut Value) -> (bool, bool) {
        if ctx.spec.paused || self.is_scaling_event(&ctx.spec) {
            let new = self.new_index(&ctx.hash);
            return (self.scale(ctx, new, status), false);
        }
        let scaled = if ctx.spec.recreate {
            self.rollout_recreate(ctx, status)
        } else {
            self.rollout_rolling(ctx, status)
        };
        (scaled, true)
    }

    /// `isScalingEvent`: an active set was sized for other replicas.
    fn is_scaling_event(&self, spec: &Spec) -> bool {
        self.sets
            .iter()
            .filter(|r| r.replicas > 0)
            .any(|r| r.desired_annotation.is_some_and(|d| d != spec.replicas))
    }

    fn set_replicas(&mut self, i: usize, n: i64, spec: &Spec) -> bool {
        let rs = &mut self.sets[i];
        let changed = rs.replicas != n;
        rs.replicas = n;
        rs.desired_annotation = Some(spec.replicas);
        rs.max_annotation = Some(spec.replicas + spec.max_surge());
        changed
    }

    /// `getNewReplicaSet`: find the set of this template or create it (with
    /// `NewRSNewReplicas` replicas); it takes the next revision.
    fn ensure_new(&mut self, ctx: &Ctx, status: &mut Value) -> usize {
        let max_old = self
            .sets
            .iter()
            .filter(|r| r.hash != ctx.hash)
            .map(|r| r.revision)
            .max();
        let next = max_old.unwrap_or(0) + 1;
        if let Some(i) = self.new_index(&ctx.hash) {
            if self.sets[i].revision < next {
                self.sets[i].revision = next;
            }
            if ctx.spec.progress_deadline.is_some() && condition(status, "Progressing").is_none() {
                let msg = format!("Found new replica set {:?}", self.sets[i].name);
                set_condition(
                    status,
                    "Progressing",
                    "True",
                    "FoundNewReplicaSet",
                    &msg,
                    ctx.wall,
                );
            }
            return i;
        }
        let all: Vec<&ReplicaSet> = self.sets.iter().collect();
        let replicas = new_rs_new_replicas(&ctx.spec, &all, 0);
        self.seq += 1;
        let name = format!("{}-{}", ctx.name, ctx.hash);
        let template = &ctx.deployment["spec"]["template"];
        self.sets.push(ReplicaSet {
            name: name.clone(),
            hash: ctx.hash.clone(),
            replicas,
            revision: next,
            desired_annotation: Some(ctx.spec.replicas),
            max_annotation: Some(ctx.spec.replicas + ctx.spec.max_surge()),
            created: self.seq,
            pods: Vec::new(),
            template: template.clone(),
        });
        if ctx.spec.progress_deadline.is_some() {
            let msg = format!("Created new replica set {name:?}");
            set_condition(
                status,
                "Progressing",
                "True",
                "NewReplicaSetCreated",
                &msg,
                ctx.wall,
            );
        }
        self.sets.len() - 1
    }

    /// `rolloutRolling`: grow the new set, else shrink the old ones.
    fn rollout_rolling(&mut self, ctx: &Ctx, status: &mut Value) -> bool {
        let before = self.sets.len();
        let new = self.ensure_new(ctx, status);
        let created = self.sets.len() != before;
        if self.reconcile_new_replica_set(ctx, new) || created {
            return true;
        }
        self.reconcile_old_replica_sets(ctx, new)
    }

    /// `reconcileNewReplicaSet`.
    fn reconcile_new_replica_set(&mut self, ctx: &Ctx, new: usize) -> bool {
        let current = self.sets[new].replicas;
        if current == ctx.spec.replicas {
            return false;
        }
        if current > ctx.spec.replicas {
            return self.set_replicas(new, ctx.spec.replicas, &ctx.spec);
        }
        let all: Vec<&ReplicaSet> = self.sets.iter().collect();
        let n = new_rs_new_replicas(&ctx.spec, &all, current);
        self.set_replicas(new, n, &ctx.spec)
    }

    /// `reconcileOldReplicaSets`: first the unhealthy old pods, then healthy
    /// ones as far as availability allows.
    fn reconcile_old_replica_sets(&mut self, ctx: &Ctx, new: usize) -> bool {
        let old: Vec<usize> = (0..self.sets.len()).filter(|i| *i != new).collect();
        let old_count: i64 = old.iter().map(|i| self.sets[*i].replicas).sum();
        if old_count == 0 {
            return false;
        }
        let all_count: i64 = self.sets.iter().map(|r| r.replicas).sum();
        let min_available = ctx.spec.replicas - ctx.spec.max_unavailable();
        let new_rs = &self.sets[new];
        let new_unavailable =
            new_rs.replicas - new_rs.status(ctx.now, ctx.spec.min_ready).available;
        let max_scaled_down = all_count - min_available - new_unavailable;
        if max_scaled_down <= 0 {
            return false;
        }
        let cleaned = self.cleanup_unhealthy_replicas(ctx, &old, max_scaled_down);
        let scaled = self.scale_down_old_for_rolling_update(ctx, &old);
        cleaned + scaled > 0
    }

    /// `cleanupUnhealthyReplicas`: old sets lose their unavailable pods,
    /// oldest set first, up to `max_cleanup`.
    fn cleanup_unhealthy_replicas(&mut self, ctx: &Ctx, old: &[usize], max_cleanup: i64) -> i64 {
        let mut total = 0;
        for &i in &self.sorted_by_creation(old) {
            if total >= max_cleanup {
                break;
            }
            let rs = &self.sets[i];
            let available = rs.status(ctx.now, ctx.spec.min_ready).available;
            if rs.replicas == 0 || rs.replicas == available {
                continue;
            }
            let down = (max_cleanup - total).min(rs.replicas - available);
            let target = rs.replicas - down;
            self.set_replicas(i, target, &ctx.spec);
            total += down;
        }
        total
    }

    /// `scaleDownOldReplicaSetsForRollingUpdate`: available pods above the
    /// minimum go, oldest set first.
    fn scale_down_old_for_rolling_update(&mut self, ctx: &Ctx, old: &[usize]) -> i64 {
        let min_available = ctx.spec.replicas - ctx.spec.max_unavailable();
        let available: i64 = self
            .sets
            .iter()
            .map(|r| r.status(ctx.now, ctx.spec.min_ready).available)
            .sum();
        if available <= min_available {
            return 0;
        }
        let to_scale = available - min_available;
        let mut done = 0;
        for &i in &self.sorted_by_creation(old) {
            if done >= to_scale {
                break;
            }
            let replicas = self.sets[i].replicas;
            if replicas == 0 {
                continue;
            }
            let down = replicas.min(to_scale - done);
            self.set_replicas(i, replicas - down, &ctx.spec);
            done += down;
        }
        done
    }

    fn sorted_by_creation(&self, idx: &[usize]) -> Vec<usize> {
        let mut v = idx.to_vec();
        v.sort_by_key(|i| self.sets[*i].created);
        v
    }

    /// `rolloutRecreate`: every old pod gone before the new set exists.
    fn rollout_recreate(&mut self, ctx: &Ctx, status: &mut Value) -> bool {
        let old: Vec<usize> = (0..self.sets.len())
            .filter(|i| self.sets[*i].hash != ctx.hash)
            .collect();
        let mut scaled = false;
        for &i in &old {
            if self.sets[i].replicas != 0 {
                scaled |= self.set_replicas(i, 0, &ctx.spec);
            }
        }
        if scaled {
            return true;
        }
        let running = old.iter().any(|&i| !self.sets[i].pods.is_empty());
        if running {
            return false;
        }
        let before = self.sets.len();
        let new = self.ensure_new(ctx, status);
        let created = self.sets.len() != before;
        self.set_replicas(new, ctx.spec.replicas, &ctx.spec) || created
    }

    /// `scale` (sync.go): a resize goes to the one active set, or is spread
    /// over the active sets in proportion to their size.
    fn scale(&mut self, ctx: &Ctx, new: Option<usize>, status: &Value) -> bool {
        let spec = &ctx.spec;
        let active: Vec<usize> = (0..self.sets.len())
            .filter(|i| self.sets[*i].replicas > 0)
            .collect();
        if active.len() <= 1 {
            let target = active.first().copied().or(new).or_else(|| self.latest());
            return match target {
                Some(i) if self.sets[i].replicas != spec.replicas => {
                    self.set_replicas(i, spec.replicas, spec)
                }
                _ => false,
            };
        }
        if let Some(n) = new.filter(|&n| self.saturated(ctx, n)) {
            let mut changed = false;
            for i in active.into_iter().filter(|i| *i != n) {
                changed |= self.set_replicas(i, 0, spec);
            }
            return changed;
        }
        if spec.recreate {
            return false;
        }
        self.scale_proportionally(spec, active, status)
    }

    fn scale_proportionally(
        &mut self,
        spec: &Spec,
        mut active: Vec<usize>,
        status: &Value,
    ) -> bool {
        let current: i64 = active.iter().map(|i| self.sets[*i].replicas).sum();
        let allowed = if spec.replicas > 0 {
            spec.replicas + spec.max_surge()
        } else {
            0
        };
        let to_add = allowed - current;
        // Larger first; on a tie newer first when growing, older first when shrinking.
        active.sort_by(|a, b| {
            let (ra, rb) = (&self.sets[*a], &self.sets[*b]);
            rb.replicas.cmp(&ra.replicas).then(if to_add > 0 {
                rb.created.cmp(&ra.created)
            } else {
                ra.created.cmp(&rb.created)
            })
        });
        let status_replicas = status["replicas"].as_i64().unwrap_or(0);
        let mut added = 0;
        let mut sizes = Vec::new();
        for &i in &active {
            let p = get_proportion(&self.sets[i], spec, status_replicas, to_add, added);
            sizes.push(self.sets[i].replicas + p);
            added += p;
        }
        if let Some(first) = sizes.first_mut() {
            *first = (*first + to_add - added).max(0);
        }
        let mut changed = false;
        for (i, n) in active.into_iter().zip(sizes) {
            changed |= self.set_replicas(i, n, spec);
        }
        changed
    }

    /// `IsSaturated`: the new set has every replica, all available.
    fn saturated(&self, ctx: &Ctx, n: usize) -> bool {
        let rs = &self.sets[n];
        rs.desired_annotation == Some(ctx.spec.replicas)
            && rs.replicas == ctx.spec.replicas
            && rs.status(ctx.now, ctx.spec.min_ready).available == ctx.spec.replicas
    }

    fn latest(&self) -> Option<usize> {
        (0..self.sets.len()).max_by_key(|i| self.sets[*i].created)
    }

    /// `cleanupDeployment`: the oldest revisions beyond
    /// `revisionHistoryLimit` go, skipping any set that still has pods.
    fn cleanup(&mut self, ctx: &Ctx) {
        let mut old: Vec<usize> = (0..self.sets.len())
            .filter(|i| self.sets[*i].hash != ctx.hash)
            .collect();
        let extra = old.len() as i64 - ctx.spec.history_limit.max(0);
        if extra <= 0 {
            return;
        }
        old.sort_by_key(|i| (self.sets[*i].revision, self.sets[*i].created));
        let doomed: Vec<String> = old
            .iter()
            .take(extra as usize)
            .map(|i| &self.sets[*i])
            .filter(|r| r.replicas == 0 && r.pods.is_empty())
            .map(|r| r.hash.clone())
            .collect();
        self.sets.retain(|r| !doomed.contains(&r.hash));
    }

    /// `calculateStatus`: counts from the ReplicaSets; unavailable is the
    /// sets' replicas minus the available pods, never below zero.
    fn calculate_status(&self, ctx: &Ctx, new: Option<usize>, old: &Value) -> Value {
        let min_ready = ctx.spec.min_ready;
        let st: Vec<RsStatus> = self
            .sets
            .iter()
            .map(|r| r.status(ctx.now, min_ready))
            .collect();
        let available: i64 = st.iter().map(|s| s.available).sum();
        let total: i64 = self.sets.iter().map(|r| r.replicas).sum();
        let mut status = json!({
            "observedGeneration": ctx.spec.generation,
            "replicas": st.iter().map(|s| s.replicas).sum::<i64>(),
            "updatedReplicas": new.map(|i| st[i].replicas).unwrap_or(0),
            "readyReplicas": st.iter().map(|s| s.ready).sum::<i64>(),
            "availableReplicas": available,
            "unavailableReplicas": (total - available).max(0),
        });
        if let Some(c) = old.get("conditions") {
            status["conditions"] = c.clone();
        }
        if available >= ctx.spec.replicas - ctx.spec.max_unavailable() {
            let msg = "Deployment has minimum availability.";
            set_condition(
                &mut status,
                "Available",
                "True",
                "MinimumReplicasAvailable",
                msg,
                ctx.wall,
            );
        } else {
            let msg = "Deployment does not have minimum availability.";
            set_condition(
                &mut status,
                "Available",
                "False",
                "MinimumReplicasUnavailable",
                msg,
                ctx.wall,
            );
        }
        status
    }

    /// `syncRolloutStatus`: the Progressing condition. Once complete, it is
    /// not judged again while every replica is updated; progress refreshes
    /// it; a timeout stays until real progress.
    fn sync_rollout_status(&self, ctx: &Ctx, new: Option<usize>, old: &Value) -> Value {
        let mut status = self.calculate_status(ctx, new, old);
        let Some(_) = ctx.spec.progress_deadline else {
            remove_condition(&mut status, "Progressing");
            return status;
        };
        let current = condition(&status, "Progressing");
        let complete_before = status["replicas"] == status["updatedReplicas"]
            && current
                .as_ref()
                .is_some_and(|c| c["reason"] == "NewReplicaSetAvailable");
        if complete_before {
            return status;
        }
        let subject = match new {
            Some(i) => format!("ReplicaSet {:?}", self.sets[i].name),
            None => format!("Deployment {:?}", ctx.name),
        };
        if deployment_complete(&ctx.spec, &status) {
            let msg = format!("{subject} has successfully progressed.");
            set_condition(
                &mut status,
                "Progressing",
                "True",
                "NewReplicaSetAvailable",
                &msg,
                ctx.wall,
            );
        } else if deployment_progressing(old, &status) {
            let msg = format!("{subject} is progressing.");
            let transition = current
                .filter(|c| c["status"] == "True")
                .and_then(|c| c.get("lastTransitionTime").cloned());
            remove_condition(&mut status, "Progressing");
            set_condition(
                &mut status,
                "Progressing",
                "True",
                "ReplicaSetUpdated",
                &msg,
                ctx.wall,
            );
            if let (Some(t), Some(c)) = (transition, condition_mut(&mut status, "Progressing")) {
                c["lastTransitionTime"] = t;
            }
        } else if deployment_timed_out(&ctx.spec, &status, ctx.wall) {
            let msg = format!("{subject} has timed out progressing.");
            set_condition(
                &mut status,
                "Progressing",
                "False",
                "ProgressDeadlineExceeded",
                &msg,
                ctx.wall,
            );
        }
        status
    }
}

/// Whole rollouts of one Deployment on a virtual clock, with no API server:
/// for tests that judge every moment of a rollout.
pub struct Rollouts<F: Fn(&Value) -> PodOutcome> {
    state: State,
    outcome: F,
    start: Instant,
    elapsed: Duration,
}

impl<F: Fn(&Value) -> PodOutcome> Rollouts<F> {
    pub fn new(outcome: F) -> Self {
        Rollouts {
            state: State::default(),
            outcome,
            start: Instant::now(),
            elapsed: Duration::ZERO,
        }
    }

    /// Let `dt` pass, then sync: the Deployment's new status.
    pub fn step(&mut self, d: &Value, dt: Duration) -> Value {
        self.elapsed += dt;
        let outcome = &self.outcome;
        let ctx = Rollouts::<F>::ctx_with(self.start, self.elapsed, d, outcome);
        self.state.sync(&ctx).status
    }

    fn ctx_with<'a>(
        start: Instant,
        elapsed: Duration,
        d: &'a Value,
        outcome: &'a dyn Fn(&Value) -> PodOutcome,
    ) -> Ctx<'a> {
        Ctx {
            deployment: d,
            spec: Spec::from_deployment(d),
            name: d["metadata"]["name"].as_str().unwrap_or("").to_string(),
            hash: template_hash(&d["spec"]["template"]),
            now: start + elapsed,
            wall: SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000) + elapsed,
            outcome,
        }
    }

    /// The truth about the pods: exactly `replicas` of them, every one of
    /// the current template and available.
    pub fn complete(&self, d: &Value) -> bool {
        let spec = Spec::from_deployment(d);
        let hash = template_hash(&d["spec"]["template"]);
        let now = self.start + self.elapsed;
        self.state.sets.iter().all(|r| {
            let s = r.status(now, spec.min_ready);
            if r.hash == hash {
                s.replicas == spec.replicas && s.available == spec.replicas
            } else {
                s.replicas == 0
            }
        })
    }
}

/// The pod-template-hash of a template (any stable digest will do).
pub fn template_hash(template: &Value) -> String {
    use sha2::{Digest, Sha256};
    let h = Sha256::digest(template.to_string().as_bytes());
    h.iter().take(5).map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests;
