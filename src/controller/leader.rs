//! Leader election on a `coordination.k8s.io/v1` Lease, as client-go's
//! `leaderelection` with a `LeaseLock` does it: acquire or renew with
//! optimistic concurrency, honour another holder's unexpired lease, and
//! judge expiry only by time elapsed on our own clock since the record was
//! last seen to change (never by the other pod's timestamps).
//!
//! Fencing: [`Leadership::may_write`] is the write gate of the operator's
//! client, checked before every attempt of every write. It closes by
//! itself once the last successful renewal is older than the renew
//! deadline, which is shorter than the lease duration, so no write leaves
//! this process after another could have taken the lease: a candidate
//! waits a whole lease duration after the last renewal it saw.

use crate::backoff::{jitter, random_u64};
use crate::kube::path::LEASES;
use crate::kube::{Client, Error, ResourcePath};
use crate::lock::lock;
use crate::metrics::Metrics;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// `--leader-elect` and its timings (client-go's defaults: 15 s, 10 s, 2 s).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElectionConfig {
    pub lease_name: String,
    /// None: the pod's namespace (`POD_NAMESPACE`, else the service
    /// account's namespace file), found at start.
    pub lease_namespace: Option<String>,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl Default for ElectionConfig {
    fn default() -> Self {
        ElectionConfig {
            lease_name: "openmed-operator".into(),
            lease_namespace: None,
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

impl ElectionConfig {
    /// renew deadline < lease duration (the fencing margin), and a retry
    /// period short enough to renew more than once per deadline.
    pub fn check(&self) -> Result<(), String> {
        if self.renew_deadline >= self.lease_duration {
            return Err(
                "--renew-deadline-seconds must be less than --lease-duration-seconds".into(),
            );
        }
        if self.retry_period >= self.renew_deadline {
            return Err("--retry-period-seconds must be less than --renew-deadline-seconds".into());
        }
        Ok(())
    }
}

/// Who this process is: the pod's name (`POD_NAME`, else the host name)
/// and a random suffix, so a restarted pod is a new candidate.
pub fn identity(env: &dyn Fn(&str) -> Option<String>) -> String {
    let host = env("POD_NAME")
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().chars().take(200).collect::<String>())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "openmed-operator".into());
    format!("{host}_{:08x}", random_u64() as u32)
}

/// Whether this process leads, and when its lease was last known good.
pub struct Leadership {
    renew_deadline: Duration,
    lease_duration: Duration,
    state: Mutex<State>,
    metrics: Arc<Metrics>,
}

#[derive(Default)]
struct State {
    leading: bool,
    /// When the last successful acquire or renew was sent.
    renewed: Option<Instant>,
}

impl Leadership {
    pub fn new(cfg: &ElectionConfig, metrics: Arc<Metrics>) -> Leadership {
        metrics.set_leader(false);
        Leadership {
            renew_deadline: cfg.renew_deadline,
            lease_duration: cfg.lease_duration,
            state: Mutex::new(State::default()),
            metrics,
        }
    }

    /// The write gate: leading, and renewed within the renew deadline.
    pub fn may_write(&self) -> bool {
        self.write_window().is_some()
    }

    /// The gate with its window: how long a write let through now may take
    /// to be over. Another process can hold the lease a lease duration
    /// after our last renewal was sent, at the earliest; a second is kept
    /// in hand. (At least lease duration - renew deadline - 1 s: 4 s with
    /// the defaults.)
    pub fn write_window(&self) -> Option<Duration> {
        let st = lock(&self.state);
        let since = st.renewed?.elapsed();
        (st.leading && since < self.renew_deadline).then(|| {
            self.lease_duration
                .saturating_sub(since)
                .saturating_sub(Duration::from_secs(1))
                .max(Duration::from_millis(100))
        })
    }

    pub fn is_leader(&self) -> bool {
        lock(&self.state).leading
    }

    /// Liveness: a leader past its renew deadline has lost its lease and
    /// should have stopped.
    pub fn check(&self) -> Result<(), String> {
        if self.is_leader() && !self.may_write() {
            return Err("lost the leader lease and still running".into());
        }
        Ok(())
    }

    /// The lease was acquired or renewed by a request sent at `sent`.
    fn renewed(&self, sent: Instant) {
        let mut st = lock(&self.state);
        st.leading = true;
        st.renewed = Some(sent);
        self.metrics.set_leader(true);
    }

    fn step_down(&self) {
        lock(&self.state).leading = false;
        self.metrics.set_leader(false);
    }
}

/// What one round found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Round {
    /// We hold the lease (acquired or renewed).
    Held,
    /// Another holder's lease is current.
    Taken,
    /// Someone wrote the Lease between our read and our write: read again.
    Raced,
}

