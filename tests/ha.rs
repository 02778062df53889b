//! Two operator processes on one kubesim with `--leader-elect`.
//! Only the lease holder writes; the standby takes over after a SIGKILL
//! (within a lease duration and a retry period), a SIGTERM (at once: the
//! lease is released) and a partition (once the lease expires; the
//! partitioned leader stops writing within its renew deadline and exits),
//! and a Lease deleted or edited by hand never makes two writers.
//! Every write in kubesim's request log is attributed to a process by its
//! User-Agent, which carries the process's identity.
//!
//! Timings are short here: lease 3 s, renew deadline 2 s, retry 1 s.

use openmed_test_support as harness;

use harness::*;
use kubesim::{CutOff, Sim};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// The tests take turns: each runs two operators against a simulator,
/// with timings of a few seconds that a crowded machine would blur.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn turn() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

const LEASE_S: u64 = 3;
const RENEW_S: u64 = 2;
const RETRY_S: u64 = 1;

fn start(sim: &Sim, dir: &std::path::Path, pod: &str, extra: &[&str]) -> Operator {
    let (lease, renew, retry) = (
        LEASE_S.to_string(),
        RENEW_S.to_string(),
        RETRY_S.to_string(),
    );
    let mut args = vec![
        "--leader-elect",
        "--lease-namespace",
        OPERATOR_NS,
        "--lease-duration-seconds",
        &lease,
        "--renew-deadline-seconds",
        &renew,
        "--retry-period-seconds",
        &retry,
    ];
    args.extend(extra);
    Operator::start_with_env(&sim.url(), dir, &args, &[("POD_NAME", pod)])
}

/// The Lease's holder (empty when released or absent), from `lease`.
fn holder_of(sim: &Sim, lease: &str) -> String {
    sim.objects("coordination.k8s.io", "leases", Some(OPERATOR_NS))
        .into_iter()
        .find(|l| l["metadata"]["name"] == lease)
        .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_string))
        .unwrap_or_default()
}

fn holder(sim: &Sim) -> String {
    holder_of(sim, "openmed-operator")
}

