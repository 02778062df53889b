//! Instructions (`OMO_BENCH_INSTRUCTIONS=100`): each contestant run once
//! under valgrind's callgrind, which counts the instructions a program
//! retires, and counts them the same on a loaded machine as on an idle one
//! (`perf stat` cannot count them here: no PMU in the VM). From start over
//! N models to all Ready, one version change to all Ready, then SIGTERM and
//! exit. Timing still changes the work a controller does (how many passes,
//! how many requests), so both are printed beside the count.
//!
//! System calls (`OMO_BENCH_SYSCALLS=1000`): the same script run natively
//! under `perf stat`, which counts the kernel's system-call tracepoints
//! (software events, no PMU needed), by kind.

use super::{by_verb, cluster, set_all, start, tmpdir, wait_serving, Contestant, Kind, V1, V2};
use std::path::Path;
use std::time::{Duration, Instant};

/// What watches a contestant while it runs the script.
#[derive(Clone, Copy, PartialEq)]
pub enum Probe {
    Callgrind,
    Syscalls,
}

/// The system calls counted by kind, then all of them, context switches,
/// page faults and CPU time.
const SYSCALLS: [&str; 10] = [
    "futex",
    "recvfrom",
    "sendto",
    "writev",
    "write",
    "setsockopt",
    "ioctl",
    "mmap",
    "munmap",
    "madvise",
];

/// One contestant's count.
pub struct Count {
    label: String,
    /// `(event, count)`: callgrind's instructions, or perf's counters.
    figures: Vec<(String, f64)>,
    passes: Option<f64>,
    requests: Vec<(String, f64)>,
}

impl Count {
    fn figure(&self, name: &str) -> f64 {
        let f = self.figures.iter().find(|(n, _)| n == name);
        f.map_or(0.0, |(_, v)| *v)
    }
}

/// `bin` run under the probe, its counts written to `out`: a script the
/// contestant is started as. perf stat neither passes SIGTERM on nor
/// writes its counts when killed, so the script passes it to the program.
fn wrapped(bin: &str, out: &Path, dir: &Path, probe: Probe) -> String {
    let script = dir.join(format!(
        "probe-{}.sh",
        out.file_name().unwrap().to_string_lossy()
    ));
    let out = out.display();
    let text = match probe {
        Probe::Callgrind => format!(
            "#!/bin/sh\nexec valgrind --tool=callgrind -q --callgrind-out-file={out} {bin} \"$@\"\n"
        ),
        Probe::Syscalls => {
            let mut events: Vec<String> = SYSCALLS
                .iter()
                .map(|s| format!("syscalls:sys_enter_{s}"))
                .collect();
            events.extend(
                [
                    "raw_syscalls:sys_enter",
                    "context-switches",
                    "page-faults",
                    "task-clock",
                ]
                .map(String::from),
            );
            format!(
                "#!/bin/bash\nperf stat -x, -o {out} -e {} -- {bin} \"$@\" & perf=$!\n\
                 trap 'pkill -TERM -P $perf' TERM\nwait $perf; wait $perf\n",
                events.join(",")
            )
        }
    };
    std::fs::write(&script, text).unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    script.to_string_lossy().into_owned()
}

/// What the probe counted: callgrind's `summary:` line, or perf's CSV
/// lines (`count,unit,event,...`).
fn figures(out: &Path, probe: Probe) -> Vec<(String, f64)> {
    let text = std::fs::read_to_string(out)
        .unwrap_or_else(|e| panic!("no probe output at {}: {e}", out.display()));
    let found: Vec<(String, f64)> = match probe {
        Probe::Callgrind => text
            .lines()
            .filter_map(|l| l.strip_prefix("summary:")?.trim().parse().ok())
            .map(|v| ("instructions".to_string(), v))
            .collect(),
        Probe::Syscalls => text
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split(',').collect();
                let event = f.get(2)?.trim_start_matches("syscalls:sys_enter_");
                Some((event.to_string(), f.first()?.parse().ok()?))
            })
            .collect(),
    };
    assert!(!found.is_empty(), "nothing counted in {}", out.display());
    found
}