/// The lease as last read or written, and when (on our clock) its record
/// was last seen to change.
struct Observed {
    lease: Value,
    changed_at: Instant,
}

/// The loop that acquires and renews the lease, on a client of its own
/// (no write gate; requests as short as the retry period).
pub struct Elector {
    client: Client,
    cfg: ElectionConfig,
    namespace: String,
    identity: String,
    leadership: Arc<Leadership>,
    observed: Option<Observed>,
}

/// The parts of a record whose change restarts the expiry clock.
fn record_key(lease: &Value) -> (Value, Value, Value) {
    let spec = &lease["spec"];
    (
        spec["holderIdentity"].clone(),
        spec["renewTime"].clone(),
        lease["metadata"]["resourceVersion"].clone(),
    )
}

impl Elector {
    pub fn new(
        client: Client,
        cfg: ElectionConfig,
        namespace: String,
        identity: String,
        leadership: Arc<Leadership>,
    ) -> Elector {
        Elector {
            client,
            cfg,
            namespace,
            identity,
            leadership,
            observed: None,
        }
    }

    fn path(&self) -> Result<ResourcePath, Error> {
        ResourcePath::object(LEASES, Some(&self.namespace), &self.cfg.lease_name)
    }

    fn remember(&mut self, lease: Value) {
        let changed = self
            .observed
            .as_ref()
            .is_none_or(|o| record_key(&o.lease) != record_key(&lease));
        let changed_at = match &self.observed {
            Some(o) if !changed => o.changed_at,
            _ => Instant::now(),
        };
        self.observed = Some(Observed { lease, changed_at });
    }

    /// Our record: held by us from now, transitions counted on a change
    /// of holder.
    fn our_spec(&self, old: &Value) -> Value {
        let now = crate::time::micro_now();
        let ours = old["holderIdentity"] == self.identity.as_str();
        let transitions = old["leaseTransitions"].as_i64().unwrap_or(0);
        json!({
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.cfg.lease_duration.as_secs(),
            "acquireTime": if ours { old["acquireTime"].clone() } else { json!(now) },
            "renewTime": now,
            "leaseTransitions": if ours || old.is_null() { transitions } else { transitions + 1 },
        })
    }

    /// One round (client-go's `tryAcquireOrRenew`). The leader writes its
    /// renewal over the copy it holds (one request); anyone else reads
    /// first.
    fn try_acquire_or_renew(&mut self) -> Result<Round, Error> {
        let path = self.path()?;
        if let Some(o) = self
            .observed
            .as_ref()
            .filter(|_| self.leadership.is_leader())
        {
            let mut lease = o.lease.clone();
            lease["spec"] = self.our_spec(&o.lease["spec"]);
            match self.client.update(&path, &lease) {
                Ok(written) => {
                    self.remember(written);
                    return Ok(Round::Held);
                }
                // Read it and judge again, in this same round.
                Err(e) => log::debug!("renewing over our copy failed ({e}); reading the lease"),
            }
        }
        let current = match self.client.get(&path) {
            Ok(lease) => lease,
            Err(e) if e.is_not_found() => return self.create(),
            Err(e) => return Err(e),
        };
        self.remember(current.clone());
        let spec = &current["spec"];
        let holder = spec["holderIdentity"].as_str().unwrap_or("");
        let duration = spec["leaseDurationSeconds"]
            .as_u64()
            .map(Duration::from_secs)
            .unwrap_or(self.cfg.lease_duration);
        let seen = self.observed.as_ref().map(|o| o.changed_at.elapsed());
        if !holder.is_empty() && holder != self.identity && seen.is_some_and(|s| s < duration) {
            return Ok(Round::Taken);
        }
        let mut lease = current.clone();
        lease["spec"] = self.our_spec(spec);
        match self.client.update(&path, &lease) {
            Ok(written) => {
                self.remember(written);
                Ok(Round::Held)
            }
            Err(e) if e.code() == Some(409) => {
                // Someone wrote it first: read it again next round.
                self.observed = None;
                Ok(Round::Raced)
            }
            Err(e) => Err(e),
        }
    }

