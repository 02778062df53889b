//! Instructions (`OMO_BENCH_INSTRUCTIONS=100`): each contestant run once
//! under valgrind's callgrind, which counts the instructions a program
//! retires, and counts them the same on a loaded machine as on an idle one
//! (`perf stat` cannot count them here: no PMU in the VM). From start over
//! N models to all Ready, one version change to all Ready, then SIGTERM and
//! exit. Timing still changes the work a controller does (how many passes,
//! how many requests), so both are printed beside the count.

use super::{by_verb, cluster, set_all, start, tmpdir, wait_serving, Contestant, Kind, V1, V2};
use std::path::Path;
use std::time::{Duration, Instant};

/// One contestant's count.
pub struct Count {
    label: String,
    instructions: u64,
    passes: Option<f64>,
    requests: Vec<(String, f64)>,
}

/// `bin` run under callgrind, its counts written to `out`: a script the
/// contestant is started as.
fn wrapped(bin: &str, out: &Path, dir: &Path) -> String {
    let script = dir.join(format!(
        "callgrind-{}.sh",
        out.file_name().unwrap().to_string_lossy()
    ));
    let text = format!(
        "#!/bin/sh\nexec valgrind --tool=callgrind -q --callgrind-out-file={} {bin} \"$@\"\n",
        out.display()
    );
    std::fs::write(&script, text).unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    script.to_string_lossy().into_owned()
}

/// The instructions callgrind counted (`summary:` of its output).
fn summary(out: &Path) -> u64 {
    let text = std::fs::read_to_string(out)
        .unwrap_or_else(|e| panic!("no callgrind output at {}: {e}", out.display()));
    text.lines()
        .find_map(|l| l.strip_prefix("summary:")?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no summary line in {}", out.display()))
}

/// Counts one contestant over `n` models.
fn count(c: &Contestant, n: usize) -> Count {
    let sim = cluster(n);
    sim.reset_stats();
    let dir = tmpdir(&format!("bench-instructions-{n}"));
    let out = dir.join(format!(
        "callgrind.{}",
        if matches!(c.kind, Kind::Peer { .. }) {
            "peer"
        } else {
            "ours"
        }
    ));
    let mut c = c.clone();
    match &mut c.kind {
        Kind::Ours { bin, .. } | Kind::Peer { bin, .. } => *bin = wrapped(bin, &out, &dir),
    }
    let mut p = start(&c, &sim, &dir, 2);
    // Under callgrind a program runs some 50 times slower.
    let limit = Duration::from_secs(300 + n as u64);
    wait_serving(&sim, Instant::now(), n, V1, limit);
    set_all(&sim, n, V2);
    wait_serving(&sim, Instant::now(), n, V2, limit);
    let passes = p.passes();
    let requests = by_verb(&sim, n);
    p.stop();
    Count {
        label: c.label.clone(),
        instructions: summary(&out),
        passes,
        requests,
    }
}

/// Counts every contestant but the counting build at `n` models and prints
/// the table, with ours over the peer's.
pub fn print(all: &[Contestant], n: usize) {
    let counts: Vec<Count> = all
        .iter()
        .filter(|c| !matches!(c.kind, Kind::Ours { counting: true, .. }))
        .map(|c| count(c, n))
        .collect();
    println!("| resources | operator | instructions, start → Ready → change → Ready → exit | a resource | passes per resource | requests per resource |");
    println!("| --- | --- | --- | --- | --- | --- |");
    for k in &counts {
        let verbs: Vec<String> = k
            .requests
            .iter()
            .map(|(v, r)| format!("{v} {r:.2}"))
            .collect();
        let passes = k
            .passes
            .map_or("-".into(), |p| format!("{:.1}", p / n as f64));
        println!(
            "| {n} | {} | {:.1} M | {:.0} k | {passes} | {} |",
            k.label,
            k.instructions as f64 / 1e6,
            k.instructions as f64 / n as f64 / 1e3,
            verbs.join(", ")
        );
    }
    if let [ours, .., peer] = &counts[..] {
        println!(
            "| {n} | {} over {} | {:.2}x | | | |",
            ours.label,
            peer.label,
            ours.instructions as f64 / peer.instructions as f64
        );
    }
    assert!(
        counts.iter().all(|k| k.instructions > 0),
        "callgrind counted nothing"
    );
}
