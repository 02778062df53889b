//! What the operator holds for each converged model, in bytes asked of the
//! allocator and kept (the counting build, `src/memory/count.rs`): its
//! view, its Deployment's and ConfigMap's, the index entries that wake it,
//! and the Events it posted. Objects are as a real API server returns them
//! (36-character uids, the operator's own manifest and hash), decoded as a
//! watch decodes them. Each part has a budget (docs/performance.md, memory
//! per resource): a view that grows fails here, and the table printed says
//! where the bytes are.

use super::caches::Caches;
use super::events::Posted;
use super::index::TargetIndex;
use crate::kube::fields::tests::decoded;
use crate::live_view::{RecentEvents, RecordedEvent};
use crate::memory::count::{thread_live, thread_slots};
use crate::reconcile::{ConfigMapView, DeploymentView, Lookups, ModelObject};
use crate::runtime::ObjectKey;
use serde_json::{json, Value};

const MODELS: usize = 1000;

/// The bytes the closure left held, asked by this thread, and the bytes of
/// musl's slots they take.
fn held(f: impl FnOnce()) -> (i64, i64) {
    let before = (thread_live(), thread_slots());
    f();
    (thread_live() - before.0, thread_slots() - before.1)
}

fn uid(kind: u32, i: usize) -> String {
    format!("{kind:08x}-6598-4d64-a52c-{i:012x}")
}

const VERSION: &str = "OpenMed/OpenMed-PII-SuperClinical-Small-44M-v1";
const HASH: &str = "sha256:1ecb6f1b4e1beae6703ed08f7d73ff5bfc0cadd43420314e7d416279ac7f30b1";

fn model(i: usize) -> Value {
    let spec = json!({"family": "PII", "manifestConfigMapName": format!("bench-{i:05}-model-manifest"),
        "replicas": 1, "targetRef": {"containerName": "openmed-service", "name": format!("bench-{i:05}")},
        "tier": "Small", "version": VERSION});
    let cond = |t: &str, s: &str, r: &str, m: &str| {
        json!({"lastTransitionTime": "2026-12-07T09:04:17Z", "message": m,
            "observedGeneration": 2, "reason": r, "status": s, "type": t})
    };
    json!({"metadata": {"name": format!("bench-{i:05}"), "namespace": "bench", "uid": uid(1, i),
        "generation": 2, "resourceVersion": format!("{}", 1_234_567 + i),
        "finalizers": ["openmed.ai/finalizer"]},
      "spec": spec.clone(),
      "status": {"activeVersion": VERSION, "appliedSpecHash": HASH, "conditions": [
            cond("Ready", "True", "RolloutSucceeded", &format!("{VERSION} is serving")),
            cond("Progressing", "False", "RolloutComplete", &format!("rollout of {VERSION} complete")),
            cond("Degraded", "False", "Healthy", "no failure"),
            cond("RolledBack", "False", "NotRequested", "no rollback requested")],
        "desiredSpecHash": HASH, "desiredVersion": VERSION, "lastSuccessfulSpec": spec,
        "manifestHash": HASH, "observedGeneration": 2, "phase": "Ready", "rollbackCount": 0,
        "targetDeploymentGeneration": 3, "targetDeploymentUID": uid(2, i)}})
}

