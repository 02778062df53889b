//! `kubesim`: run the simulated API server as a process, for kubectl and scripts.

use kubesim::{Sim, SimConfig};
use std::path::PathBuf;
use std::time::Duration;

const HELP: &str = "kubesim: a simulated Kubernetes API server on 127.0.0.1

usage: kubesim [flags]
  --port N            port to listen on (default: a free one)
  --tls               serve HTTPS with a fresh CA (written to DIR/ca.crt)
  --token T           require this bearer token (repeatable); an admin's
  --sa-token NS/NAME=T  also accept T as service account NS/NAME, whose requests
                      RBAC authorizes from the Roles and bindings stored
                      (repeatable; or POST /__sim/serviceaccount-token)
  --dir DIR           where to write kubeconfig, ca.crt, token and url (default: .kubesim)
  --warmup-ms N       time for a pod to become ready (default 1000)
  --unloadable REGEX  preload values that never become ready (default: unloadable)
  --history N         watch events kept at most (default 1000000; also at most
                      5 minutes of them and 256 MiB, then 410 Expired)
  --bookmark-ms N     watch bookmark interval (default 2000)
  --tick-ms N         controller tick (default 50)
  --help

Faults and counters: POST/GET http(s)://127.0.0.1:PORT/__sim/... (see README.md).";

fn main() {
    let mut cfg = SimConfig {
        warmup: Duration::from_millis(1000),
        ..SimConfig::default()
    };
    let mut dir = PathBuf::from(".kubesim");
    let mut sa_tokens: Vec<String> = Vec::new();
    let mut args = std::env::args().skip(1);
    let fail = |m: String| -> ! {
        eprintln!("kubesim: {m}");
        std::process::exit(2)
    };
    while let Some(a) = args.next() {
        let mut val = |name: &str| {
            args.next()
                .unwrap_or_else(|| fail(format!("{name} needs a value")))
        };
        let num = |name: &str, v: String| {
            v.parse::<u64>()
                .unwrap_or_else(|_| fail(format!("{name}: not a number: {v}")))
        };
        match a.as_str() {
            "--port" => cfg.port = num("--port", val("--port")) as u16,
            "--tls" => cfg.tls = true,
            "--token" => cfg.tokens.get_or_insert_with(Vec::new).push(val("--token")),
            "--sa-token" => sa_tokens.push(val("--sa-token")),
            "--dir" => dir = PathBuf::from(val("--dir")),
            "--warmup-ms" => {
                cfg.warmup = Duration::from_millis(num("--warmup-ms", val("--warmup-ms")))
            }
            "--unloadable" => cfg.unloadable = Some(val("--unloadable")),
            "--history" => cfg.history = num("--history", val("--history")) as usize,
            "--bookmark-ms" => {
                cfg.bookmark_interval =
                    Duration::from_millis(num("--bookmark-ms", val("--bookmark-ms")))
            }
            "--tick-ms" => cfg.tick = Duration::from_millis(num("--tick-ms", val("--tick-ms"))),
            "--help" | "-h" => {
                println!("{HELP}");
                return;
            }
            other => fail(format!("unknown flag {other} (see --help)")),
        }
    }
    let sim = Sim::start(cfg.clone()).unwrap_or_else(|e| fail(format!("cannot start: {e}")));
    for spec in &sa_tokens {
        let parsed = spec
            .split_once('=')
            .and_then(|(who, token)| Some((who.split_once('/')?, token)));
        let Some(((ns, name), token)) = parsed else {
            fail(format!("--sa-token: {spec:?} is not NS/NAME=TOKEN"))
        };
        sim.accept_service_account_token(ns, name, token);
    }
    if let Err(e) = std::fs::create_dir_all(&dir) {
        fail(format!("cannot create {}: {e}", dir.display()));
    }
    let dir = dir.canonicalize().unwrap_or(dir);
    let ca = sim.ca_pem().map(|pem| {
        let p = dir.join("ca.crt");
        std::fs::write(&p, pem)
            .unwrap_or_else(|e| fail(format!("cannot write {}: {e}", p.display())));
        p
    });
    let token = cfg.tokens.as_ref().and_then(|t| t.first()).cloned();
    if let Some(t) = &token {
        let _ = std::fs::write(dir.join("token"), t);
    }
    let kubeconfig = dir.join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig, ca.as_deref(), token.as_deref())
        .unwrap_or_else(|e| fail(format!("cannot write {}: {e}", kubeconfig.display())));
    let _ = std::fs::write(dir.join("url"), sim.url());
    println!("kubesim listening on {}", sim.url());
    println!("export KUBECONFIG={}", kubeconfig.display());
    loop {
        std::thread::park();
    }
}