    fn create(&mut self) -> Result<Round, Error> {
        let lease = json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": self.cfg.lease_name, "namespace": self.namespace},
            "spec": self.our_spec(&Value::Null),
        });
        let collection = ResourcePath::collection(LEASES, Some(&self.namespace))?;
        match self.client.create(&collection, &lease) {
            Ok(written) => {
                self.remember(written);
                Ok(Round::Held)
            }
            Err(e) if e.code() == Some(409) => Ok(Round::Raced),
            Err(e) => Err(e),
        }
    }

    /// Acquire, then renew every retry period until `stop` says so. A
    /// leader that fails to renew within the renew deadline, or finds the
    /// lease taken, exits the process: its writes have stopped already (the
    /// gate), and a restart joins again as a candidate with clean state.
    pub fn run(mut self, stop: fn() -> bool) -> Elector {
        log::info!(
            "leader election: lease {}/{} as {}",
            self.namespace,
            self.cfg.lease_name,
            self.identity
        );
        while !stop() {
            let was_leader = self.leadership.is_leader();
            let sent = Instant::now();
            match self.try_acquire_or_renew() {
                Ok(Round::Held) => {
                    self.leadership.renewed(sent);
                    if !was_leader {
                        log::info!("became the leader ({})", self.identity);
                    }
                }
                Ok(Round::Taken) if was_leader => self.lost("the lease is held by another replica"),
                // A race or an error: a leader tries again until its
                // renew deadline, as client-go's renew loop does.
                Ok(Round::Taken | Round::Raced) => {}
                Err(e) => log::warn!("leader election: {e}"),
            }
            if was_leader && !self.leadership.may_write() {
                self.lost("not renewed within the renew deadline");
            }
            let wait = jitter(self.cfg.retry_period);
            let until = Instant::now() + wait;
            while !stop() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(50).min(wait));
            }
        }
        self
    }

    fn lost(&self, why: &str) -> ! {
        self.leadership.step_down();
        log::error!(
            "lost the leader lease ({why}); writes stopped; exiting to rejoin as a candidate"
        );
        std::process::exit(1)
    }

    /// Step down and hand the lease over at once (holder cleared, duration
    /// 1 s, as client-go's `ReleaseOnCancel`), once the workers are done.
    pub fn release(&mut self) {
        let was_leader = self.leadership.is_leader();
        self.leadership.step_down();
        let Some(o) = self.observed.as_ref().filter(|_| was_leader) else {
            return;
        };
        let mut lease = o.lease.clone();
        let now = crate::time::micro_now();
        lease["spec"] = json!({
            "holderIdentity": "", "leaseDurationSeconds": 1, "acquireTime": now, "renewTime": now,
            "leaseTransitions": o.lease["spec"]["leaseTransitions"].as_i64().unwrap_or(0),
        });
        match self.path().and_then(|p| self.client.update(&p, &lease)) {
            Ok(_) => log::info!("released the leader lease"),
            Err(e) => log::warn!("could not release the leader lease: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timings_must_leave_a_fencing_margin() {
        assert!(ElectionConfig::default().check().is_ok());
        let mut c = ElectionConfig::default();
        c.renew_deadline = c.lease_duration;
        assert!(c.check().is_err());
        let mut c = ElectionConfig::default();
        c.retry_period = c.renew_deadline;
        assert!(c.check().is_err());
    }

    #[test]
    fn the_gate_closes_by_itself_past_the_renew_deadline() {
        let cfg = ElectionConfig {
            renew_deadline: Duration::from_millis(50),
            lease_duration: Duration::from_secs(3),
            ..ElectionConfig::default()
        };
        let l = Leadership::new(&cfg, Arc::new(Metrics::default()));
        assert!(!l.may_write(), "a candidate never writes");
        l.renewed(Instant::now());
        assert!(l.may_write());
        let window = l.write_window().unwrap();
        assert!(
            window <= Duration::from_secs(2),
            "a write must be over a second before the lease can go: {window:?}"
        );
        assert!(l.check().is_ok());
        std::thread::sleep(Duration::from_millis(60));
        assert!(!l.may_write(), "no renewal within the deadline");
        assert!(
            l.check().is_err(),
            "a leader that lost its lease is not live"
        );
        l.step_down();
        assert!(l.check().is_ok());
    }

    #[test]
    fn identities_name_the_pod_and_differ_per_process_start() {
        let env = |k: &str| (k == "POD_NAME").then(|| "op-7c9d".to_string());
        let (a, b) = (identity(&env), identity(&env));
        assert!(a.starts_with("op-7c9d_"), "{a}");
        assert_ne!(a, b);
    }
}
