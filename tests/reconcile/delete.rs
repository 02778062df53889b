//! Deletion (docs/contract.md §7, 9.4; `src/reconcile/delete.rs`): the
//! Deployment handed back, the ConfigMap deleted if it is ours, the
//! finalizer released, and what is left alone.

use crate::common::*;
use crate::world::*;
use openmed_operator::model::spec::empty_manifest_hash;
use openmed_operator::model::EventReason;
use openmed_operator::reconcile::Write;
use serde_json::json;

fn delete_pass(w: &mut World) -> (Tags, Vec<EventReason>) {
    w.delete();
    w.step()
}

#[test]
fn delete_of_an_owned_target() {
    let mut w = World::new(spec(V1));
    w.converge();
    w.model["metadata"]["finalizers"] = json!(["other.io/keep", "openmed.ai/finalizer"]);
    let (tags, ev) = delete_pass(&mut w);
    assert_eq!(tags, ["D~", "CM-", "F-"]);
    assert_eq!(ev, [EventReason::ModelRemoved]);
    assert_eq!(w.model["metadata"]["finalizers"], json!(["other.io/keep"]));
    assert!(w.config_maps.is_empty());
    let d = w.deployment.as_ref().unwrap();
    assert!(d["metadata"]["annotations"]
        .get("openmed.ai/model-resource")
        .is_none());
    assert_eq!(
        d["spec"]["template"]["metadata"]["annotations"]["openmed.ai/model-manifest-hash"],
        empty_manifest_hash().as_str()
    );
    assert_eq!(
        w.preload_env(),
        json!({"name": "OPENMED_SERVICE_PRELOAD_MODELS", "value": ""})
    );
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][1]["env"][0]["value"],
        "not-mine"
    );
    // Again (a retry after a partial failure): nothing of ours is left to do.
    w.model["metadata"]["finalizers"] = json!(["openmed.ai/finalizer"]);
    let (tags, _) = w.step();
    assert_eq!(tags, ["F-"]);
}

#[test]
fn delete_with_foreign_ownership_leaves_things_untouched() {
    let mut w = World::new(spec(V1));
    w.converge();
    w.dep()["metadata"]["annotations"]["openmed.ai/model-resource"] = json!("openmed/other");
    w.dep()["spec"]["template"]["metadata"]["annotations"]["openmed.ai/model-resource"] =
        json!("openmed/other");
    let cm = w
        .config_maps
        .get_mut("openmed-service-model-manifest")
        .unwrap();
    cm["metadata"]["ownerReferences"] = json!([]);
    let before_dep = w.deployment.clone();
    let (tags, ev) = delete_pass(&mut w);
    assert_eq!(tags, ["F-"]);
    assert_eq!(ev, [EventReason::ModelRemovalSkipped]);
    assert_eq!(w.deployment, before_dep);
    assert!(w.config_maps.contains_key("openmed-service-model-manifest"));
}

#[test]
fn delete_of_a_resource_with_an_invalid_spec_falls_back_to_what_was_applied() {
    let mut w = World::new(spec(V1));
    w.converge();
    let mut bad = spec(V1);
    bad["tier"] = json!("Huge");
    w.set_spec(bad);
    w.step();
    assert_eq!(w.status()["phase"], "Failed");
    let (tags, ev) = delete_pass(&mut w);
    assert_eq!(tags, ["D~", "CM-", "F-"]);
    assert_eq!(ev, [EventReason::ModelRemoved]);
}

/// 9.4: of the specs status retains, the one applied is cleaned up after,
/// not merely the first: the container it points at is blanked.
#[test]
fn delete_of_an_invalid_spec_cleans_up_after_the_applied_one_of_several() {
    let mut w = World::new(spec(V1));
    w.converge();
    let mut second = spec(V2);
    second["targetRef"] = json!({"name": "openmed-service", "containerName": "proxy"});
    w.set_spec(second.clone());
    w.converge();
    let proxy_env =
        |w: &mut World| w.dep()["spec"]["template"]["spec"]["containers"][1]["env"].clone();
    assert_ne!(proxy_env(&mut w)[0]["value"], "not-mine");
    let mut bad = second;
    bad["tier"] = json!("Huge");
    w.set_spec(bad);
    w.step();
    assert_eq!(w.status()["phase"], "Failed");
    let (tags, _) = delete_pass(&mut w);
    assert_eq!(
        proxy_env(&mut w)[0],
        json!({"name": "OPENMED_SERVICE_PRELOAD_MODELS", "value": ""}),
        "the applied spec's container still points at the model: {tags:?}"
    );
}

#[test]
fn delete_with_nothing_applied_just_releases() {
    let mut w = World::new(json!({"family": "PII"}));
    w.model["metadata"]["finalizers"] = json!(["openmed.ai/finalizer"]);
    let (tags, ev) = delete_pass(&mut w);
    assert_eq!(tags, ["F-"]);
    assert!(ev.is_empty());
    assert_eq!(w.model["metadata"]["finalizers"], json!([]));
}

