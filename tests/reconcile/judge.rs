//! The judgements of `src/reconcile/judge.rs` on the objects a converged
//! world holds, each changed in one field at a time: whose a ConfigMap or
//! Deployment is (§3.1, §3.3, 9.13), whether the ConfigMap needs its patch
//! (§3.1, §6.9), whether a rollout failed (§4, §6.8), and when a held
//! resize is the same rollout (§3.2).

use crate::common::*;
use crate::world::*;
use openmed_operator::model::{FAMILY_LABEL, MANAGED_BY_LABEL, OWNER_ANNOTATION};
use openmed_operator::reconcile::judge;
use openmed_operator::reconcile::{ConfigMapView, DeploymentView, ModelView};
use serde_json::{json, Value};

const CM: &str = "openmed-service-model-manifest";
type Tamper = fn(&mut Value);

/// A converged world: the model's view, its ConfigMap and Deployment.
fn converged(spec_json: Value) -> (World, ModelView) {
    let mut w = World::new(spec_json);
    w.converge();
    let m = ModelView::from_json(&w.model).expect("a model");
    (w, m)
}

fn cm_view(cm: &Value) -> ConfigMapView {
    ConfigMapView::from_json(cm).expect("a ConfigMap")
}

fn dep_view(d: &Value) -> DeploymentView {
    DeploymentView::from_json(d).expect("a Deployment")
}

/// The ConfigMap as the operator wrote it needs no patch; each field it
/// writes, changed alone, does.
#[test]
fn a_config_map_differing_in_any_field_the_operator_writes_needs_its_patch() {
    let (w, m) = converged(spec(V1));
    let s = m.desired().expect("a valid spec").clone();
    let written = w.config_maps[CM].clone();
    assert!(!judge::cm_needs_patch(&cm_view(&written), &s, &m));
    let tampers: [(&str, Tamper); 12] = [
        ("manifest", |c| c["data"]["manifest.json"] = json!("{}")),
        ("manifest without its final newline", |c| {
            let text = c["data"]["manifest.json"].as_str().unwrap_or_default();
            c["data"]["manifest.json"] = json!(text.trim_end());
        }),
        ("manifest with one more newline", |c| {
            let text = c["data"]["manifest.json"].as_str().unwrap_or_default();
            c["data"]["manifest.json"] = json!(format!("{text}\n"));
        }),
        ("preload", |c| {
            c["data"]["OPENMED_SERVICE_PRELOAD_MODELS"] = json!("x")
        }),
        ("owner annotation", |c| {
            c["metadata"]["annotations"][OWNER_ANNOTATION] = json!("openmed/other")
        }),
        ("managed-by label", |c| {
            c["metadata"]["labels"][MANAGED_BY_LABEL.0] = json!("someone")
        }),
        ("family label", |c| {
            c["metadata"]["labels"][FAMILY_LABEL] = json!("Other")
        }),
        ("reference uid", |c| {
            c["metadata"]["ownerReferences"][0]["uid"] = json!("u-2")
        }),
        ("reference controller", |c| {
            c["metadata"]["ownerReferences"][0]["controller"] = json!(false)
        }),
        ("reference blockOwnerDeletion", |c| {
            c["metadata"]["ownerReferences"][0]["blockOwnerDeletion"] = json!(false)
        }),
        ("reference name", |c| {
            c["metadata"]["ownerReferences"][0]["name"] = json!("other")
        }),
        ("reference kind", |c| {
            c["metadata"]["ownerReferences"][0]["kind"] = json!("Other")
        }),
    ];
    for (what, tamper) in tampers {
        let mut cm = written.clone();
        tamper(&mut cm);
        assert_ne!(cm, written, "{what}: changed nothing");
        assert!(judge::cm_needs_patch(&cm_view(&cm), &s, &m), "{what}");
    }
}

/// Ours to write with either mark (the owner annotation, a controller
/// reference); ours to delete only with both (§7, 9.13).
#[test]
fn a_config_map_is_ours_to_write_with_either_mark_and_to_delete_with_both() {
    let (w, m) = converged(spec(V1));
    let written = w.config_maps[CM].clone();
    for (annotation, reference) in [(true, true), (true, false), (false, true), (false, false)] {
        let mut cm = written.clone();
        if !annotation {
            cm["metadata"]["annotations"][OWNER_ANNOTATION] = json!("openmed/other");
        }
        if !reference {
            cm["metadata"]["ownerReferences"][0]["controller"] = json!(false);
        }
        let v = cm_view(&cm);
        let case = format!("annotation {annotation}, reference {reference}");
        assert_eq!(judge::cm_ours(&v, &m), annotation || reference, "{case}");
        assert_eq!(
            judge::cm_fully_ours(&v, &m),
            annotation && reference,
            "{case}"
        );
    }
}

