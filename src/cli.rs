//! Hand-written flag parsing and the --help text, both from the one table
//! of flags in `cli/flags.rs`, so they cannot drift apart; a test holds the
//! flag table of docs/reference.md to it too.

use crate::config::Config;
use crate::config::{lease_name_for, ElectionConfig};
use crate::kube::names::{is_dns_label, is_dns_subdomain};
use crate::release::ReleaseArgs;
use flags::FLAGS;

mod flags;

#[derive(Debug)]
pub enum Command {
    Run(Box<Config>),
    /// `release`: hand one Deployment back by hand (see [`crate::release`]).
    Release(ReleaseArgs),
    Help,
    /// `release --help`: `release`'s usage and flags.
    ReleaseHelp,
    Version,
}

/// What the flags have set so far.
#[derive(Default)]
struct Settings {
    config: Config,
    all: bool,
    /// Set by --help / --version: stop parsing and answer this.
    stop: Option<Command>,
    /// `release`'s own flags: the Deployment, and `--force`.
    name: String,
    force: bool,
    /// The election flags, used only with `--leader-elect`.
    elect: bool,
    election: ElectionConfig,
    lease_name_set: bool,
}

/// Which command line takes a flag: the operator's run, `release`, or both
/// (the Deployment's namespace and the endpoint flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    Run,
    Release,
    Both,
}

impl Scope {
    fn has(self, command: Scope) -> bool {
        self == command || self == Scope::Both
    }
}

/// What follows a flag's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Takes {
    Switch,
    /// A switch that also takes `=true` / `=false`, as Go's boolean flags do.
    Bool,
    /// A value, inline (`--flag=v`) or the next argument, shown as this name.
    Value(&'static str),
}

/// One flag, all that is said about it and what it does.
struct Flag {
    /// The first is the one shown; the rest are aliases.
    names: &'static [&'static str],
    takes: Takes,
    scope: Scope,
    /// As users read it, in --help (where `help` says `{default}`) and in
    /// docs/reference.md. A `release` flag that takes a value and has none must be
    /// given, so its usage shows it unbracketed.
    default: &'static str,
    /// Its lines in --help, one per `\n`.
    help: &'static str,
    /// What it does with its value ("" for a switch).
    apply: fn(&mut Settings, String) -> Result<(), String>,
}

impl Flag {
    /// As the help and docs/reference.md show it: `--workers N`.
    fn usage(&self) -> String {
        let name = self.names[0];
        match self.takes {
            Takes::Switch => name.to_string(),
            Takes::Bool => format!("{name}[=false]"),
            Takes::Value(value) => format!("{name} {value}"),
        }
    }
}

const ABOUT: &str =
    "openmed-operator: makes the model version served by an OpenMed REST Deployment declarative.";
const RELEASE_ABOUT: &str = "\
Hand a Deployment back whose OpenMedModel lost its finalizer by hand
while the operator was away: remove the operator's marks and start the
container that read the (now deleted) ConfigMap with no model, so its
pods can restart. Refused while the OpenMedModel exists, unless --force.";
const CONNECTS_TO: &str = "\
The operator connects to nothing but the Kubernetes API server (through the
HTTP CONNECT proxy HTTPS_PROXY names, unless NO_PROXY or --no-proxy says otherwise).";
/// Where a flag's help starts; a longer usage gets a line of its own.
const HELP_COLUMN: usize = 28;
/// The widest line of `release`'s usage.
const USAGE_WIDTH: usize = 85;

/// The --help text.
pub fn help() -> String {
    let mut out = format!("{ABOUT}\n\nUSAGE:\n    openmed-operator [FLAGS]\n");
    out += &release_usage();
    for line in RELEASE_ABOUT.lines() {
        out += &format!("\n        {line}");
    }
    out += "\n\nFLAGS:\n";
    for flag in FLAGS.iter().filter(|f| f.scope.has(Scope::Run)) {
        out += &describe(flag);
    }
    let shared: Vec<&str> = FLAGS
        .iter()
        .filter(|f| f.scope == Scope::Both)
        .map(|f| f.names[0])
        .collect();
    out += &format!("\nRELEASE FLAGS (and {}):\n", shared.join(", "));
    for flag in FLAGS.iter().filter(|f| f.scope == Scope::Release) {
        out += &describe(flag);
    }
    out + "\n" + CONNECTS_TO
}

