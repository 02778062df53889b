//! The HTTP client kubesim's own tests use: plain requests as a client
//! sends them, every status code returned rather than raised.
#![allow(dead_code)]

use kubesim::{Sim, SimConfig};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::time::{Duration, Instant};

pub struct Api {
    pub base: String,
    pub agent: ureq::Agent,
    pub token: Option<String>,
}

pub struct Resp {
    pub code: u16,
    pub body: Value,
    pub warnings: Vec<String>,
}

pub fn api(sim: &Sim) -> Api {
    let agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .proxy(None)
        .build()
        .new_agent();
    Api {
        base: sim.url(),
        agent,
        token: None,
    }
}

impl Api {
    pub fn call(
        &self,
        method: &str,
        path: &str,
        ct: Option<&str>,
        body: Option<&Value>,
        accept: &str,
    ) -> Resp {
        let url = format!("{}{}", self.base, path);
        let mut b = ureq::http::Request::builder()
            .method(method)
            .uri(url)
            .header("Accept", accept);
        if let Some(t) = &self.token {
            b = b.header("Authorization", format!("Bearer {t}"));
        }
        if let Some(ct) = ct {
            b = b.header("Content-Type", ct);
        }
        let bytes = body.map(|b| b.to_string()).unwrap_or_default().into_bytes();
        let req = b.body(bytes).unwrap();
        let mut resp = self.agent.run(req).unwrap();
        let code = resp.status().as_u16();
        let warnings = resp
            .headers()
            .get_all("warning")
            .iter()
            .filter_map(|v| v.to_str().ok().map(str::to_string))
            .collect();
        let text = resp.body_mut().read_to_string().unwrap_or_default();
        Resp {
            code,
            body: serde_json::from_str(&text).unwrap_or(Value::String(text)),
            warnings,
        }
    }
    pub fn get(&self, path: &str) -> Resp {
        self.call("GET", path, None, None, "application/json")
    }
    pub fn get_as(&self, path: &str, accept: &str) -> Resp {
        self.call("GET", path, None, None, accept)
    }
    pub fn post(&self, path: &str, body: Value) -> Resp {
        self.call(
            "POST",
            path,
            Some("application/json"),
            Some(&body),
            "application/json",
        )
    }
    pub fn put(&self, path: &str, body: Value) -> Resp {
        self.call(
            "PUT",
            path,
            Some("application/json"),
            Some(&body),
            "application/json",
        )
    }
    pub fn patch(&self, path: &str, ct: &str, body: Value) -> Resp {
        self.call("PATCH", path, Some(ct), Some(&body), "application/json")
    }
    pub fn merge(&self, path: &str, body: Value) -> Resp {
        self.patch(path, "application/merge-patch+json", body)
    }
    pub fn delete(&self, path: &str, body: Option<Value>) -> Resp {
        self.call(
            "DELETE",
            path,
            Some("application/json"),
            body.as_ref(),
            "application/json",
        )
    }
    /// A watch the server ends after `secs`; every event line.
    pub fn watch(&self, path: &str, query: &str, secs: u64) -> Vec<Value> {
        self.watch_as(path, query, "application/json", secs)
    }
    /// The same, asking for another representation (`accept`).
    pub fn watch_as(&self, path: &str, query: &str, accept: &str, secs: u64) -> Vec<Value> {
        let req = ureq::http::Request::builder()
            .uri(format!(
                "{}{path}?watch=1&timeoutSeconds={secs}&{query}",
                self.base
            ))
            .header("Accept", accept)
            .body(())
            .unwrap();
        let resp = self.agent.run(req).unwrap();
        assert_eq!(resp.status().as_u16(), 200, "watch {path}?{query}");
        BufReader::new(resp.into_body().into_reader())
            .lines()
            .map_while(Result::ok)
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(&l).unwrap())
            .collect()
    }
}

// What the fidelity tests share (fidelity.rs, watches.rs, deployments.rs).

pub const JSON: &str = "application/json";
pub const SMP: &str = "application/strategic-merge-patch+json";
pub const MERGE: &str = "application/merge-patch+json";
pub const META_LIST: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
pub const META_ONE: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
pub const CMS: &str = "/api/v1/namespaces/default/configmaps";
pub const DEPLOYS: &str = "/apis/apps/v1/namespaces/default/deployments";
pub const EVENTS: &str = "/api/v1/namespaces/default/events";

pub fn rv(o: &Value) -> u64 {
    o["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

/// A cluster whose Deployment controller and garbage collector stay idle
/// (one tick at start, the next an hour later): only the API's own writes.
/// Waits out that first tick, which runs when its thread gets going.
pub fn quiet_sim() -> Sim {
    let sim = Sim::start(SimConfig {
        tick: Duration::from_secs(3600),
        ..SimConfig::default()
    })
    .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    sim
}

pub fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let t = Instant::now();
    while !done() {
        assert!(t.elapsed() < Duration::from_secs(5), "timed out: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn deployment(name: &str, env: Value) -> Value {
    json!({"metadata": {"name": name}, "spec": {
        "replicas": 0,
        "selector": {"matchLabels": {"app": name}},
        "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [
            {"name": "app", "image": "i:1", "env": env}]}},
    }})
}