/// A Deployment is another model's when its owner annotation or its pod
/// template's names another model; an empty mark names nobody (§3.3).
#[test]
fn a_deployment_names_another_owner_on_itself_or_its_template() {
    let (mut w, m) = converged(spec(V1));
    let owner = m.qualified_name();
    for (on_deployment, on_template, foreign, ours) in [
        (Some(owner.as_str()), Some(owner.as_str()), false, true),
        (Some("openmed/other"), Some(owner.as_str()), true, true),
        (Some(owner.as_str()), Some("openmed/other"), true, true),
        (None, Some("openmed/other"), true, false),
        (Some(""), None, false, false),
        (None, Some(""), false, false),
        (None, None, false, false),
    ] {
        let d = w.dep();
        let set = |v: &mut Value, mark: Option<&str>| match mark {
            Some(o) => *v = json!(o),
            None => *v = Value::Null,
        };
        set(
            &mut d["metadata"]["annotations"][OWNER_ANNOTATION],
            on_deployment,
        );
        set(
            &mut d["spec"]["template"]["metadata"]["annotations"][OWNER_ANNOTATION],
            on_template,
        );
        let v = dep_view(d);
        let case = format!("{on_deployment:?} on it, {on_template:?} on its template");
        assert_eq!(judge::deployment_foreign(&v, &owner), foreign, "{case}");
        assert_eq!(judge::deployment_owned_by(&v, &owner), ours, "{case}");
    }
}

/// The template is ours to judge only with both our manifest hash and our
/// name on it (§6.8).
#[test]
fn a_template_is_ours_with_our_hash_and_our_name() {
    let (mut w, m) = converged(spec(V1));
    let s = m.desired().expect("a valid spec").clone();
    let owner = m.qualified_name();
    let written = w.dep().clone();
    assert!(judge::template_ours(&dep_view(&written), &s, &owner));
    let annotations = ["openmed.ai/model-manifest-hash", OWNER_ANNOTATION];
    for key in annotations {
        let mut d = written.clone();
        d["spec"]["template"]["metadata"]["annotations"][key] = json!("other");
        assert!(!judge::template_ours(&dep_view(&d), &s, &owner), "{key}");
    }
    // The view keeps the hash as its raw digest: only our own text of it,
    // `sha256:` and lower-case hex, is ours.
    let hash = s.manifest_hash();
    let hex = hash.trim_start_matches("sha256:");
    let others = [
        format!("sha256:{}", hex.to_uppercase()),
        hex.to_string(),
        format!("{hash}0"),
        format!("sha256:{}", &hex[1..]),
    ];
    for other in others {
        let mut d = written.clone();
        d["spec"]["template"]["metadata"]["annotations"][annotations[0]] = json!(other);
        assert!(!judge::template_ours(&dep_view(&d), &s, &owner), "{other}");
    }
}

/// A rollout has failed when the controller has seen its generation and
/// either its deadline passed (Progressing False, ProgressDeadlineExceeded)
/// or a ReplicaFailure is True; nothing less (§4, §6.8).
#[test]
fn a_rollout_fails_on_its_deadline_or_a_replica_failure_and_nothing_less() {
    let (mut w, _) = converged(spec(V1));
    let seen = w.dep()["status"]["observedGeneration"]
        .as_i64()
        .expect("a generation");
    let cond = |t: &str, s: &str, r: &str| json!({"type": t, "status": s, "reason": r});
    for (conditions, failed) in [
        (
            vec![cond("Progressing", "False", "ProgressDeadlineExceeded")],
            true,
        ),
        (vec![cond("ReplicaFailure", "True", "FailedCreate")], true),
        (vec![cond("ReplicaFailure", "False", "FailedCreate")], false),
        (vec![cond("Progressing", "False", "Other")], false),
        (
            vec![cond("Progressing", "True", "ProgressDeadlineExceeded")],
            false,
        ),
        (
            vec![cond("Available", "False", "ProgressDeadlineExceeded")],
            false,
        ),
        (
            vec![cond("Progressing", "True", "NewReplicaSetAvailable")],
            false,
        ),
    ] {
        let mut d = w.dep().clone();
        d["status"]["conditions"] = json!(conditions);
        let v = dep_view(&d);
        assert_eq!(judge::failed(&v, seen), failed, "{conditions:?}");
        assert!(
            !judge::failed(&v, seen + 1),
            "an unseen generation: {conditions:?}"
        );
    }
}

/// Under Recreate, a Deployment of our last write's generation that differs
/// only in the replicas our staged write held back is the same rollout; a
/// newer generation, another difference, or RollingUpdate is not (§3.2).
#[test]
fn a_held_resize_is_the_same_rollout_and_nothing_else_is() {
    let mut recreate = spec(V1);
    recreate["rolloutStrategy"] = json!({"type": "Recreate"});
    let s = validate_spec(&recreate);
    let (mut w, m) = converged(spec(V1));
    let owner = m.qualified_name();
    w.dep()["spec"]["strategy"] = json!({"type": "Recreate"});
    let generation = w.dep()["metadata"]["generation"]
        .as_i64()
        .expect("a generation");
    assert!(judge::matches(&dep_view(w.dep()), &s, &owner));
    let mut held = w.dep().clone();
    held["spec"]["replicas"] = json!(s.replicas + 3);
    assert!(judge::resize_held(&dep_view(&held), &s, &owner, generation));
    assert!(!judge::resize_held(
        &dep_view(&held),
        &s,
        &owner,
        generation + 1
    ));
    assert!(!judge::resize_held(
        &dep_view(w.dep()),
        &s,
        &owner,
        generation
    ));
    let mut other = held.clone();
    other["spec"]["progressDeadlineSeconds"] = json!(9);
    assert!(!judge::resize_held(
        &dep_view(&other),
        &s,
        &owner,
        generation
    ));
    let rolling = validate_spec(&spec(V1));
    assert!(!judge::resize_held(
        &dep_view(&held),
        &rolling,
        &owner,
        generation
    ));
}

fn validate_spec(v: &Value) -> openmed_operator::model::DesiredSpec {
    openmed_operator::model::spec::validate("openmed-service", Some(v)).expect("a valid spec")
}
