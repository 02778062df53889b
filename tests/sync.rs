//! The shell tested directly, as sample-controller's tests test its sync
//! handler: a `Reconciler` over stores preloaded with views, an in-process
//! kubesim, one sync, and the exact requests it made.

mod common;

use common::{deployment, model, spec, NAME, NS, V1, V2};
use kubesim::{Sim, SimConfig};
use openmed_operator::controller::cache::MetaView;
use openmed_operator::controller::error::SyncError;
use openmed_operator::controller::sync::Reconciler;
use openmed_operator::kube::{Client, ClientConfig, Endpoint, EndpointOptions};
use openmed_operator::metrics::Metrics;
use openmed_operator::outcome::Outcome;
use openmed_operator::reconcile::{ConfigMapView, DeploymentView, ModelView};
use openmed_operator::runtime::ObjectKey;
use serde_json::{json, Value};
use std::sync::Arc;

struct Fixture {
    sim: Sim,
    rc: Reconciler,
}

impl Fixture {
    /// A cluster with the CRD, the namespace, the team's Deployment and an
    /// OpenMedModel on v1; the stores hold what the watches would.
    fn new() -> Fixture {
        let sim = Sim::start(SimConfig::default()).unwrap();
        let crd: Value = serde_json::from_str(include_str!("../manifests/base/crd.json")).unwrap();
        sim.create(crd).unwrap();
        sim.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}))
            .unwrap();
        sim.create(deployment()).unwrap();
        sim.create(model(spec(V1))).unwrap();
        let opts = EndpointOptions {
            server: Some(sim.url()),
            ..Default::default()
        };
        let client = Client::new(
            Endpoint::resolve(&opts, &|_| None).unwrap(),
            ClientConfig::default(),
        )
        .unwrap();
        let rc = Reconciler::new(Arc::new(client), Arc::new(Metrics::default()));
        let f = Fixture { sim, rc };
        f.settle();
        f.load_stores();
        f.sim.reset_stats();
        f
    }

    /// Wait until the simulated Deployment controller has finished with the
    /// team's Deployment, so nothing changes it behind the stores' back.
    fn settle(&self) {
        let start = std::time::Instant::now();
        loop {
            let d = self.sim.object("apps", "deployments", NS, NAME).unwrap();
            let conds = d["status"]["conditions"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            if conds
                .iter()
                .any(|c| c["reason"] == "NewReplicaSetAvailable")
            {
                return;
            }
            assert!(
                start.elapsed() < std::time::Duration::from_secs(20),
                "{d:#}"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// The stores as the watches would have them now.
    fn load_stores(&self) {
        let key = |o: &Value| ObjectKey::of(o).unwrap();
        let models = self.sim.objects("openmed.ai", "openmedmodels", Some(NS));
        let items = models
            .iter()
            .map(|o| (key(o), ModelView::from_json(o).unwrap()))
            .collect();
        self.rc.caches().writers().models.replace(None, items);
        let deployments = self.sim.objects("apps", "deployments", Some(NS));
        // As the metadata watch lists them: claimed ones left out.
        let metas = deployments
            .iter()
            .filter(|o| o["metadata"]["labels"]["openmed.ai/managed"] != "true")
            .map(|o| {
                let rv = o["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap()
                    .to_string();
                (
                    key(o),
                    MetaView {
                        resource_version: rv,
                    },
                )
            })
            .collect();
        self.rc
            .caches()
            .writers()
            .deployment_meta
            .replace(None, metas);
        let claimed = deployments
            .iter()
            .filter(|o| o["metadata"]["labels"]["openmed.ai/managed"] == "true")
            .map(|o| (key(o), DeploymentView::from_json(o).unwrap()))
            .collect();
        self.rc
            .caches()
            .writers()
            .deployments
            .replace(None, claimed);
        let cms = self.sim.objects("", "configmaps", Some(NS));
        let ours = cms
            .iter()
            .filter(|o| {
                o["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "openmed-operator"
            })
            .map(|o| (key(o), ConfigMapView::from_json(o).unwrap()))
            .collect();
        self.rc.caches().writers().config_maps.replace(None, ours);
    }

    /// Set an annotation on the team's Deployment, as a person would.
    fn annotate_deployment(&self, key: &str, value: &str) {
        let patch = json!({"metadata": {"annotations": {key: value}}});
        self.sim
            .merge_patch("apps/v1", "Deployment", NS, NAME, &patch)
            .unwrap();
    }

    fn sync(&self) -> Result<Outcome, SyncError> {
        self.rc.sync(&ObjectKey::new(NS, NAME))
    }

    /// Every request since the last look, as "VERB resource[/name][/sub] code".
    fn requests(&self) -> Vec<String> {
        let out = self
            .sim
            .requests()
            .iter()
            .map(|r| {
                let tail: Vec<&str> = r.path.rsplit('/').take(3).collect();
                let what = match tail.as_slice() {
                    ["status", name, kind] => format!("{kind}/{name}/status"),
                    [name, kind, _] if !kind.ends_with(NS) && *kind != "namespaces" => {
                        format!("{kind}/{name}")
                    }
                    [kind, ..] => kind.to_string(),
                    [] => String::new(),
                };
                format!("{} {what} {}", r.method, r.status)
            })
            .collect();
        self.sim.reset_stats();
        out
    }
}

const DEPLOY: &str = "deployments/openmed-service";
const MODEL: &str = "openmedmodels/openmed-service";

fn req(method: &str, what: &str, code: u16) -> String {
    format!("{method} {what} {code}")
}

#[test]
fn a_first_sync_makes_exactly_these_requests() {
    let f = Fixture::new();
    assert_eq!(f.sync().unwrap(), Outcome::Applied);
    assert_eq!(
        f.requests(),
        [
            req("GET", DEPLOY, 200),
            req("PATCH", MODEL, 200),
            req("POST", "configmaps", 201),
            req("PATCH", DEPLOY, 200),
            req("PATCH", &format!("{MODEL}/status"), 200),
            req("POST", "events", 201),
        ]
    );
}

/// A model gone from the caches leaves nothing behind in the reconciler:
/// a cluster whose models come and go keeps it no larger than its models
/// (upstream: controller-runtime forgets a request once its object is
/// gone).
#[test]
fn a_deleted_model_leaves_nothing_behind() {
    let f = Fixture::new();
    assert_eq!(f.sync().unwrap(), Outcome::Applied);
    f.settle();
    f.load_stores();
    f.sync().unwrap();
    assert_eq!(f.rc.remembered(), 1, "the model's last pass");
    f.requests();
    f.rc.caches().forget_model(&ObjectKey::new(NS, NAME));
    assert_eq!(f.sync().unwrap(), Outcome::Unchanged);
    assert_eq!(f.rc.remembered(), 0, "a deleted model's passes");
    assert_eq!(f.requests(), Vec::<String>::new(), "no request for it");
}

#[test]
fn a_configmap_the_caches_did_not_know_is_read_and_the_pass_planned_again() {
    let f = Fixture::new();
    // Ours by annotation, but without our label: not in the ConfigMap cache.
    f.sim
        .create(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
            "name": "openmed-service-model-manifest", "namespace": NS,
            "annotations": {"openmed.ai/model-resource": "openmed/openmed-service"}}}),
        )
        .unwrap();
    f.sim.reset_stats();
    assert_eq!(f.sync().unwrap(), Outcome::Applied);
    assert_eq!(
        f.requests(),
        [
            req("GET", DEPLOY, 200),
            req("PATCH", MODEL, 200),
            req("POST", "configmaps", 409),
            req("GET", "configmaps/openmed-service-model-manifest", 200),
            req("PATCH", "configmaps/openmed-service-model-manifest", 200),
            req("PATCH", DEPLOY, 200),
            req("PATCH", &format!("{MODEL}/status"), 200),
            req("POST", "events", 201),
        ]
    );
}

#[test]
fn a_conflict_is_re_read_and_planned_again() {
    let f = Fixture::new();
    // Someone writes the model after the cache saw it: the cached
    // resourceVersion is stale, so the conditional finalizer patch conflicts.
    f.sim
        .merge_patch(
            "openmed.ai/v1alpha1",
            "OpenMedModel",
            NS,
            NAME,
            &json!({"metadata": {"labels": {"team": "x"}}}),
        )
        .unwrap();
    f.sim.reset_stats();
    assert_eq!(f.sync().unwrap(), Outcome::Applied);
    assert_eq!(
        f.requests(),
        [
            req("GET", DEPLOY, 200),
            req("PATCH", MODEL, 409),
            req("GET", MODEL, 200),
            req("PATCH", MODEL, 200),
            req("POST", "configmaps", 201),
            req("PATCH", DEPLOY, 200),
            req("PATCH", &format!("{MODEL}/status"), 200),
            req("POST", "events", 201),
        ]
    );
}

#[test]
fn a_pass_that_never_settles_stops_after_the_replan_limit() {
    let f = Fixture::new();
    f.sim.fail_next(
        Some("PATCH"),
        "/openmedmodels/openmed-service$",
        409,
        100,
        None,
    );
    let err = f.sync().unwrap_err();
    assert!(
        matches!(
            err,
            SyncError::NotSettled {
                replans: 4,
                last: Some(_)
            }
        ),
        "{err:?}"
    );
    assert!(
        std::error::Error::source(&err).is_some(),
        "the API error is its source"
    );
    let patches = f
        .requests()
        .iter()
        .filter(|r| r.starts_with("PATCH openmedmodels"))
        .count();
    assert_eq!(patches, 4);
}

#[test]
fn a_second_occurrence_of_an_event_in_a_generation_bumps_its_count() {
    let f = Fixture::new();
    f.sync().unwrap();
    f.load_stores();
    // Someone tampers with the ConfigMap: drift corrected, RolloutStarted
    // again in the same generation.
    f.sim
        .merge_patch(
            "v1",
            "ConfigMap",
            NS,
            "openmed-service-model-manifest",
            &json!({"data": {"OPENMED_SERVICE_PRELOAD_MODELS": "tampered"}}),
        )
        .unwrap();
    f.load_stores();
    f.requests();
    f.sync().unwrap();
    let reqs = f.requests();
    assert!(
        reqs.iter().any(|r| r.starts_with("PATCH events/")),
        "{reqs:?}"
    );
    assert!(
        !reqs.iter().any(|r| r.starts_with("POST events")),
        "{reqs:?}"
    );
    let events = f.sim.objects("", "events", Some(NS));
    let started: Vec<&Value> = events
        .iter()
        .filter(|e| e["reason"] == "RolloutStarted")
        .collect();
    assert_eq!(started.len(), 1);
    assert_eq!(started[0]["count"], 2);
}

/// An Event whose post fails is not lost: the sync fails (and is
/// retried), and the next pass, which changes nothing, posts the Event the
/// status says the transition required (`status.lastEvents`).
#[test]
fn an_event_whose_post_failed_is_posted_by_the_next_pass() {
    let f = Fixture::new();
    f.sim.fail_next(Some("POST"), "/events$", 500, 1, None);
    let lost = f.sync().unwrap_err();
    assert!(
        matches!(&lost, SyncError::Api(e) if e.code() == Some(500)),
        "a lost Event fails the sync with the 500: {lost}"
    );
    let status = &f
        .sim
        .object("openmed.ai", "openmedmodels", NS, NAME)
        .unwrap()["status"];
    assert_eq!(status["lastEvents"][0]["reason"], "RolloutStarted");
    assert!(f.sim.objects("", "events", Some(NS)).is_empty());
    f.requests();
    f.sync().unwrap();
    let reqs = f.requests();
    assert_eq!(
        reqs.last().map(String::as_str),
        Some("POST events 201"),
        "{reqs:?}"
    );
    let events = f.sim.objects("", "events", Some(NS));
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["reason"], "RolloutStarted");
    // And only once.
    f.sync().unwrap();
    assert!(!f.requests().iter().any(|r| r.contains("events")));
}

/// A pass that changes nothing but owes an Event whose post fails again
/// stays unsettled: the retry posts the Event, rather than skip the
/// resource as settled (§6, §9.7).
#[test]
fn a_quiet_pass_whose_owed_event_fails_is_retried_until_it_posts() {
    let f = Fixture::new();
    // Every post fails until a pass writes nothing else: that pass is
    // quiet, its only request the owed Event's post.
    let mut quiet = false;
    for _ in 0..5 {
        f.requests();
        f.sim.fail_next(Some("POST"), "/events$", 500, 1, None);
        let failed = f.sync().unwrap_err();
        assert!(
            matches!(&failed, SyncError::Api(e) if e.code() == Some(500)),
            "the failed post fails the sync: {failed}"
        );
        if f.requests() == [req("POST", "events", 500)] {
            quiet = true;
            break;
        }
    }
    assert!(quiet, "no pass was quiet");
    assert!(f.sim.objects("", "events", Some(NS)).is_empty());
    f.sync().unwrap();
    let reqs = f.requests();
    assert_eq!(reqs, [req("POST", "events", 201)]);
    assert_eq!(f.sim.objects("", "events", Some(NS)).len(), 1);
}

/// Found by the soak (seed 951881290): the post of a block's Event failed,
/// then the spec changed while the block stayed. The status is not a new
/// transition, so the Event owed under the first generation is still posted.
#[test]
fn an_owed_event_survives_a_spec_change_that_keeps_the_block() {
    let f = Fixture::new();
    f.sim.delete("apps/v1", "Deployment", NS, NAME).unwrap();
    f.load_stores();
    f.sim.fail_next(Some("POST"), "/events$", 500, 1, None);
    let lost = f.sync().unwrap_err();
    assert!(
        matches!(&lost, SyncError::Api(e) if e.code() == Some(500)),
        "a lost Event fails the sync with the 500: {lost}"
    );
    let model = f
        .sim
        .object("openmed.ai", "openmedmodels", NS, NAME)
        .unwrap();
    assert_eq!(model["status"]["lastEvents"][0]["reason"], "TargetNotFound");
    assert!(f.sim.objects("", "events", Some(NS)).is_empty());
    let change = json!({"spec": {"version": V2}});
    f.sim
        .merge_patch("openmed.ai/v1alpha1", "OpenMedModel", NS, NAME, &change)
        .unwrap();
    f.load_stores();
    f.sync().unwrap();
    let events = f.sim.objects("", "events", Some(NS));
    assert_eq!(events.len(), 1, "{events:#?}");
    assert_eq!(events[0]["reason"], "TargetNotFound");
    let name = events[0]["metadata"]["name"].as_str().unwrap();
    assert!(
        name.contains("targetnotfound-1-"),
        "under generation 1: {name}"
    );
    f.sync().unwrap();
    assert_eq!(
        f.sim.objects("", "events", Some(NS)).len(),
        1,
        "posted once"
    );
}

/// The name of an Event held by a deleted resource of the same
/// name: the new resource's Event gets a name of its own, and no count bump
/// lands on the old one.
#[test]
fn an_event_name_held_by_another_object_is_never_bumped() {
    let f = Fixture::new();
    let old = json!({"apiVersion": "v1", "kind": "Event", "metadata": {
        "name": openmed_operator::model::names::event_name(NAME, "RolloutStarted", 1), "namespace": NS},
        "involvedObject": {"kind": "OpenMedModel", "name": NAME, "namespace": NS, "uid": "deleted-uid"},
        "reason": "RolloutStarted", "message": "old", "count": 1, "type": "Normal"});
    f.sim.create(old).unwrap();
    f.sim.reset_stats();
    f.sync().unwrap();
    let uid = f
        .sim
        .object("openmed.ai", "openmedmodels", NS, NAME)
        .unwrap()["metadata"]["uid"]
        .clone();
    let events = f.sim.objects("", "events", Some(NS));
    let mine: Vec<&Value> = events
        .iter()
        .filter(|e| e["involvedObject"]["uid"] == uid)
        .collect();
    assert_eq!(mine.len(), 1, "{events:#?}");
    let theirs: Vec<&Value> = events
        .iter()
        .filter(|e| e["involvedObject"]["uid"] == "deleted-uid")
        .collect();
    assert_eq!(theirs[0]["count"], 1, "the old Event is untouched");
}

/// A target the caches have not seen yet (a watch reconnecting)
/// is read before TargetNotFound is reported.
#[test]
fn a_target_missing_from_the_caches_is_read_before_it_is_reported_absent() {
    let f = Fixture::new();
    // The metadata cache has not caught up with the Deployment.
    f.rc.caches()
        .writers()
        .deployment_meta
        .replace(None, vec![]);
    f.sync().unwrap();
    let status = &f
        .sim
        .object("openmed.ai", "openmedmodels", NS, NAME)
        .unwrap()["status"];
    assert_ne!(
        status["conditions"][0]["reason"], "TargetNotFound",
        "{status:#}"
    );
    assert_eq!(status["phase"], "RollingOut");
    let events = f.sim.objects("", "events", Some(NS));
    assert!(
        events.iter().all(|e| e["reason"] != "TargetNotFound"),
        "{events:#?}"
    );
}

/// Syncs until a pass changes nothing, the stores reloaded before each, as
/// the watches would; how many passes it took.
fn converge(f: &Fixture) -> usize {
    for pass in 1..=40 {
        f.settle();
        f.load_stores();
        if f.sync().unwrap() == Outcome::Unchanged {
            return pass;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("no quiet pass in 40");
}

/// The fixture converged: its resource's last pass changed nothing.
fn settled() -> (Fixture, ObjectKey) {
    let f = Fixture::new();
    let key = ObjectKey::new(NS, NAME);
    converge(&f);
    assert!(f.rc.is_settled(&key));
    (f, key)
}

#[test]
fn a_full_pass_leaves_settled_what_the_caches_alone_decide() {
    let (f, key) = settled();
    f.requests();
    // Every eighth resync period (§6): planned again from the same caches,
    // this resource would plan the same nothing.
    f.rc.unsettle_reads();
    assert!(
        f.rc.is_settled(&key),
        "a full pass re-plans a cache-only resource"
    );
    assert_eq!(f.sync().unwrap(), Outcome::Unchanged);
    assert_eq!(f.requests(), Vec::<String>::new());
}

/// Settled per resource (§6): what another resource's pass reads or
/// writes changing leaves this one settled, so a resync after a busy
/// convergence passes only what is unsettled; a change to what this one
/// read unsettles it.
#[test]
fn a_settled_resource_stays_settled_while_only_others_change() {
    let (f, key) = settled();
    let mut d = deployment();
    d["metadata"]["name"] = json!("other");
    d["metadata"]["uid"] = json!("dep-uid-2");
    f.sim.create(d).unwrap();
    let mut other = model(spec(V1));
    other["metadata"]["name"] = json!("other");
    other["metadata"]["uid"] = json!("uid-2");
    f.sim.create(other).unwrap();
    f.load_stores();
    assert!(
        f.rc.is_settled(&key),
        "another model's objects unsettled it"
    );
    assert_eq!(f.rc.unsettled_keys(), vec![ObjectKey::new(NS, "other")]);
    f.requests();
    assert_eq!(f.sync().unwrap(), Outcome::Unchanged);
    assert_eq!(f.requests(), Vec::<String>::new(), "settled: no pass");

    // Its own Deployment changes: the next sync is a full pass.
    f.annotate_deployment("team", "other-team");
    f.load_stores();
    assert!(!f.rc.is_settled(&key), "its Deployment changed");
    let mut unsettled = f.rc.unsettled_keys();
    unsettled.sort();
    assert_eq!(unsettled, vec![key.clone(), ObjectKey::new(NS, "other")]);
}

#[test]
fn a_full_pass_reads_again_an_owner_no_cache_shows() {
    let f = Fixture::new();
    let key = ObjectKey::new(NS, NAME);
    // The Deployment names an owner in a namespace the caches do not hold.
    f.sim
        .create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "elsewhere"}}))
        .unwrap();
    let mut other = model(spec(V1));
    other["metadata"] = json!({"name": "other", "namespace": "elsewhere"});
    f.sim.create(other).unwrap();
    f.annotate_deployment("openmed.ai/model-resource", "elsewhere/other");
    converge(&f);
    let status = &f
        .sim
        .object("openmed.ai", "openmedmodels", NS, NAME)
        .unwrap()["status"];
    assert_eq!(
        status["conditions"][0]["reason"], "TargetConflict",
        "{status:#}"
    );
    assert!(f.rc.is_settled(&key));
    f.requests();
    assert_eq!(f.sync().unwrap(), Outcome::Unchanged);
    assert_eq!(
        f.requests(),
        Vec::<String>::new(),
        "settled: no pass, no read"
    );

    // The owner goes, and no watch of ours can tell: the full pass reads it
    // again, finds it gone and adopts the Deployment.
    f.sim
        .delete("openmed.ai/v1alpha1", "OpenMedModel", "elsewhere", "other")
        .unwrap();
    f.rc.unsettle_reads();
    assert!(!f.rc.is_settled(&key));
    assert_eq!(f.sync().unwrap(), Outcome::Applied);
    let seen = f.requests();
    assert_eq!(seen[0], req("GET", "openmedmodels/other", 404), "{seen:#?}");
    assert!(seen.contains(&req("PATCH", DEPLOY, 200)), "{seen:#?}");
}
