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
//! waits a whole lease duration after the last renewal it saw. It closes
//! at once, and the process exits, when the leader learns the Lease no
//! longer holds it (deleted, another holder, someone else's write); a
//! candidate that re-creates a Lease it saw another hold writes only a
//! lease duration later (client-go leaves both windows open).

use super::probes::{LeaderGauge, LeaseClient};
use super::Stop;
use crate::backoff::{jitter, random_u64};
use crate::kube::path::LEASES;
use crate::kube::{Error, ResourcePath};
use crate::lock::lock;
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
    state: Mutex<LeaseTerm>,
    metrics: Arc<dyn LeaderGauge>,
}

#[derive(Default)]
struct LeaseTerm {
    leading: bool,
    /// When the last successful acquire or renew was sent.
    renewed: Option<Instant>,
}

impl Leadership {
    pub fn new(cfg: &ElectionConfig, metrics: Arc<dyn LeaderGauge>) -> Leadership {
        metrics.set_leader(false);
        Leadership {
            renew_deadline: cfg.renew_deadline,
            lease_duration: cfg.lease_duration,
            state: Mutex::new(LeaseTerm::default()),
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
    /// We led, and the Lease no longer holds us: step down and exit.
    Lost(&'static str),
}

/// What a read of the Lease (None: absent) means to this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LeaseVerdict {
    /// Ours, as our own writes left it: renew it.
    Ours,
    /// Released, or its holder's record expired on our clock: take it.
    /// With `hold_off`, its last holder may still be writing.
    Free { hold_off: bool },
    /// Another holder's record is current.
    Taken,
    /// Absent: create it. With `hold_off`, another process was seen
    /// holding it and may still be writing.
    Absent { hold_off: bool },
    /// We lead, and the Lease is gone or someone else wrote it.
    Lost(&'static str),
}

/// What [`judge`] weighs besides the Lease read.
struct Judging<'a> {
    identity: &'a str,
    leading: bool,
    /// The resourceVersion our last confirmed write got.
    written: Option<&'a str>,
    /// The renewTimes of our writes sent since then and not confirmed: an
    /// answer lost on the way does not mean the write did not land.
    unconfirmed: &'a [String],
    /// How long the record read has been unchanged on our clock.
    unchanged_for: Duration,
    /// This candidate has seen another process hold the Lease (or lost a
    /// race for it).
    others_seen: bool,
    lease_duration: Duration,
}

/// A leader keeps the lease only while the Lease is what its own writes
/// made it: gone, held by another identity, or at a resourceVersion none
/// of our writes explains means someone else may hold it now. A candidate
/// honours another's record until it has been unchanged for its duration.
fn judge(lease: Option<&Value>, j: &Judging) -> LeaseVerdict {
    let Some(lease) = lease else {
        return match j.leading {
            true => LeaseVerdict::Lost("the Lease was deleted"),
            false => LeaseVerdict::Absent {
                hold_off: j.others_seen,
            },
        };
    };
    let spec = &lease["spec"];
    let holder = spec["holderIdentity"].as_str().unwrap_or("");
    if j.leading {
        let rv = lease["metadata"]["resourceVersion"].as_str();
        let renewed = spec["renewTime"].as_str().unwrap_or("");
        return if holder != j.identity {
            LeaseVerdict::Lost("the Lease is held by another identity")
        } else if (rv.is_some() && rv == j.written) || j.unconfirmed.iter().any(|t| t == renewed) {
            LeaseVerdict::Ours
        } else {
            LeaseVerdict::Lost("someone else wrote the Lease")
        };
    }
    let duration = spec["leaseDurationSeconds"]
        .as_u64()
        .map(Duration::from_secs)
        .unwrap_or(j.lease_duration);
    if holder == j.identity {
        LeaseVerdict::Ours
    } else if !holder.is_empty() && j.unchanged_for < duration {
        LeaseVerdict::Taken
    } else {
        // A holder that releases (as `release` and client-go do) stopped
        // writing first; one cleared by hand, or a record that expired
        // sooner than a lease duration, may still be writing.
        let released = holder.is_empty() && spec["leaseDurationSeconds"] == 1;
        LeaseVerdict::Free {
            hold_off: j.others_seen && !released && j.unchanged_for < j.lease_duration,
        }
    }
}

/// The lease as last read or written, and when (on our clock) its record
/// was last seen to change.
struct LeaseRecord {
    lease: Value,
    changed_at: Instant,
}

/// A Lease we hold but may not write under yet.
struct HoldOff {
    until: Instant,
    told: bool,
}

/// The loop that acquires and renews the lease, on a client of its own
/// (no write gate; requests as short as the retry period).
pub struct Elector {
    client: Box<dyn LeaseClient>,
    cfg: ElectionConfig,
    namespace: String,
    identity: String,
    leadership: Arc<Leadership>,
    observed: Option<LeaseRecord>,
    /// The resourceVersion our last confirmed write of the Lease got.
    written: Option<String>,
    /// renewTimes of our writes sent since, not confirmed (a few at most).
    unconfirmed: Vec<String>,
    /// Another process was seen holding the Lease, or won a race for it.
    /// Kept for good: a process leads once, then exits.
    others_seen: bool,
    hold_off: Option<HoldOff>,
    /// Told why, once leadership is lost (client-go's `OnStoppedLeading`):
    /// the process decides what follows; the elector stops.
    on_stopped_leading: StoppedLeading,
}

/// What to do once leadership is lost, given why.
pub type StoppedLeading = Box<dyn Fn(&str) + Send + Sync>;

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
        client: Box<dyn LeaseClient>,
        cfg: ElectionConfig,
        namespace: String,
        identity: String,
        leadership: Arc<Leadership>,
        on_stopped_leading: StoppedLeading,
    ) -> Elector {
        Elector {
            on_stopped_leading,
            client,
            cfg,
            namespace,
            identity,
            leadership,
            observed: None,
            written: None,
            unconfirmed: Vec::new(),
            others_seen: false,
            hold_off: None,
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
        self.observed = Some(LeaseRecord { lease, changed_at });
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

    /// Creates or updates the Lease. Its renewTime is kept until an answer
    /// confirms the write, so that a read can tell a write of ours that
    /// landed unanswered from someone else's.
    fn write(&mut self, lease: &Value, create: bool) -> Result<(), Error> {
        if self.unconfirmed.len() >= 8 {
            self.unconfirmed.remove(0);
        }
        let renewed = lease["spec"]["renewTime"].as_str().unwrap_or("");
        self.unconfirmed.push(renewed.to_string());
        let written = match create {
            true => {
                let collection = ResourcePath::collection(LEASES, Some(&self.namespace))?;
                self.client.create(&collection, lease)?
            }
            false => self.client.update(&self.path()?, lease)?,
        };
        self.written = written["metadata"]["resourceVersion"]
            .as_str()
            .map(str::to_string);
        self.unconfirmed.clear();
        self.remember(written);
        Ok(())
    }

    /// One round (client-go's `tryAcquireOrRenew`). The leader writes its
    /// renewal over the copy it holds (one request); anyone else, or a
    /// leader whose renewal told nothing for sure, reads and judges first.
    fn try_acquire_or_renew(&mut self) -> Result<Round, Error> {
        let leading = self.leadership.is_leader();
        if let Some(copy) = self.observed.as_ref().filter(|_| leading) {
            if let Some(round) = self.renew_own_copy(copy.lease.clone()) {
                return Ok(round);
            }
        }
        let current = match self.client.get(&self.path()?) {
            Ok(lease) => Some(lease),
            Err(e) if e.is_not_found() => None,
            Err(e) => return Err(e),
        };
        // Absent: as if it had changed now.
        let mut seen_since = Instant::now();
        if let Some(lease) = &current {
            self.remember(lease.clone());
            seen_since = self.observed.as_ref().map_or(seen_since, |o| o.changed_at);
        }
        let verdict = judge(
            current.as_ref(),
            &Judging {
                identity: &self.identity,
                leading,
                written: self.written.as_deref(),
                unconfirmed: &self.unconfirmed,
                unchanged_for: seen_since.elapsed(),
                others_seen: self.others_seen,
                lease_duration: self.cfg.lease_duration,
            },
        );
        // A hold-off runs a lease duration from when we first saw the
        // Lease as we take it (absent, or its holder cleared by hand).
        let opens_at = seen_since + self.cfg.lease_duration;
        match (verdict, current) {
            (LeaseVerdict::Lost(why), _) => Ok(Round::Lost(why)),
            (LeaseVerdict::Taken, _) => {
                self.others_seen = true;
                Ok(Round::Taken)
            }
            (LeaseVerdict::Absent { hold_off }, _) => self.create(hold_off.then_some(opens_at)),
            (LeaseVerdict::Free { hold_off }, Some(lease)) => {
                self.take(lease, leading, hold_off.then_some(opens_at))
            }
            (LeaseVerdict::Ours, Some(lease)) => self.take(lease, leading, None),
            (_, None) => Ok(Round::Raced),
        }
    }

    /// The leader's renewal over its own copy. Only someone else's write
    /// makes that conflict (unless an earlier renewal of ours landed
    /// unanswered), and only a delete makes it not found. None: the answer
    /// told nothing for sure, read the Lease and judge.
    fn renew_own_copy(&mut self, mut lease: Value) -> Option<Round> {
        lease["spec"] = self.our_spec(&lease["spec"]);
        let earlier_unconfirmed = !self.unconfirmed.is_empty();
        match self.write(&lease, false) {
            Ok(()) => Some(Round::Held),
            Err(e) if e.is_not_found() => Some(Round::Lost("the Lease was deleted")),
            Err(e) if e.code() == Some(409) && !earlier_unconfirmed => {
                Some(Round::Lost("someone else wrote the Lease"))
            }
            Err(e) => {
                log::debug!("renewing over our copy failed ({e}); reading the lease");
                None
            }
        }
    }

    /// Our record over the Lease as read, bound to its resourceVersion.
    /// `opens_at`: as for [`Elector::create`].
    fn take(
        &mut self,
        current: Value,
        leading: bool,
        opens_at: Option<Instant>,
    ) -> Result<Round, Error> {
        self.hold_off_until(opens_at);
        let mut lease = current.clone();
        lease["spec"] = self.our_spec(&current["spec"]);
        match self.write(&lease, false) {
            Ok(()) => Ok(Round::Held),
            Err(e) if leading && e.is_not_found() => Ok(Round::Lost("the Lease was deleted")),
            Err(e) if leading && e.code() == Some(409) => {
                Ok(Round::Lost("someone else wrote the Lease"))
            }
            Err(e) if e.code() == Some(409) => {
                // Someone wrote it first: read it again next round.
                self.observed = None;
                self.others_seen = true;
                Ok(Round::Raced)
            }
            Err(e) => Err(e),
        }
    }

    /// Creates the absent Lease. `opens_at`: our writes wait until then
    /// (set before sending: a create may land unanswered).
    fn create(&mut self, opens_at: Option<Instant>) -> Result<Round, Error> {
        self.hold_off_until(opens_at);
        let lease = json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": self.cfg.lease_name, "namespace": self.namespace},
            "spec": self.our_spec(&Value::Null),
        });
        match self.write(&lease, true) {
            Ok(()) => Ok(Round::Held),
            Err(e) if e.code() == Some(409) => {
                self.others_seen = true;
                Ok(Round::Raced)
            }
            Err(e) => Err(e),
        }
    }