/// Counts one contestant over `n` models.
fn count(c: &Contestant, n: usize, probe: Probe) -> Count {
    let sim = cluster(n);
    sim.reset_stats();
    let who = if matches!(c.kind, Kind::Peer { .. }) {
        "peer"
    } else {
        "ours"
    };
    let dir = tmpdir(&format!("bench-probe-{n}-{who}"));
    let out = dir.join(format!("counts.{who}"));
    let mut c = c.clone();
    match &mut c.kind {
        Kind::Ours { bin, .. } | Kind::Peer { bin, .. } => *bin = wrapped(bin, &out, &dir, probe),
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
        figures: figures(&out, probe),
        passes,
        requests,
    }
}

/// The passes and requests a resource beside a count.
fn work(k: &Count, n: usize) -> (String, String) {
    let verbs: Vec<String> = k
        .requests
        .iter()
        .map(|(v, r)| format!("{v} {r:.2}"))
        .collect();
    let passes = k
        .passes
        .map_or("-".into(), |p| format!("{:.1}", p / n as f64));
    (passes, verbs.join(", "))
}

fn counted(all: &[Contestant], n: usize, probe: Probe) -> Vec<Count> {
    all.iter()
        .filter(|c| !matches!(c.kind, Kind::Ours { counting: true, .. }))
        .map(|c| count(c, n, probe))
        .collect()
}

/// Counts every contestant's system calls at `n` models and prints them a
/// resource, by kind, with ours over the peer's.
pub fn print_syscalls(all: &[Contestant], n: usize) {
    let counts = counted(all, n, Probe::Syscalls);
    let kinds = SYSCALLS.join(" | ");
    println!("| resources | operator | system calls a resource | {kinds} | context switches | page faults | CPU ms | passes per resource | requests per resource |");
    println!(
        "| --- | --- | --- |{} --- | --- | --- | --- |",
        " --- |".repeat(SYSCALLS.len())
    );
    for k in &counts {
        let each: Vec<String> = SYSCALLS
            .iter()
            .map(|s| format!("{:.1}", k.figure(s) / n as f64))
            .collect();
        let (passes, verbs) = work(k, n);
        println!(
            "| {n} | {} | {:.1} | {} | {:.1} | {:.1} | {:.0} | {passes} | {verbs} |",
            k.label,
            k.figure("raw_syscalls:sys_enter") / n as f64,
            each.join(" | "),
            k.figure("context-switches") / n as f64,
            k.figure("page-faults") / n as f64,
            k.figure("task-clock"),
        );
    }
    if let [ours, .., peer] = &counts[..] {
        let all = "raw_syscalls:sys_enter";
        println!(
            "| {n} | {} over {} | {:.2}x |{} | | | |",
            ours.label,
            peer.label,
            ours.figure(all) / peer.figure(all),
            " |".repeat(SYSCALLS.len() + 2)
        );
    }
    assert!(
        counts
            .iter()
            .all(|k| k.figure("raw_syscalls:sys_enter") > 0.0),
        "perf counted no system call"
    );
}

/// Counts every contestant but the counting build at `n` models and prints
/// the table, with ours over the peer's.
pub fn print(all: &[Contestant], n: usize) {
    let counts = counted(all, n, Probe::Callgrind);
    println!("| resources | operator | instructions, start → Ready → change → Ready → exit | a resource | passes per resource | requests per resource |");
    println!("| --- | --- | --- | --- | --- | --- |");
    for k in &counts {
        let (passes, verbs) = work(k, n);
        let instructions = k.figure("instructions");
        println!(
            "| {n} | {} | {:.1} M | {:.0} k | {passes} | {verbs} |",
            k.label,
            instructions / 1e6,
            instructions / n as f64 / 1e3,
        );
    }
    if let [ours, .., peer] = &counts[..] {
        println!(
            "| {n} | {} over {} | {:.2}x | | | |",
            ours.label,
            peer.label,
            ours.figure("instructions") / peer.figure("instructions")
        );
    }
    assert!(
        counts.iter().all(|k| k.figure("instructions") > 0.0),
        "callgrind counted nothing"
    );
}
