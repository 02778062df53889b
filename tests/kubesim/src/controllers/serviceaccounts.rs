//! The ServiceAccounts controller (`pkg/controller/serviceaccount`,
//! `ServiceAccountsController.syncNamespace`): every active namespace has a
//! `default` ServiceAccount, created when missing, so that `kubectl create
//! token default` and pods without `serviceAccountName` find one.

use crate::registry::kinds::FieldValidation;
use crate::registry::namespaces::terminating;
use crate::registry::store::Store;
use serde_json::json;
use std::time::SystemTime;

/// Create `default` in each namespace that lacks it. Returns whether
/// anything was written.
pub fn sync(st: &mut Store, now: SystemTime) -> bool {
    let (Some(ns_def), Some(sa_def)) = (
        st.registry.find("", "v1", "namespaces").cloned(),
        st.registry.find("", "v1", "serviceaccounts").cloned(),
    ) else {
        return false;
    };
    let active: Vec<String> = st
        .list(&ns_def, None)
        .iter()
        .filter(|n| !terminating(n))
        .filter_map(|n| n["metadata"]["name"].as_str().map(str::to_string))
        .collect();
    let mut wrote = false;
    for ns in active {
        if st.get(&sa_def, &ns, "default").is_some() {
            continue;
        }
        let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "default", "namespace": ns}});
        wrote |= st
            .create(&sa_def, &ns, sa, FieldValidation::Ignore, now)
            .is_ok();
    }
    wrote
}
