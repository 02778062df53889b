//! The one mutex helper: a poisoned lock (another thread panicked while
//! holding it) still yields its data, so one panic never wedges the operator.

use std::sync::{Mutex, MutexGuard};

/// Lock a mutex, recovering the data if another thread panicked with it held.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