/// `release --help`: its usage, what it does, and the flags it takes.
pub fn release_help() -> String {
    let mut out = format!("USAGE:\n{}\n", release_usage());
    for line in RELEASE_ABOUT.lines() {
        out += &format!("\n    {line}");
    }
    out += "\n\nFLAGS:\n";
    for flag in FLAGS.iter().filter(|f| f.scope.has(Scope::Release)) {
        out += &describe(flag);
    }
    out
}

/// `release`'s usage line, wrapped: the flags it cannot do without bare,
/// the rest in brackets.
fn release_usage() -> String {
    let lead = "    openmed-operator ";
    let (mut out, mut width) = (format!("{lead}release"), lead.len() + "release".len());
    for flag in FLAGS.iter().filter(|f| f.scope.has(Scope::Release)) {
        let needed = matches!(flag.takes, Takes::Value(_)) && flag.default.is_empty();
        let word = if needed {
            flag.usage()
        } else {
            format!("[{}]", flag.usage())
        };
        if width + 1 + word.len() > USAGE_WIDTH {
            out += &format!("\n{:1$}", "", lead.len());
            width = lead.len();
        } else {
            out.push(' ');
            width += 1;
        }
        width += word.len();
        out += &word;
    }
    out
}

/// One flag's lines in --help: usage, then its help from [`HELP_COLUMN`].
fn describe(flag: &Flag) -> String {
    let usage = flag.usage();
    let text = flag.help.replace("{default}", flag.default);
    let mut lines = text.lines();
    let width = HELP_COLUMN - 4;
    let mut out = if usage.len() + 2 <= width {
        format!("    {usage:width$}{}\n", lines.next().unwrap_or(""))
    } else {
        format!("    {usage}\n")
    };
    for line in lines {
        out += &format!("{:HELP_COLUMN$}{line}\n", "");
    }
    out
}

/// `release`'s arguments, checked.
fn release_args(s: Settings) -> Result<ReleaseArgs, String> {
    if s.config.namespaces.is_empty() {
        return Err("release: --namespace is required (the Deployment's namespace)".into());
    }
    if s.name.is_empty() {
        return Err("release: --name is required (the Deployment to hand back)".into());
    }
    let namespace = match s.config.namespaces.as_slice() {
        [ns] if is_dns_label(ns) => ns.clone(),
        other => {
            return Err(format!(
                "release: --namespace {other:?} is not one namespace name"
            ))
        }
    };
    if !is_dns_subdomain(&s.name) {
        return Err(format!(
            "release: --name {:?} is not a Deployment name",
            s.name
        ));
    }
    Ok(ReleaseArgs {
        endpoint: s.config.endpoint,
        namespace,
        name: s.name,
        force: s.force,
    })
}