fn deployment(i: usize) -> Value {
    let owner = format!("bench/bench-{i:05}");
    json!({"metadata": {"name": format!("bench-{i:05}"), "namespace": "bench", "uid": uid(2, i),
        "generation": 3, "resourceVersion": format!("{}", 2_234_567 + i),
        "labels": {"openmed.ai/managed": "true", "app": format!("bench-{i:05}")},
        "annotations": {"openmed.ai/model-resource": owner, "deployment.kubernetes.io/revision": "2"}},
      "spec": {"replicas": 1, "progressDeadlineSeconds": 600,
        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
        "template": {"metadata": {"annotations": {"openmed.ai/model-resource": owner,
            "openmed.ai/model-manifest-hash": HASH}},
          "spec": {"containers": [{"name": "openmed-service", "image": "openmed/rest:1",
            "env": [{"name": "OPENMED_SERVICE_PRELOAD_MODELS", "valueFrom": {"configMapKeyRef":
              {"name": format!("bench-{i:05}-model-manifest"), "key": "OPENMED_SERVICE_PRELOAD_MODELS"}}}]}]}}},
      "status": {"observedGeneration": 3, "replicas": 1, "updatedReplicas": 1, "readyReplicas": 1,
        "availableReplicas": 1, "conditions": [
          {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
          {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}]}})
}

fn config_map(i: usize) -> Value {
    let manifest = format!(
        "{{\"apiVersion\":\"openmed.ai/v1\",\"kind\":\"ModelManifest\",\"models\":[{{\"family\":\"PII\",\"tier\":\"Small\",\"version\":\"{VERSION}\"}}]}}\n"
    );
    json!({"metadata": {"name": format!("bench-{i:05}-model-manifest"), "namespace": "bench",
        "uid": uid(3, i), "resourceVersion": format!("{}", 3_234_567 + i),
        "annotations": {"openmed.ai/model-resource": format!("bench/bench-{i:05}")},
        "labels": {"app.kubernetes.io/managed-by": "openmed-operator", "openmed.ai/model-family": "PII"},
        "ownerReferences": [{"apiVersion": "openmed.ai/v1alpha1", "kind": "OpenMedModel",
          "name": format!("bench-{i:05}"), "uid": uid(1, i), "controller": true,
          "blockOwnerDeletion": true}]},
      "data": {"manifest.json": manifest, "OPENMED_SERVICE_PRELOAD_MODELS": VERSION}})
}

/// The Events a model's cold start and one version change post: a
/// rollout started and succeeded, twice.
fn events(i: usize) -> Vec<(String, &'static str, String)> {
    let name = format!("bench-{i:05}");
    let mut out = Vec::new();
    for generation in [1, 2] {
        out.push((
            format!("{name}-rolloutstarted-{generation}-3fa1c09e2b"),
            "RolloutStarted",
            format!("Rolling out {VERSION} to Deployment {name} (spec changed)"),
        ));
        out.push((
            format!("{name}-rolloutsucceeded-{generation}-b20c4f7a91"),
            "RolloutSucceeded",
            format!("Deployment {name} is serving {VERSION}"),
        ));
    }
    out
}

/// Bytes a model for each part, and the part's budget.
#[test]
fn what_the_operator_holds_for_a_model() {
    let caches = Caches::default();
    let index = TargetIndex::default();
    let recent = RecentEvents::default();
    let mut posted = Posted::default();
    let texts: Vec<[Value; 3]> = (0..MODELS)
        .map(|i| [model(i), deployment(i), config_map(i)])
        .collect();
    let lookups: Vec<(ObjectKey, Lookups)> = (0..MODELS)
        .map(|i| {
            let lookups = Lookups {
                deployments: vec![format!("bench-{i:05}")],
                config_maps: vec![format!("bench-{i:05}-model-manifest")],
            };
            (ObjectKey::new("bench", format!("bench-{i:05}")), lookups)
        })
        .collect();
    let event_objects: Vec<Value> = (0..MODELS)
        .flat_map(|i| events(i).into_iter().map(move |e| (i, e)))
        .map(|(i, (id, reason, message))| {
            json!({"metadata": {"name": id, "namespace": "bench"}, "reason": reason,
                "involvedObject": {"uid": uid(1, i)}, "count": 1, "message": message})
        })
        .collect();
    let model_views = held(|| {
        for t in &texts {
            caches.remember_model(decoded::<ModelObject>(&t[0]).unwrap());
        }
    });
    let deployment_views = held(|| {
        for t in &texts {
            caches.remember_deployment(decoded::<DeploymentView>(&t[1]).unwrap(), true);
        }
    });
    let config_map_views = held(|| {
        for t in &texts {
            caches.remember_config_map(decoded::<ConfigMapView>(&t[2]).unwrap());
        }
    });
    let index_entries = held(|| {
        for (k, l) in &lookups {
            index.update(k, Some(l));
        }
    });
    let recent_events = held(|| {
        for (i, e) in event_objects.iter().enumerate() {
            let model = &lookups[i / 4].0;
            let text = |k: &str| e[k].as_str().unwrap_or("");
            let event = RecordedEvent {
                reason: text("reason"),
                type_: "Normal",
                count: 1,
                last: "2026-12-07T09:04:17Z",
                message: text("message"),
            };
            let id = e["metadata"]["name"].as_str().unwrap_or("");
            recent.record(model, id, event);
        }
    });
    let posted_events = held(|| posted.seed(&event_objects));
    // Each part, its budget and what it holds for MODELS models.
    let parts = [
        ("model view", 900, model_views),
        ("claimed Deployment's view", 1050, deployment_views),
        ("ConfigMap view", 775, config_map_views),
        ("target index", 265, index_entries),
        ("the live view's recent Events", 310, recent_events),
        ("posted Events", 250, posted_events),
    ];
    assert_eq!(caches.counts(), (MODELS, MODELS, MODELS));
    let (mut total, mut total_slots) = (0, 0);
    let mut over = Vec::new();
    for (part, budget, (bytes, slots)) in parts {
        let (each, slots) = (bytes / MODELS as i64, slots / MODELS as i64);
        (total, total_slots) = (total + each, total_slots + slots);
        eprintln!("{part:>40}: {each:>5} B a model (budget {budget}), {slots:>5} B in slots");
        if each > budget {
            over.push(format!("{part}: {each} B a model, budget {budget}"));
        }
    }
    eprintln!(
        "{:>40}: {total:>5} B a model, {total_slots:>5} B in slots",
        "in all"
    );
    assert!(over.is_empty(), "over budget: {over:?}");
}
