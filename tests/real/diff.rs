//! The differential: what a user saw at each checkpoint of a scenario on
//! kubesim against the real control plane, as one table, and the operator's
//! requests by verb and resource. A difference a user sees fails the test;
//! one in requests that the real server's own behaviour explains is listed in
//! docs/kubesim.md ("Where kubesim and the real control plane differ").

use crate::story::Seen;
use std::collections::{BTreeMap, BTreeSet};

/// One row of the table: scenario, checkpoint and field, kubesim's value, the real one's.
pub type Row = (String, String, String, String);

/// Every field of every checkpoint, both values side by side.
pub fn rows(scenario: &str, sim: &[(String, Seen)], real: &[(String, Seen)]) -> Vec<Row> {
    let mut rows = Vec::new();
    let steps: Vec<&String> = sim.iter().map(|(s, _)| s).collect();
    let real_steps: Vec<&String> = real.iter().map(|(s, _)| s).collect();
    if steps != real_steps {
        rows.push((
            scenario.into(),
            "checkpoints".into(),
            format!("{steps:?}"),
            format!("{real_steps:?}"),
        ));
        return rows;
    }
    for ((step, a), (_, b)) in sim.iter().zip(real) {
        let fields: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
        for f in fields {
            let cell = |v: Option<&String>| v.cloned().unwrap_or_else(|| "(none)".into());
            rows.push((
                scenario.into(),
                format!("{step}: {f}"),
                cell(a.get(f)),
                cell(b.get(f)),
            ));
        }
    }
    rows
}

/// The operator's requests as verb and resource → how many, from a request log.
pub fn request_counts(requests: &[(String, String)]) -> BTreeMap<(String, String), usize> {
    let mut counts = BTreeMap::new();
    for (verb, resource) in requests {
        *counts.entry((verb.clone(), resource.clone())).or_insert(0) += 1;
    }
    counts
}

/// Rows for the operator's requests by verb and resource, with their counts.
pub fn request_rows(
    scenario: &str,
    sim: &BTreeMap<(String, String), usize>,
    real: &BTreeMap<(String, String), usize>,
) -> Vec<Row> {
    let keys: BTreeSet<&(String, String)> = sim.keys().chain(real.keys()).collect();
    keys.into_iter()
        .map(|k| {
            let n = |m: &BTreeMap<(String, String), usize>| {
                m.get(k).map_or("0".into(), |n| n.to_string())
            };
            (
                scenario.into(),
                format!("requests {} {}", k.0, k.1),
                n(sim),
                n(real),
            )
        })
        .collect()
}

/// Requests that timing alone makes: a model read afresh when its watch
/// lags the operator's own write, or a write meets a conflict (9.17,
/// `refresh_model`). The real server's watch may deliver after the write's
/// answer; kubesim's rarely does. Either cluster may make them or not.
const BY_TIMING: &[&str] = &["requests get openmedmodels"];

/// Whether a row is a difference: any field that differs, and a kind of
/// request one cluster saw and the other did not (how many may differ: the
/// real server's watch cache and bookmarks change when a list or watch ends),
/// but for those of [`BY_TIMING`].
pub fn differs(row: &Row) -> bool {
    if BY_TIMING.contains(&row.1.as_str()) {
        return false;
    }
    if row.1.starts_with("requests ") {
        (row.2 == "0") != (row.3 == "0")
    } else {
        row.2 != row.3
    }
}

/// Above this many rows the table lists only the differences.
const WHOLE_TABLE: usize = 300;

/// The table, as the closing note and a failing test print it; differences
/// marked. A long one lists only its differences and counts the rest.
pub fn table(rows: &[Row]) -> String {
    let mut out =
        String::from("scenario | field | kubesim | real | differs\n--- | --- | --- | --- | ---\n");
    let whole = rows.len() <= WHOLE_TABLE;
    for row in rows.iter().filter(|r| whole || differs(r)) {
        let (s, f, a, b) = row;
        let mark = if differs(row) { "**yes**" } else { "" };
        out += &format!("{s} | {f} | {a} | {b} | {mark}\n");
    }
    if !whole {
        let same = rows.iter().filter(|r| !differs(r)).count();
        out += &format!(
            "({same} of {} rows the same on both, not listed)\n",
            rows.len()
        );
    }
    out
}