    /// A hold-off already running is kept: it began at the first sight.
    fn hold_off_until(&mut self, opens_at: Option<Instant>) {
        if let (Some(until), None) = (opens_at, &self.hold_off) {
            self.hold_off = Some(HoldOff { until, told: false });
        }
    }

    /// Acquire, then renew every retry period until `stop` is set. A
    /// leader exits the process as soon as it learns the Lease no longer
    /// holds it (gone, another holder, someone else's write), or when it
    /// has not renewed within the renew deadline: its writes have stopped
    /// already (the gate), and a restart joins again as a candidate with
    /// clean state.
    ///
    /// A candidate that has seen another process hold the Lease, and then
    /// creates it (it was deleted) or takes it over from a holder cleared
    /// by hand, holds it a lease duration before it writes: the old
    /// holder's last renewal was before that change, so by then its gate
    /// has closed and its writes are over (it also exits at its next
    /// renewal). A candidate that never saw another holder (a fresh start
    /// finding no Lease) leads at once, and so does one taking over a
    /// released or expired lease.
    pub fn run(mut self, stop: &Stop) -> Elector {
        log::info!(
            "leader election: lease {}/{} as {}",
            self.namespace,
            self.cfg.lease_name,
            self.identity
        );
        while !stop.is_stopped() {
            let was_leader = self.leadership.is_leader();
            let sent = Instant::now();
            match self.try_acquire_or_renew() {
                Ok(Round::Held) => self.held(sent, was_leader),
                Ok(Round::Lost(why)) => return self.lost(why),
                Ok(Round::Taken) => self.hold_off = None,
                // A race or an error: a leader tries again until its
                // renew deadline, as client-go's renew loop does.
                Ok(Round::Raced) => {}
                Err(e) => log::warn!("leader election: {e}"),
            }
            if was_leader && !self.leadership.may_write() {
                return self.lost("not renewed within the renew deadline");
            }
            if stop.wait(jitter(self.cfg.retry_period)) {
                break;
            }
        }
        self
    }

    /// We hold the Lease by a request sent at `sent`: the gate opens (or
    /// stays open), unless a hold-off is still running.
    fn held(&mut self, sent: Instant, was_leader: bool) {
        if let Some(h) = &mut self.hold_off {
            let left = h.until.saturating_duration_since(Instant::now());
            if !left.is_zero() {
                if !h.told {
                    h.told = true;
                    log::info!(
                        "holding the lease; writes start in {} s (the previous holder may still be writing)",
                        left.as_secs_f64().ceil()
                    );
                }
                return;
            }
            self.hold_off = None;
        }
        self.leadership.renewed(sent);
        if !was_leader {
            log::info!("became the leader ({})", self.identity);
        }
    }

    /// Writes stop at once; the owner is told why, and the elector ends.
    fn lost(self, why: &str) -> Elector {
        self.leadership.step_down();
        (self.on_stopped_leading)(why);
        self
    }

    /// Step down and hand the lease over at once (holder cleared, duration
    /// 1 s, as client-go's `ReleaseOnCancel`), once the workers are done.
    /// A Lease held through a hold-off is left to expire: a successor
    /// would take a released one at once, while the old holder may still
    /// be writing.
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
mod tests;
