//! The lease rules on made-up reads, and the loop against a server that
//! is not there.

use super::*;
use crate::config::lease_name_for;
use crate::controller::lister::ApiLease as Api;
use crate::kube::Client;
use crate::metrics::Metrics;

#[test]
fn a_shard_lease_is_named_for_its_selector() {
    // sha256("openmed.ai/shard=a") = 556b1391ba32088f...
    assert_eq!(
        lease_name_for("openmed.ai/shard=a"),
        "openmed-operator-556b1391ba"
    );
    assert_ne!(lease_name_for("a=1"), lease_name_for("a=2"));
    assert!(crate::kube::names::is_dns_label(&lease_name_for("x")));
}

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

fn lease(holder: &str, rv: &str, renewed: &str) -> Value {
    json!({"metadata": {"resourceVersion": rv},
           "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15, "renewTime": renewed}})
}

#[test]
fn a_leader_keeps_the_lease_only_as_its_own_writes_left_it() {
    let unconfirmed = ["t3".to_string()];
    let leader = Judging {
        identity: "us",
        leading: true,
        written: Some("7"),
        unconfirmed: &unconfirmed,
        unchanged_for: Duration::ZERO,
        others_seen: true,
        lease_duration: Duration::from_secs(15),
    };
    let gone = LeaseVerdict::Lost("the Lease was deleted");
    let other = LeaseVerdict::Lost("the Lease is held by another identity");
    let edited = LeaseVerdict::Lost("someone else wrote the Lease");
    let table = [
        (None, gone),
        (Some(lease("them", "8", "t9")), other),
        (Some(lease("", "8", "t9")), other),
        (Some(lease("us", "8", "t2")), edited),
        (Some(lease("us", "7", "t2")), LeaseVerdict::Ours),
        // Our renewal that landed while its answer was lost.
        (Some(lease("us", "8", "t3")), LeaseVerdict::Ours),
    ];
    for (read, want) in table {
        assert_eq!(judge(read.as_ref(), &leader), want, "{read:?}");
    }
}

#[test]
fn a_candidate_holds_off_only_after_seeing_another_holder() {
    let mut c = Judging {
        identity: "us",
        leading: false,
        written: None,
        unconfirmed: &[],
        unchanged_for: Duration::from_secs(1),
        others_seen: false,
        lease_duration: Duration::from_secs(15),
    };
    let fresh = LeaseVerdict::Absent { hold_off: false };
    assert_eq!(judge(None, &c), fresh, "a fresh start leads at once");
    assert_eq!(
        judge(Some(&lease("them", "1", "t")), &c),
        LeaseVerdict::Taken
    );
    let free = LeaseVerdict::Free { hold_off: false };
    assert_eq!(judge(Some(&lease("", "1", "t")), &c), free);
    assert_eq!(judge(Some(&lease("us", "1", "t")), &c), LeaseVerdict::Ours);
    c.others_seen = true;
    let after = LeaseVerdict::Absent { hold_off: true };
    assert_eq!(judge(None, &c), after, "the old holder may still write");
    let cleared = judge(Some(&lease("", "1", "t")), &c);
    assert_eq!(
        cleared,
        LeaseVerdict::Free { hold_off: true },
        "cleared by hand"
    );
    let mut released = lease("", "1", "t");
    released["spec"]["leaseDurationSeconds"] = json!(1);
    assert_eq!(judge(Some(&released), &c), free, "its holder stopped first");
    let mut shortened = lease("them", "1", "t");
    shortened["spec"]["leaseDurationSeconds"] = json!(1);
    let early = LeaseVerdict::Free { hold_off: true };
    assert_eq!(judge(Some(&shortened), &c), early, "expired too soon");
    c.unchanged_for = Duration::from_secs(15);
    let expired = judge(Some(&lease("them", "1", "t")), &c);
    assert_eq!(expired, free, "unchanged for a lease duration");
}

#[test]
fn the_gate_stays_shut_through_a_hold_off() {
    let cfg = ElectionConfig::default();
    let opts = crate::kube::EndpointOptions {
        server: Some("http://127.0.0.1:9".into()),
        ..Default::default()
    };
    let endpoint = crate::kube::Endpoint::resolve(&opts, &|_| None).unwrap();
    let client = Client::new(endpoint, crate::kube::ClientConfig::default()).unwrap();
    let l = Arc::new(Leadership::new(&cfg, Arc::new(Metrics::default())));
    let mut e = Elector::new(
        Box::new(Api(client)),
        cfg,
        "ns".into(),
        "us".into(),
        l.clone(),
        Box::new(|_| {}),
    );
    let until = Instant::now() + Duration::from_millis(80);
    e.hold_off = Some(HoldOff { until, told: false });
    e.held(Instant::now(), false);
    assert!(!l.may_write() && !l.is_leader(), "held, not yet leading");
    std::thread::sleep(Duration::from_millis(100));
    e.held(Instant::now(), false);
    assert!(l.may_write(), "the hold-off is over");
    assert!(e.hold_off.is_none());
}

/// A stop ends the retry wait at once, not a retry period later.
#[test]
fn a_stop_ends_the_lease_loop_at_once() {
    let cfg = ElectionConfig {
        retry_period: Duration::from_secs(60),
        ..ElectionConfig::default()
    };
    let opts = crate::kube::EndpointOptions {
        server: Some("http://127.0.0.1:9".into()),
        ..Default::default()
    };
    let endpoint = crate::kube::Endpoint::resolve(&opts, &|_| None).unwrap();
    let once = crate::kube::ClientConfig {
        max_attempts: 1,
        ..Default::default()
    };
    let client = Client::new(endpoint, once).unwrap();
    let l = Arc::new(Leadership::new(&cfg, Arc::new(Metrics::default())));
    let e = Elector::new(
        Box::new(Api(client)),
        cfg,
        "ns".into(),
        "us".into(),
        l,
        Box::new(|_| {}),
    );
    let stop = Arc::new(Stop::new());
    let s = stop.clone();
    let lease_loop = std::thread::spawn(move || e.run(&s));
    std::thread::sleep(Duration::from_millis(200));
    let asked = Instant::now();
    stop.stop();
    lease_loop.join().unwrap();
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "{:?}",
        asked.elapsed()
    );
}

#[test]
fn identities_name_the_pod_and_differ_per_process_start() {
    let env = |k: &str| (k == "POD_NAME").then(|| "op-7c9d".to_string());
    let (a, b) = (identity(&env), identity(&env));
    assert!(a.starts_with("op-7c9d_"), "{a}");
    assert_ne!(a, b);
}