#[test]
fn delete_recognises_the_kopf_finalizer() {
    let mut w = World::new(spec(V1));
    w.converge();
    w.model["metadata"]["finalizers"] = json!(["kopf.zalando.org/KopfFinalizerMarker"]);
    let (tags, _) = delete_pass(&mut w);
    assert_eq!(tags, ["D~", "CM-", "F-"]);
    assert_eq!(w.model["metadata"]["finalizers"], json!([]));
}

#[test]
fn delete_without_our_finalizer_does_nothing() {
    let mut w = World::new(spec(V1));
    w.converge();
    w.model["metadata"]["finalizers"] = json!(["other.io/keep"]);
    let (tags, ev) = delete_pass(&mut w);
    assert!(tags.is_empty() && ev.is_empty());
}

#[test]
fn no_finalizer_is_added_once_deletion_has_begun() {
    let mut w = World::new(spec(V1));
    w.delete();
    let p = w.plan();
    assert!(p
        .writes
        .iter()
        .all(|x| !matches!(x, Write::AddFinalizer { .. })));
    assert!(p.is_noop());
}

#[test]
fn delete_releases_every_deployment_still_claimed() {
    let mut w = World::new(spec(V1));
    w.converge();
    // A Deployment from an earlier target that still names this owner.
    let mut old = other_deployment("dep-old");
    old["metadata"]["annotations"]["openmed.ai/model-resource"] = json!("openmed/openmed-service");
    old["metadata"]["labels"]["openmed.ai/managed"] = json!("true");
    w.others.insert("dep-old".into(), old);
    let (tags, ev) = delete_pass(&mut w);
    assert_eq!(tags, ["D~", "D~", "CM-", "F-"]);
    assert_eq!(ev, [EventReason::ModelRemoved]);
    let old = &w.others["dep-old"];
    assert!(old["metadata"]["annotations"]
        .get("openmed.ai/model-resource")
        .is_none());
}

#[test]
fn delete_with_the_container_gone_leaves_the_template_alone() {
    let mut w = World::new(spec(V1));
    w.converge();
    w.dep()["spec"]["template"]["spec"]["containers"][0]["name"] = json!("renamed");
    let template = w.dep()["spec"]["template"].clone();
    let (tags, _) = delete_pass(&mut w);
    assert_eq!(
        tags,
        ["D~", "F-"],
        "the ConfigMap is still read by the renamed container"
    );
    assert_eq!(
        w.dep()["spec"]["template"],
        template,
        "no rollout that cannot finish"
    );
    assert!(w.dep()["metadata"]["annotations"]
        .get("openmed.ai/model-resource")
        .is_none());
    assert!(w.config_maps.contains_key("openmed-service-model-manifest"));
}

/// The delete's Event says what was left and why (§7, 9.13): a Deployment
/// another model owns, a ConfigMap someone else owns, a ConfigMap another
/// container still reads; and a Deployment ours to release is not "left".
#[test]
fn a_delete_names_what_it_left_and_why() {
    type Setup = fn(&mut World);
    let cases: [(&str, Setup, &str, bool); 4] = [
        (
            "another model's Deployment",
            |w| {
                let d = w.dep();
                d["metadata"]["annotations"]["openmed.ai/model-resource"] = json!("openmed/other");
                d["spec"]["template"]["metadata"]["annotations"]["openmed.ai/model-resource"] =
                    json!("openmed/other");
            },
            "Deployment openmed-service belongs to another OpenMedModel",
            true,
        ),
        (
            "ours, its template named by another",
            |w| {
                w.dep()["spec"]["template"]["metadata"]["annotations"]
                    ["openmed.ai/model-resource"] = json!("openmed/other");
            },
            "belongs to another",
            false,
        ),
        (
            "someone else's ConfigMap",
            |w| {
                let cm = w.config_maps.get_mut(CM).unwrap();
                cm["metadata"]["annotations"]["openmed.ai/model-resource"] = json!("openmed/other");
                cm["metadata"]["ownerReferences"] = json!([]);
            },
            "ConfigMap openmed-service-model-manifest is not owned by this resource",
            true,
        ),
        (
            "a ConfigMap another container reads",
            |w| {
                let read = w.preload_env();
                w.dep()["spec"]["template"]["spec"]["containers"][1]["env"] = json!([read]);
            },
            "ConfigMap openmed-service-model-manifest is still read by a Deployment; kept",
            true,
        ),
    ];
    for (what, setup, words, said) in cases {
        let mut w = World::new(spec(V1));
        w.converge();
        setup(&mut w);
        w.delete();
        let p = w.plan();
        let messages: Vec<&str> = p.events.iter().map(|e| e.message.as_str()).collect();
        assert_eq!(
            messages.iter().any(|m| m.contains(words)),
            said,
            "{what}: {messages:?}"
        );
        let deletes_cm = p
            .writes
            .iter()
            .any(|x| matches!(x, Write::DeleteConfigMap { .. }));
        assert_eq!(deletes_cm, !said, "{what}: {messages:?}");
    }
}

const CM: &str = "openmed-service-model-manifest";
