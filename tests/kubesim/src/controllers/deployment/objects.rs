//! The objects the Deployment controller keeps: its ReplicaSets and their
//! pods.

use super::*;

/// What becomes of a pod of a given template on this simulated node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodOutcome {
    ReadyAfter(Duration),
    /// Never ready: its env does not resolve, or its model never loads.
    NeverReady,
}

/// A pod of a ReplicaSet: its name (the set's name and a random suffix,
/// as `generateName` makes it) and when it started and became ready.
#[derive(Debug, Clone)]
pub struct Pod {
    pub name: String,
    pub created: Instant,
    pub ready_at: Option<Instant>,
}

impl Pod {
    fn new(set: &str, created: Instant, ready_at: Option<Instant>) -> Pod {
        let name = format!("{set}-{}", crate::registry::store::random_suffix());
        Pod {
            name,
            created,
            ready_at,
        }
    }

    /// Whether it is ready at `now` (the kubelet's readiness).
    pub fn ready(&self, now: Instant) -> bool {
        self.ready_at.is_some_and(|t| t <= now)
    }

    /// `podutil.IsPodAvailable`: ready for longer than minReadySeconds.
    fn available(&self, now: Instant, min_ready: Duration) -> bool {
        match self.ready_at {
            Some(t) if min_ready.is_zero() => t <= now,
            Some(t) => t + min_ready < now,
            None => false,
        }
    }
}

/// A ReplicaSet: `replicas` is its spec, the pods its status.
#[derive(Debug, Clone)]
pub struct ReplicaSet {
    pub name: String,
    pub hash: String,
    pub replicas: i64,
    pub revision: i64,
    /// `deployment.kubernetes.io/desired-replicas` and `max-replicas`.
    pub desired_annotation: Option<i64>,
    pub max_annotation: Option<i64>,
    /// Creation order, for the upstream sorts by creation timestamp.
    pub created: u64,
    pub(super) pods: Vec<Pod>,
    pub(super) template: Value,
}

/// The counts a ReplicaSet's status reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RsStatus {
    pub replicas: i64,
    pub ready: i64,
    pub available: i64,
}

impl ReplicaSet {
    /// A ReplicaSet with `status` pods, as a table row describes one.
    pub fn with_status(name: &str, replicas: i64, status: RsStatus, created: u64) -> ReplicaSet {
        let ready = Instant::now() - Duration::from_secs(3600);
        let mut pods = Vec::new();
        for i in 0..status.replicas {
            let ready_at = (i < status.ready).then_some(ready);
            pods.push(Pod::new(name, ready, ready_at));
        }
        ReplicaSet {
            name: name.into(),
            hash: name.into(),
            replicas,
            revision: created as i64,
            desired_annotation: None,
            max_annotation: None,
            created,
            pods,
            template: Value::Null,
        }
    }

    /// Its pods, oldest first.
    pub fn pods(&self) -> &[Pod] {
        &self.pods
    }

    /// The Deployment's pod template it was made from.
    pub fn template(&self) -> &Value {
        &self.template
    }

    pub fn status(&self, now: Instant, min_ready: Duration) -> RsStatus {
        RsStatus {
            replicas: self.pods.len() as i64,
            ready: self.pods.iter().filter(|p| p.ready(now)).count() as i64,
            available: self
                .pods
                .iter()
                .filter(|p| p.available(now, min_ready))
                .count() as i64,
        }
    }

    /// The ReplicaSet controller and kubelet: pods follow `replicas`; a
    /// scale-down removes unready pods first, then the most recently ready
    /// (`getPodsToDelete` with `ActivePodsWithRanks`).
    pub(super) fn reconcile_pods(
        &mut self,
        now: Instant,
        outcome: &dyn Fn(&Value) -> PodOutcome,
    ) -> bool {
        let want = self.replicas.max(0) as usize;
        let changed = self.pods.len() != want;
        while self.pods.len() < want {
            let ready_at = match outcome(&self.template) {
                PodOutcome::ReadyAfter(d) => Some(now + d),
                PodOutcome::NeverReady => None,
            };
            self.pods.push(Pod::new(&self.name, now, ready_at));
        }
        while self.pods.len() > want {
            let victim = self
                .pods
                .iter()
                .enumerate()
                .max_by_key(|(_, p)| match p.ready_at {
                    Some(t) if t <= now => (0, Some(t)),
                    other => (1, other),
                })
                .map(|(i, _)| i)
                .unwrap_or(0);
            self.pods.remove(victim);
        }
        changed
    }
}
