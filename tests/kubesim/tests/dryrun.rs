//! `dryRun=All` as upstream's `DryRunnableStorage` has it: a write goes
//! through every step (validation, defaulting, admission) and its answer
//! comes back, but nothing is committed and no watch hears of it; any other
//! value is refused (`ValidateDryRun`). `kubectl --dry-run=server` on the
//! demo cluster must never delete what it only meant to try.

mod common;

use common::api;
use kubesim::{Sim, SimConfig};
use serde_json::json;

const NSS: &str = "/api/v1/namespaces";
const CMS: &str = "/api/v1/namespaces/default/configmaps";
const MERGE: &str = "application/merge-patch+json";

#[test]
fn a_dry_run_answers_as_the_write_would_and_changes_nothing() {
    let sim = Sim::start(SimConfig::default()).unwrap();
    let a = api(&sim);
    assert_eq!(
        a.post(
            CMS,
            json!({"metadata": {"name": "kept"}, "data": {"k": "v"}})
        )
        .code,
        201
    );
    let before = a.get(CMS).body["metadata"]["resourceVersion"].clone();

    let created = a.post(
        &format!("{CMS}?dryRun=All"),
        json!({"metadata": {"name": "tried"}}),
    );
    assert_eq!(created.code, 201, "{:?}", created.body);
    assert_eq!(created.body["metadata"]["name"], "tried");
    assert_eq!(a.get(&format!("{CMS}/tried")).code, 404);

    let patched = a.patch(
        &format!("{CMS}/kept?dryRun=All"),
        MERGE,
        json!({"data": {"k": "changed"}}),
    );
    assert_eq!(patched.code, 200);
    assert_eq!(patched.body["data"]["k"], "changed");
    assert_eq!(a.get(&format!("{CMS}/kept")).body["data"]["k"], "v");

    // A dry run is validated as the write would be.
    let invalid = a.post(
        &format!("{CMS}?dryRun=All"),
        json!({"metadata": {"name": "Not_A_Name"}}),
    );
    assert_eq!(invalid.code, 422, "{:?}", invalid.body);

    assert_eq!(a.delete(&format!("{CMS}/kept?dryRun=All"), None).code, 200);
    assert_eq!(a.get(&format!("{CMS}/kept")).code, 200);
    assert_eq!(
        a.delete(&format!("{NSS}/default?dryRun=All"), None).code,
        200
    );
    assert_eq!(
        a.get(&format!("{NSS}/default")).body["status"]["phase"],
        "Active"
    );
    let swept = a.delete(&format!("{CMS}?dryRun=All"), None);
    assert_eq!(swept.code, 200);
    assert_eq!(a.get(&format!("{CMS}/kept")).code, 200);

    let refused = a.delete(&format!("{CMS}/kept?dryRun=Yes"), None);
    assert_eq!(refused.code, 400);
    assert!(
        refused.body["message"]
            .as_str()
            .unwrap_or_default()
            .contains("supported values: \"All\""),
        "{:?}",
        refused.body
    );
    assert_eq!(a.get(&format!("{CMS}/kept")).code, 200);

    // Nothing reached the store's history: the list's resourceVersion is
    // where it was.
    assert_eq!(a.get(CMS).body["metadata"]["resourceVersion"], before);
}