/// Parse arguments (without the program name). `env` looks up environment
/// variables. Errors are one line, meant for stderr.
pub fn parse(
    args: impl IntoIterator<Item = String>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Command, String> {
    let mut s = Settings::default();
    let mut it = args.into_iter().peekable();
    if it.peek().map(String::as_str) == Some("release") {
        it.next();
        let rest: Vec<String> = it.collect();
        if rest.iter().any(|a| a == "--help" || a == "-h") {
            return Ok(Command::ReleaseHelp);
        }
        let it = rest.into_iter();
        read_flags(it, &mut s, Scope::Release).map_err(|e| format!("release: {e}"))?;
        return release_args(s).map(Command::Release);
    }
    if let Some(stop) = read_flags(it, &mut s, Scope::Run)? {
        return Ok(stop);
    }
    finish(s, env).map(|c| Command::Run(Box::new(c)))
}

/// Apply each flag `command` takes to `s`; `--help`/`--version` stop at
/// once with their answer.
fn read_flags(
    args: impl Iterator<Item = String>,
    s: &mut Settings,
    command: Scope,
) -> Result<Option<Command>, String> {
    let mut it = args;
    while let Some(arg) = it.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v)),
            _ => (arg.as_str(), None),
        };
        let known = FLAGS.iter().find(|f| f.names.contains(&name));
        let flag = known.filter(|f| f.scope.has(command));
        // A boolean's `=false` is read before asking whether `command` takes it.
        let boolean = known.is_some_and(|f| f.takes == Takes::Bool);
        let value = match (flag.map(|f| f.takes), inline) {
            (Some(Takes::Value(_)), Some(v)) => v.to_string(),
            (Some(Takes::Value(_)), None) => {
                it.next().ok_or_else(|| format!("{name} needs a value"))?
            }
            (_, Some(v)) if boolean => v.to_string(),
            (_, Some(_)) => return Err(format!("{name} takes no value")),
            (_, None) => String::new(),
        };
        let flag = flag.ok_or_else(|| unknown(name, command))?;
        (flag.apply)(s, value)?;
        if let Some(stop) = s.stop.take() {
            return Ok(Some(stop));
        }
    }
    Ok(None)
}

/// An unknown flag's error, naming the nearest one `command` takes.
fn unknown(name: &str, command: Scope) -> String {
    let nearest = FLAGS
        .iter()
        .filter(|f| f.scope.has(command))
        .flat_map(|f| f.names.iter().copied())
        .filter(|n| n.starts_with("--"))
        .map(|n| (edit_distance(name, n), n))
        .min();
    match nearest {
        Some((d, n)) if d <= 2 || d * 4 <= name.len() => {
            format!("unknown flag {name:?}: did you mean {n}? (see --help)")
        }
        _ => format!("unknown flag {name:?} (see --help)"),
    }
}

/// Levenshtein distance: the fewest one-character edits from `a` to `b`.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (row[j + 1] + 1)
                .min(row[j] + 1)
                .min(diag + usize::from(ca != *cb));
            diag = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

/// WATCH_NAMESPACE when no flag chose namespaces, then the namespace checks.
fn finish(s: Settings, env: &dyn Fn(&str) -> Option<String>) -> Result<Config, String> {
    let mut config = s.config;
    let set = |k: &str| {
        env(k)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    config.own_deployment = set("POD_NAMESPACE").zip(set("OPENMED_OPERATOR_DEPLOYMENT"));
    if config.namespaces.is_empty() && !s.all {
        if let Some(w) = env("WATCH_NAMESPACE") {
            config.namespaces = w
                .split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect();
        }
    }
    if s.all && !config.namespaces.is_empty() {
        return Err("--all-namespaces and --namespace are mutually exclusive".into());
    }
    if let Some(bad) = config.namespaces.iter().find(|n| !is_dns_label(n)) {
        return Err(format!("namespace {bad:?} is not a valid namespace name"));
    }
    config.namespaces.sort();
    config.namespaces.dedup();
    if !s.elect && s.election != Default::default() {
        return Err("the --lease-* and timing flags need --leader-elect".into());
    }
    if s.elect {
        let mut e = s.election;
        e.check()?;
        if e.lease_namespace.is_none() {
            e.lease_namespace = set("POD_NAMESPACE");
        }
        if let (Some(sel), false) = (&config.selector, s.lease_name_set) {
            // Each shard its own Lease, without a flag to forget.
            e.lease_name = lease_name_for(sel);
        }
        config.election = Some(e);
    }
    let m = &config.metrics;
    if m.cert_dir.is_some() && !m.secure {
        return Err("--metrics-cert-dir needs TLS: drop --metrics-secure=false".into());
    }
    if m.addr == Some(config.health_addr) && config.health_addr.port() != 0 {
        return Err("--metrics-addr and --health-addr must differ".into());
    }
    if config.ui_addr.is_some_and(|a| !a.ip().is_loopback()) && !m.secure {
        return Err("--ui-addr off loopback needs the metrics' authentication: drop --metrics-secure=false, or serve the view on 127.0.0.1 and use kubectl port-forward".into());
    }
    Ok(config)
}

#[cfg(test)]
mod tests;