fn wait_holder(sim: &Sim, pod: &str, within: Duration) -> Duration {
    let t = Instant::now();
    while !holder(sim).starts_with(&format!("{pod}_")) {
        assert!(
            t.elapsed() < within,
            "{pod} did not take the lease within {within:?} (holder {:?})",
            holder(sim)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    t.elapsed()
}

/// Every write that landed (2xx, not a read, not the Lease), in arrival
/// order, with the pod that sent it (from the User-Agent's identity).
fn writes_by_pod(sim: &Sim) -> Vec<(u64, String)> {
    sim.requests()
        .into_iter()
        .filter(|r| r.method != "GET" && (200..300).contains(&r.status))
        .filter(|r| r.resource != "leases" && r.user_agent.starts_with("openmed-operator/"))
        .map(|r| {
            let who = r
                .user_agent
                .split(['(', '_'])
                .nth(1)
                .unwrap_or("?")
                .to_string();
            (r.at_ms, who)
        })
        .collect()
}

/// Writers took turns once each: no process wrote again after another
/// had started writing.
fn assert_single_writer(writes: &[(u64, String)]) -> Vec<String> {
    let mut turns: Vec<String> = Vec::new();
    for (_, who) in writes {
        if turns.last() != Some(who) {
            assert!(
                !turns.contains(who),
                "{who} wrote again after another writer: turns {turns:?} then {who}"
            );
            turns.push(who.clone());
        }
    }
    turns
}

/// Our Events, each posted once (a second post of the same Event would
/// bump its count or make a twin with the same reason and message).
fn assert_no_event_twice(sim: &Sim) {
    let evs: Vec<Value> = sim.objects("", "events", Some(NS));
    let mut seen = std::collections::HashSet::new();
    for e in &evs {
        assert!(e["count"].as_i64().unwrap_or(1) <= 1, "posted twice: {e}");
        let key = (
            e["involvedObject"]["uid"].to_string(),
            e["reason"].to_string(),
            e["message"].to_string(),
        );
        assert!(seen.insert(key), "an Event twice: {e}");
    }
}

fn cluster(n: usize) -> Sim {
    let sim = start_sim(fast());
    for i in 0..n {
        sim.create(deployment(&format!("svc-{i}"), 2)).unwrap();
        sim.create(model(&format!("m-{i}"), &format!("svc-{i}"), V1, 600))
            .unwrap();
    }
    sim
}

/// `n` models served by op-a, the leader, and op-b, a synced standby.
fn leader_and_standby(n: usize, tag: &str) -> (Sim, std::path::PathBuf, Operator, Operator) {
    let sim = cluster(n);
    let dir = tmpdir(tag);
    let a = start(&sim, &dir, "op-a", &[]);
    wait_holder(&sim, "op-a", WAIT);
    serving_all(&sim, n, V1);
    let mut b = start(&sim, &dir, "op-b", &[]);
    b.wait_ready();
    (sim, dir, a, b)
}

fn serving_all(sim: &Sim, n: usize, version: &str) {
    for i in 0..n {
        wait_serving(sim, &format!("m-{i}"), version);
    }
}

fn metric(op: &mut Operator, series: &str) -> f64 {
    sample(&op.http_get("/metrics").1, series).unwrap_or(-1.0)
}

/// The standby is ready (synced) but does not write; after the leader's
/// SIGKILL mid-rollout it takes over within a lease duration and a retry
/// period, finishes the rollout, and neither repeats a rollout nor posts an
/// Event twice.
#[test]
fn the_standby_takes_over_after_the_leader_is_killed() {
    let _turn = turn();
    let n = 3;
    let (sim, _dir, mut a, mut b) = leader_and_standby(n, "ha-kill");
    assert_eq!(metric(&mut a, "openmed_operator_leader"), 1.0);
    assert_eq!(metric(&mut b, "openmed_operator_leader"), 0.0);
    for i in 0..n {
        set_version(&sim, &format!("m-{i}"), V2);
    }
    wait_phase(&sim, "m-0", "RollingOut", "RolloutInProgress");
    a.kill();
    let took = wait_holder(&sim, "op-b", WAIT);
    eprintln!("takeover after SIGKILL: {took:?}");
    assert!(
        took <= Duration::from_secs(LEASE_S + RETRY_S + 2),
        "takeover took {took:?}"
    );
    serving_all(&sim, n, V2);
    assert_eq!(metric(&mut b, "openmed_operator_leader"), 1.0);
    let turns = assert_single_writer(&writes_by_pod(&sim));
    assert_eq!(turns.last().map(String::as_str), Some("op-b"), "{turns:?}");
    assert_no_event_twice(&sim);
    for i in 0..n {
        let started = events(&sim, &format!("m-{i}"))
            .iter()
            .filter(|r| *r == "RolloutStarted")
            .count();
        assert_eq!(started, 2, "m-{i}: one RolloutStarted for v1, one for v2");
    }
    b.assert_clean_exit();
}

/// SIGTERM: the leader finishes, releases the lease, and the standby holds
/// it within two seconds.
#[test]
fn a_terminated_leader_hands_over_at_once() {
    let _turn = turn();
    let (sim, _dir, mut a, mut b) = leader_and_standby(1, "ha-term");
    let t = Instant::now();
    a.assert_clean_exit();
    let took = wait_holder(&sim, "op-b", WAIT);
    let since_term = t.elapsed();
    eprintln!("takeover after SIGTERM: {since_term:?} from the signal, {took:?} after the exit");
    // Handed over, not expired: op-a cleared the holder on its way out.
    let released = sim.requests().into_iter().any(|r| {
        r.user_agent.contains("(op-a_")
            && r.resource == "leases"
            && r.method == "PUT"
            && r.status == 200
    }) && sim.objects("coordination.k8s.io", "leases", Some(OPERATOR_NS))[0]["spec"]
        ["leaseTransitions"]
        == 1;
    assert!(released, "op-a did not release the lease");
    assert!(since_term < Duration::from_secs(3), "{since_term:?}");
    the_new_leader_serves_alone(&sim, &mut b);
}

/// Fencing: the leader's Lease requests black-holed while its other
/// writes would still land. It stops writing within its renew deadline
/// (the gate on the write path, not a check at the top of a pass), exits,
/// and the standby takes over once the lease has expired; no write of the
/// old leader lands after the new leader's first.
#[test]
fn a_partitioned_leader_stops_writing_before_its_lease_can_expire() {
    let _turn = turn();
    let n = 4;
    let (sim, _dir, mut a, mut b) = leader_and_standby(n, "ha-fence");
    let cut_at = sim.clock_ms();
    sim.cut_off_path("op-a_", "/leases", CutOff::Hang);
    // Keep giving the old leader work while it can no longer renew.
    for (i, v) in [V2, V1, V2, V1].iter().enumerate() {
        set_version(&sim, &format!("m-{i}"), v);
        std::thread::sleep(Duration::from_millis(400));
    }
    // Past its renew deadline (at most RENEW_S after the cut), before it
    // notices and exits: its watches still tell it of this change, and
    // only the gate on the write path keeps the write in.
    let deadline = cut_at + RENEW_S * 1000;
    // (op-a may have renewed just before the cut; its deadline is then a
    // little later, and this change may simply be its last write.)
    std::thread::sleep(Duration::from_millis(
        (deadline + 150).saturating_sub(sim.clock_ms()),
    ));
    set_version(&sim, "m-0", V1);
    let exited = wait_for(
        "the partitioned leader to exit",
        || a.exited(),
        Option::is_some,
    );
    assert!(
        exited.is_some_and(|s| !s.success()),
        "{exited:?}\n{}",
        a.log()
    );
    let fenced = a.log().matches("not the leader").count();
    eprintln!("writes the gate kept in after the deadline: {fenced} logged");
    wait_holder(&sim, "op-b", WAIT);
    sim.reconnect("op-a_");
    for (i, v) in [V1, V1, V2, V1].iter().enumerate() {
        wait_serving(&sim, &format!("m-{i}"), v);
    }
    // The new leader has work of its own.
    set_version(&sim, "m-3", V2);
    wait_serving(&sim, "m-3", V2);
    let writes = writes_by_pod(&sim);
    let last_a = writes
        .iter()
        .filter(|(_, w)| w == "op-a")
        .map(|(t, _)| *t)
        .max();
    let first_b = writes
        .iter()
        .filter(|(_, w)| w == "op-b")
        .map(|(t, _)| *t)
        .min();
    eprintln!(
        "cut at {cut_at} ms; op-a's last write at {last_a:?} ms; op-b's first at {first_b:?} ms"
    );
    let (last_a, first_b) = (last_a.unwrap_or(0), first_b.unwrap_or(0));
    // Its last renewal that landed: the gate is open RENEW_S after it was
    // sent (before it arrived), and a write arrives a little after the
    // gate let it through.
    let renewed = sim
        .requests()
        .into_iter()
        .filter(|r| r.user_agent.contains("(op-a_") && r.resource == "leases")
        .filter(|r| (200..300).contains(&r.status))
        .map(|r| r.at_ms)
        .max()
        .unwrap_or(0);
    assert!(last_a > cut_at, "op-a kept writing while it could");
    assert!(
        last_a < renewed + RENEW_S * 1000 + 250,
        "op-a wrote at {last_a} ms, past its renew deadline (renewed at {renewed} ms)"
    );
    assert!(
        first_b > last_a,
        "op-b wrote at {first_b} ms, before op-a stopped"
    );
    assert_single_writer(&writes);
    assert!(a.log().contains("lost the leader lease"), "{}", a.log());
    b.assert_clean_exit();
}

/// Someone deletes the Lease by hand, three times, then clears its holder
/// by hand, while models keep changing. The old leader stops writing as
/// soon as it learns the Lease is gone or another's, and exits; the
/// standby, which saw it lead, holds the Lease it re-creates (or takes
/// over) for a lease duration before writing. After every change the
/// writers take turns (the old one's last write before the new one's
/// first), and a fresh replica joins so there are two again.
#[test]
fn deleting_or_editing_the_lease_never_makes_two_writers() {
    let _turn = turn();
    let n = 3;
    let (sim, dir, mut leader, mut standby) = leader_and_standby(n, "ha-delete");
    let (mut leader_pod, mut standby_pod) = ("op-a", "op-b");
    let mut versions = vec![V1; n];
    let mut changed_at = Vec::new();
    let rounds = [
        ("delete", "op-c"),
        ("delete", "op-d"),
        ("delete", "op-e"),
        ("clear the holder", "op-f"),
    ];
    for (k, (how, fresh_pod)) in rounds.into_iter().enumerate() {
        // Writes under way when the Lease goes, and after.
        churn(&sim, &mut versions, Duration::from_millis(600));
        changed_at.push(sim.clock_ms());
        take_the_lease_away(&sim, how);
        churn(&sim, &mut versions, Duration::from_secs(LEASE_S + 2));
        let exited = exit_within(&mut leader, Duration::from_secs(5));
        for (i, v) in versions.iter().enumerate() {
            wait_serving(&sim, &format!("m-{i}"), v);
        }
        report_turns(&writes_by_pod(&sim), &changed_at, k, how);
        assert!(
            exited.is_some_and(|s| !s.success()),
            "{leader_pod} did not exit after the Lease changed ({how}): {exited:?}\n{}",
            leader.log()
        );
        assert!(
            leader.log().contains("lost the leader lease"),
            "{}",
            leader.log()
        );
        wait_holder(&sim, standby_pod, WAIT);
        let mut fresh = start(&sim, &dir, fresh_pod, &[]);
        fresh.wait_ready();
        leader = std::mem::replace(&mut standby, fresh);
        (leader_pod, standby_pod) = (standby_pod, fresh_pod);
    }
    let turns = assert_single_writer(&writes_by_pod(&sim));
    eprintln!("writers in turn: {turns:?}");
    assert_eq!(turns, ["op-a", "op-b", "op-c", "op-d", "op-e"]);
    // Versions flip back and forth, so a message recurs (at another
    // generation, under another name); none was posted twice.
    for e in sim.objects("", "events", Some(NS)) {
        assert!(e["count"].as_i64().unwrap_or(1) <= 1, "posted twice: {e}");
    }
    leader.assert_clean_exit();
    standby.assert_clean_exit();
}

/// As an admin would: `kubectl delete lease`, or an edit that clears the
/// holder (not a release: the duration is left as it was).
fn take_the_lease_away(sim: &Sim, how: &str) {
    let (api, kind, name) = ("coordination.k8s.io/v1", "Lease", "openmed-operator");
    match how {
        "delete" => sim.delete(api, kind, OPERATOR_NS, name),
        _ => {
            let clear = json!({"spec": {"holderIdentity": ""}});
            sim.merge_patch(api, kind, OPERATOR_NS, name, &clear)
                .map(drop)
        }
    }
    .unwrap();
}

/// Flips the models' versions one after another for `how_long`.
fn churn(sim: &Sim, versions: &mut [&'static str], how_long: Duration) {
    let t = Instant::now();
    let mut i = 0;
    while t.elapsed() < how_long {
        let m = i % versions.len();
        versions[m] = if versions[m] == V1 { V2 } else { V1 };
        set_version(sim, &format!("m-{m}"), versions[m]);
        i += 1;
        std::thread::sleep(Duration::from_millis(150));
    }
}

fn exit_within(op: &mut Operator, within: Duration) -> Option<std::process::ExitStatus> {
    let t = Instant::now();
    while t.elapsed() < within {
        if let Some(st) = op.exited() {
            return Some(st);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// The writes from the Lease's change `k` to the next: who wrote, in
/// turn, and when after the change; one writer's turn must be over before
/// the next's.
fn report_turns(writes: &[(u64, String)], changes: &[u64], k: usize, how: &str) {
    let from = changes[k];
    let to = changes.get(k + 1).copied().unwrap_or(u64::MAX);
    let seg: Vec<(u64, String)> = writes
        .iter()
        .filter(|(t, _)| (from..to).contains(t))
        .cloned()
        .collect();
    let mut turns: Vec<(String, usize, u64, u64)> = Vec::new();
    for (t, who) in &seg {
        match turns.last_mut() {
            Some(turn) if turn.0 == *who => (turn.1, turn.3) = (turn.1 + 1, t - from),
            _ => turns.push((who.clone(), 1, t - from, t - from)),
        }
    }
    let shown: Vec<String> = turns
        .iter()
        .map(|(w, n, a, b)| format!("{w}: {n} writes at +{a}..+{b} ms"))
        .collect();
    let turns = shown.join("; then ");
    eprintln!("change {} ({how}) at {from} ms: {turns}", k + 1);
    assert_single_writer(&seg);
}

/// A leader cut off from the API server altogether (every request
/// refused) exits within its renew deadline; the standby takes over once
/// the lease has expired and carries on.
#[test]
fn a_leader_cut_off_from_the_api_server_exits_and_the_standby_carries_on() {
    let _turn = turn();
    let (sim, _dir, mut a, mut b) = leader_and_standby(1, "ha-cut");
    let t = Instant::now();
    sim.cut_off("op-a_", CutOff::Refuse);
    let exited = wait_for("the cut-off leader to exit", || a.exited(), Option::is_some);
    let gone = t.elapsed();
    assert!(exited.is_some_and(|s| !s.success()), "{exited:?}");
    assert!(
        gone < Duration::from_secs(RENEW_S + RETRY_S + 2),
        "exited after {gone:?}"
    );
    let took = wait_holder(&sim, "op-b", WAIT) + gone;
    eprintln!("cut off: the leader exited after {gone:?}; the standby held the lease {took:?} after the cut");
    the_new_leader_serves_alone(&sim, &mut b);
}

/// Two shards with disjoint selectors (and so their own Leases) each
/// manage their own OpenMedModels only.
#[test]
fn two_shards_manage_their_own_models_only() {
    let _turn = turn();
    let sim = start_sim(fast());
    for (name, shard) in [("m-0", "a"), ("m-1", "b")] {
        let svc = format!("svc-{name}");
        sim.create(deployment(&svc, 1)).unwrap();
        let mut m = model(name, &svc, V1, 600);
        m["metadata"]["labels"] = serde_json::json!({"shard": shard});
        sim.create(m).unwrap();
    }
    let dir = tmpdir("ha-shards");
    // As docs/operations.md says: each shard's Lease name added to the Role.
    let role = "openmed-operator-leader-election";
    let rules = json!({"rules": [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "update"],
         "resourceNames": ["openmed-operator-a", "openmed-operator-b"]}]});
    sim.merge_patch(
        "rbac.authorization.k8s.io/v1",
        "Role",
        OPERATOR_NS,
        role,
        &rules,
    )
    .unwrap();
    let shard = |s: &str| {
        [
            "--selector".to_string(),
            format!("shard={s}"),
            "--lease-name".into(),
            format!("openmed-operator-{s}"),
        ]
    };
    let args_a = shard("a");
    let args_a: Vec<&str> = args_a.iter().map(String::as_str).collect();
    let mut a = start(&sim, &dir, "shard-a", &args_a);
    wait_serving(&sim, "m-0", V1);
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        status(&sim, "m-1")["phase"].is_null(),
        "shard a touched shard b's model"
    );
    let args_b = shard("b");
    let args_b: Vec<&str> = args_b.iter().map(String::as_str).collect();
    let mut b = start(&sim, &dir, "shard-b", &args_b);
    wait_serving(&sim, "m-1", V1);
    let leases: Vec<String> = sim
        .objects("coordination.k8s.io", "leases", Some(OPERATOR_NS))
        .iter()
        .map(|l| l["metadata"]["name"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(leases.len(), 2, "one Lease per shard: {leases:?}");
    for s in ["a", "b"] {
        let pod = holder_of(&sim, &format!("openmed-operator-{s}"));
        assert!(
            pod.starts_with(&format!("shard-{s}_")),
            "shard {s}'s Lease: {pod}"
        );
    }
    // Neither shard wrote to the other's model or Deployment.
    for (pod, other) in [("shard-a", "m-1"), ("shard-b", "m-0")] {
        let crossed: Vec<String> = sim
            .requests()
            .into_iter()
            .filter(|r| r.method != "GET" && r.user_agent.contains(pod))
            .filter(|r| {
                let theirs = [
                    other.to_string(),
                    format!("svc-{other}"),
                    format!("{other}-model-manifest"),
                ];
                r.path.split('/').any(|seg| theirs.iter().any(|t| t == seg))
            })
            .map(|r| format!("{} {}", r.method, r.path))
            .collect();
        assert_eq!(
            crossed,
            Vec::<String>::new(),
            "{pod} wrote to {other}'s objects"
        );
    }
    a.assert_clean_exit();
    b.assert_clean_exit();
}

/// After a takeover: a change is served, no two pods ever wrote at once,
/// and the new leader stops cleanly.
fn the_new_leader_serves_alone(sim: &Sim, b: &mut Operator) {
    set_version(sim, "m-0", V2);
    serving_all(sim, 1, V2);
    assert_single_writer(&writes_by_pod(sim));
    b.assert_clean_exit();
}
