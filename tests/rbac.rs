//! The shipped RBAC is what the operator runs with. kubesim
//! authorizes a service account's requests from the Roles and bindings it
//! stores, as the RBAC authorizer does (and enforces the owner-reference
//! admission check); the manifests are installed with `kubectl apply -k`
//! and the operator runs with its ServiceAccount's token.

use openmed_test_support as harness;

use harness::*;
use kubesim::Sim;
use serde_json::{json, Value};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// `kubectl apply -k manifests/` (as an admin), then a token file for
/// the operator's ServiceAccount.
fn install(sim: &Sim, dir: &Path) -> PathBuf {
    install_from(sim, dir, "manifests")
}

fn install_from(sim: &Sim, dir: &Path, kustomization: &str) -> PathBuf {
    let repo = env!("CARGO_MANIFEST_DIR");
    let kustomization = format!("{repo}/{kustomization}");
    kubectl(
        sim,
        &dir.join("kube-cache"),
        &["apply", "-k", &kustomization],
    );
    let token = dir.join("token");
    std::fs::write(
        &token,
        sim.service_account_token(OPERATOR_NS, "openmed-operator"),
    )
    .unwrap();
    token
}

fn start(sim: &Sim, dir: &Path, token: &Path) -> Operator {
    start_with(sim, dir, token, &[])
}

fn start_with(sim: &Sim, dir: &Path, token: &Path, extra: &[&str]) -> Operator {
    let token = token.to_str().unwrap();
    let mut args = vec![
        "--token-file",
        token,
        "--leader-elect",
        "--lease-namespace",
        OPERATOR_NS,
    ];
    args.extend(extra);
    Operator::start_with_env(&sim.url(), dir, &args, &[("POD_NAME", "rbac-test")])
}

/// A GET with a bearer token, over plain HTTP: (status, whole response).
fn get_as(sim: &Sim, token: &str, path: &str) -> (u16, String) {
    request(sim, "GET", Some(token), path, "")
}

fn request(sim: &Sim, method: &str, token: Option<&str>, path: &str, body: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(sim.addr()).unwrap();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    // A PATCH is a JSON merge patch, as `kubectl patch --type merge`.
    let ct = if method == "PATCH" {
        "merge-patch+json"
    } else {
        "json"
    };
    write!(
        c,
        "{method} {path} HTTP/1.1\r\nHost: x\r\n{auth}Content-Type: application/{ct}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    let _ = c.read_to_string(&mut out);
    (status_of(&out), out)
}

/// The JSON body of a response from [`request`].
fn body_of(response: &str) -> Value {
    let body = response.split("\r\n\r\n").nth(1).unwrap_or("");
    // Chunked or not: the JSON object is between the outer braces.
    let (start, end) = (body.find('{').unwrap_or(0), body.rfind('}').unwrap_or(0));
    serde_json::from_str(&body[start..=end]).unwrap_or(Value::Null)
}

/// The operator's requests the server refused with 403.
fn forbidden(sim: &Sim) -> Vec<String> {
    sim.requests()
        .into_iter()
        .filter(|r| r.status == 403 && r.user_agent.starts_with("openmed-operator/"))
        .map(|r| format!("{} {}", r.method, r.path))
        .collect()
}

/// TokenReviews and SubjectAccessReviews the operator made.
fn reviews(sim: &Sim) -> usize {
    sim.requests()
        .iter()
        .filter(|r| r.user_agent.starts_with("openmed-operator/") && r.path.contains("reviews"))
        .count()
}

/// Everything the operator does for a user: adopt a target, write the
/// ConfigMap (owned, blockOwnerDeletion), patch the Deployment, status and
/// Events, roll out a new version, then release everything on delete.
fn scenario(sim: &Sim) {
    sim.create(deployment("svc", 2)).unwrap();
    sim.create(model("m", "svc", V1, 600)).unwrap();
    wait_serving(sim, "m", V1);
    set_version(sim, "m", V2);
    wait_serving(sim, "m", V2);
    wait_event(sim, "m", "RolloutSucceeded");
    sim.delete("openmed.ai/v1alpha1", "OpenMedModel", NS, "m")
        .unwrap();
    wait_until("the model gone", || {
        sim.object("openmed.ai", "openmedmodels", NS, "m").is_none()
    });
}

#[test]
fn the_operator_needs_nothing_beyond_the_shipped_rbac() {
    let sim = start_sim(fast());
    let dir = tmpdir("rbac-all");
    let token = install(&sim, &dir);
    let mut op = start(&sim, &dir, &token);
    op.wait_ready();
    scenario(&sim);
    assert_eq!(forbidden(&sim), Vec::<String>::new());
    let sa = "system:serviceaccount:openmed-system:openmed-operator";
    assert!(op.log().contains("became the leader"), "{}", op.log());
    op.assert_clean_exit();
    // The token really was a restricted one: the same user is refused
    // what the roles do not grant.
    let token = std::fs::read_to_string(&token).unwrap();
    let (code, body) = get_as(&sim, &token, "/apis/coordination.k8s.io/v1/leases");
    let err = format!("{code} {body}");
    assert!(err.starts_with("403") && err.contains(sa), "{err}");
}

/// No Lease left, and a new model m-`n` on a new Deployment svc-`n`.
fn fresh_lease_and_model(sim: &Sim, n: usize) {
    // A fresh start each time: a fresh Lease, a model to serve.
    for l in sim.objects("coordination.k8s.io", "leases", Some(OPERATOR_NS)) {
        let n = l["metadata"]["name"].as_str().unwrap_or("").to_string();
        let _ = sim.delete("coordination.k8s.io/v1", "Lease", OPERATOR_NS, &n);
    }
    sim.create(deployment(&format!("svc-{n}"), 2)).unwrap();
    sim.create(model(&format!("m-{n}"), &format!("svc-{n}"), V1, 600))
        .unwrap();
}

/// What the operator is refused, once it is refused something (20 s at
/// most), scraped meanwhile.
fn wait_refused(sim: &Sim, scrape: &impl Fn() -> TlsAnswer) -> Vec<String> {
    let t = Instant::now();
    loop {
        // Scraped as Prometheus does, which needs the reviews.
        let _ = scrape();
        let refused = forbidden(sim);
        if !refused.is_empty() || t.elapsed() > Duration::from_secs(20) {
            break refused;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Each rule of the shipped ClusterRole and leader-election Role, taken
/// out in turn: the operator is refused something it must do, and says so
/// (a 403 in its request metrics and a log line).
#[test]
fn every_rule_of_the_shipped_roles_is_needed() {
    let sim = start_sim(fast());
    let dir = tmpdir("rbac-each");
    let token = install(&sim, &dir);
    let prometheus = metrics_scraper(&sim);
    let roles: Vec<(&str, &str, &str)> = vec![
        ("ClusterRole", "", "openmed-operator"),
        ("ClusterRole", "", "openmed-operator-metrics-auth"),
        ("Role", OPERATOR_NS, "openmed-operator-leader-election"),
    ];
    let mut n = 0;
    for (kind, ns, name) in roles {
        let plural = if kind == "Role" {
            "roles"
        } else {
            "clusterroles"
        };
        let role = sim
            .object("rbac.authorization.k8s.io", plural, ns, name)
            .unwrap();
        let rules = role["rules"].as_array().unwrap().clone();
        for (i, rule) in rules.iter().enumerate() {
            let mut fewer = rules.clone();
            fewer.remove(i);
            let patch = |rules: &[Value]| {
                sim.merge_patch(
                    "rbac.authorization.k8s.io/v1",
                    kind,
                    ns,
                    name,
                    &json!({"rules": rules}),
                )
                .unwrap();
            };
            patch(&fewer);
            n += 1;
            fresh_lease_and_model(&sim, n);
            sim.reset_stats();
            let mut op = start_with(&sim, &dir, &token, &["--metrics-addr", "127.0.0.1:0"]);
            let metrics_at = op.metrics_addr();
            let scrape = || tls_get(metrics_at, "/metrics", Some(&prometheus), None).unwrap();
            let refused = wait_refused(&sim, &scrape);
            assert!(
                !refused.is_empty(),
                "{kind} {name} without rule {rule}: nothing refused"
            );
            // In the request metrics, or, when it is a review that is
            // refused, in the scrape's answer and the log.
            let seen = scrape();
            let visible = match seen.code {
                200 => seen.body.lines().any(|l| l.contains("code=\"403\"")),
                503 => op.log().contains("cannot review a metrics caller's token"),
                _ => false,
            };
            assert!(
                visible,
                "{kind} {name} without rule {rule}: refused {refused:?} but not visible (scrape {})",
                seen.code
            );
            eprintln!("{kind} {name} without {rule}: refused {}", refused[0]);
            op.kill();
            patch(&rules);
        }
    }
}

/// The namespaced overlay: a Role in the watched namespace only. The
/// operator, run as that overlay runs it, under that Role alone (the
/// cluster-wide binding every other test holds is deleted first), is
/// refused nothing and never makes a cluster-scoped request.
#[test]
fn the_namespaced_install_stays_in_its_namespaces() {
    let sim = start_sim(fast());
    sim.delete(
        "rbac.authorization.k8s.io/v1",
        "ClusterRoleBinding",
        "",
        "openmed-operator",
    )
    .unwrap();
    let dir = tmpdir("rbac-namespaced");
    let token = install_from(&sim, &dir, "manifests/overlays/namespaced");
    let mut op = start_with(&sim, &dir, &token, &["--namespace", NS]);
    op.wait_ready();
    scenario(&sim);
    assert_eq!(forbidden(&sim), Vec::<String>::new());
    let cluster_wide: Vec<String> = sim
        .requests()
        .into_iter()
        .filter(|r| r.user_agent.starts_with("openmed-operator/") && !r.resource.is_empty())
        .filter(|r| !r.path.contains("/namespaces/"))
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert_eq!(cluster_wide, Vec::<String>::new());
    let in_ns = sim
        .requests()
        .into_iter()
        .filter(|r| r.user_agent.starts_with("openmed-operator/"))
        .filter(|r| r.path.contains(&format!("/namespaces/{NS}/")) && r.status < 300)
        .count();
    assert!(in_ns > 0, "the operator made no request in {NS}");
    op.assert_clean_exit();
}

/// TokenReview and SubjectAccessReview answer from the same tokens, roles
/// and bindings that authorize every request; a review is itself a request
/// RBAC must allow.
#[test]
fn reviews_answer_from_the_same_tokens_and_roles() {
    let sim = start_sim(fast());
    let dir = tmpdir("rbac-reviews");
    let token = std::fs::read_to_string(install(&sim, &dir)).unwrap();
    let review = |path: &str, spec: Value| {
        let body = json!({"spec": spec}).to_string();
        let (code, out) = request(&sim, "POST", None, path, &body);
        assert_eq!(code, 201, "{out}");
        body_of(&out)["status"].clone()
    };
    let tokens = "/apis/authentication.k8s.io/v1/tokenreviews";
    let who = review(tokens, json!({"token": token}));
    assert_eq!(who["authenticated"], true);
    let sa = "system:serviceaccount:openmed-system:openmed-operator";
    assert_eq!(who["user"]["username"], sa);
    // `authenticated` is omitted when false, as TokenReviewStatus's is.
    let forged = review(tokens, json!({"token": "forged"}));
    assert_eq!(
        (&forged["authenticated"], &forged["user"]),
        (&Value::Null, &json!({}))
    );
    let access = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
    let groups = who["user"]["groups"].clone();
    let may = |attrs: Value| {
        let mut spec = json!({"user": sa, "groups": groups});
        for (k, v) in attrs.as_object().unwrap() {
            spec[k] = v.clone();
        }
        review(access, spec)["allowed"] == true
    };
    let res = |verb: &str, group: &str, resource: &str| json!({"resourceAttributes": {"namespace": NS, "verb": verb, "group": group, "resource": resource}});
    assert!(may(res("create", "", "configmaps")));
    assert!(may(res("patch", "apps", "deployments")));
    assert!(!may(res("create", "apps", "deployments")));
    assert!(!may(res("get", "", "secrets")));
    assert!(!may(
        json!({"nonResourceAttributes": {"path": "/metrics", "verb": "get"}})
    ));
    // A review is itself a request RBAC must allow: the operator's token
    // may ask (openmed-operator-metrics-auth), another account may not.
    let ask = |token: &str| {
        let body = json!({"spec": {"token": "x"}}).to_string();
        request(&sim, "POST", Some(token), tokens, &body)
    };
    assert_eq!(ask(&token).0, 201);
    let other = sim.service_account_token("monitoring", "nosy");
    let (code, out) = ask(&other);
    assert_eq!(code, 403, "{out}");
    assert!(out.contains("tokenreviews"), "{out}");
}

/// /metrics over TLS answers only a caller whose token the API server
/// authenticates and whose user may `get` /metrics; a warm cache costs no
/// API request; a flood of forged tokens is capped; a standby answers too.
#[test]
fn metrics_answer_only_callers_the_api_server_allows() {
    let sim = start_sim(fast());
    let dir = tmpdir("rbac-metrics");
    let token = install(&sim, &dir);
    let prometheus = metrics_scraper(&sim);
    let nosy = sim.service_account_token("monitoring", "nosy");
    let secure = ["--metrics-addr", "127.0.0.1:0"];
    let mut op = start_with(&sim, &dir, &token, &secure);
    op.wait_ready();
    wait_until("the lease taken", || op.log().contains("became the leader"));
    let addr = op.metrics_addr();
    only_a_reviewed_token_allowed_metrics_gets_in(&mut op, addr, &prometheus, &nosy);
    warm_scrapes_cost_no_api_request(&sim, addr, &prometheus);
    forged_tokens_are_refused_and_their_reviews_capped(&sim, addr, &prometheus);

    // A standby answers scrapes too (its reviews pass no write gate).
    let mut standby = start_with(&sim, &dir, &token, &secure);
    standby.wait_ready();
    let addr = standby.metrics_addr();
    let m = tls_get(addr, "/metrics", Some(&prometheus), None).unwrap();
    assert_eq!(m.code, 200, "{}", m.head);
    assert_eq!(sample(&m.body, "openmed_operator_leader"), Some(0.0));
    // No caller's token is logged.
    for log in [op.log(), standby.log()] {
        assert!(!log.contains(&prometheus) && !log.contains(&nosy), "{log}");
    }
    standby.assert_clean_exit();
    op.assert_clean_exit();
}

/// GET /metrics over TLS with `token` as the bearer.
fn scrape(addr: SocketAddr, token: Option<&str>) -> TlsAnswer {
    tls_get(addr, "/metrics", token, None).unwrap()
}

/// Anonymous, forged and unauthorized callers are refused; Prometheus gets
/// in, over a certificate for the name it used; plain HTTP gets nothing.
fn only_a_reviewed_token_allowed_metrics_gets_in(
    op: &mut Operator,
    addr: SocketAddr,
    prometheus: &str,
    nosy: &str,
) {
    let anonymous = scrape(addr, None);
    assert_eq!(anonymous.code, 401, "{}", anonymous.head);
    assert!(anonymous.head.contains("WWW-Authenticate: Bearer"));
    assert_eq!(scrape(addr, Some("forged-token")).code, 401);
    assert_eq!(scrape(addr, Some(nosy)).code, 403);
    let t = Instant::now();
    let ok = scrape(addr, Some(prometheus));
    eprintln!(
        "first scrape (a TokenReview and a SubjectAccessReview): {:?}",
        t.elapsed()
    );
    assert_eq!(ok.code, 200, "{}", ok.head);
    assert_eq!(sample(&ok.body, "openmed_operator_leader"), Some(1.0));
    // The self-signed certificate verifies for the name it was reached by.
    let trusted = tls_get(
        addr,
        "/metrics",
        Some(prometheus),
        Some((&ok.cert, "localhost")),
    );
    assert_eq!(trusted.map(|a| a.code), Ok(200));
    // Plain HTTP on the TLS port gets no answer; the health port has no
    // /metrics, and its probes need no token.
    assert_eq!(http_get_at(addr, "/metrics").0, 0);
    assert_eq!(http_get_at(op.health_addr(), "/metrics").0, 404);
    assert_eq!(op.http_get("/healthz").0, 200);
}

fn warm_scrapes_cost_no_api_request(sim: &Sim, addr: SocketAddr, prometheus: &str) {
    // Warm: scrapes cost no API request.
    sim.reset_stats();
    let t = Instant::now();
    for _ in 0..20 {
        assert_eq!(scrape(addr, Some(prometheus)).code, 200);
    }
    eprintln!(
        "20 warm authenticated scrapes (TLS handshake included): {:?}",
        t.elapsed()
    );
    assert_eq!(reviews(sim), 0);
}

fn forged_tokens_are_refused_and_their_reviews_capped(
    sim: &Sim,
    addr: SocketAddr,
    prometheus: &str,
) {
    // A flood of forged tokens: refused, and the reviews it costs capped
    // (this address's share: a burst of 3, then 1 a second). The first
    // callers spent the share; it refills at one a second, so the flood
    // starts once one review is back (on a fast machine the warm scrapes
    // take milliseconds, and no forged token would be reviewed at all).
    std::thread::sleep(Duration::from_millis(1100));
    sim.reset_stats();
    let t = Instant::now();
    let codes: Vec<u16> = (0..100)
        .map(|i| scrape(addr, Some(&format!("forged-{i}"))).code)
        .collect();
    let secs = t.elapsed().as_secs_f64();
    assert!(codes.iter().all(|c| *c == 401 || *c == 429), "{codes:?}");
    assert!(codes.contains(&429), "{codes:?}");
    let made = reviews(sim);
    // Forged tokens were reviewed (the count is of something), within the cap.
    assert!(made >= 1, "{made} reviews of 100 forged tokens");
    assert!(
        made as f64 <= 11.0 + 5.0 * secs,
        "{made} reviews in {secs:.1} s"
    );
    // Prometheus, already known, still gets in.
    let m = scrape(addr, Some(prometheus)).body;
    assert!(
        sample(
            &m,
            "openmed_operator_metrics_requests_total{verdict=\"throttled\"}"
        )
        .unwrap_or(0.0)
            > 0.0
    );
}

/// Reviews are budgeted per client address: a flood of forged tokens from
/// 127.0.0.1 (four clients, as fast as they are answered) spends that
/// address's share, and new scrapers from 127.0.0.2 (fresh tokens, each
/// needing a review) are reviewed and answered within a second during the
/// flood. The cap on all reviews holds meanwhile.
#[test]
fn a_flood_of_forged_tokens_starves_nobody_but_its_sender() {
    let sim = start_sim(fast());
    let dir = tmpdir("rbac-fair-reviews");
    let token = install(&sim, &dir);
    let prometheus = metrics_scraper(&sim);
    let mut op = start_with(&sim, &dir, &token, &["--metrics-addr", "127.0.0.1:0"]);
    op.wait_ready();
    let addr = op.metrics_addr();
    let from = |ip: Ipv4Addr, t: &str| {
        let sock = connect_from(ip, addr).map_err(|e| e.to_string())?;
        tls_get_on(sock, "/metrics", Some(t), None)
    };
    sim.reset_stats();
    let stop = AtomicBool::new(false);
    let started = Instant::now();
    let (flood, scrapes) = std::thread::scope(|s| {
        let flooders: Vec<_> = (0..4)
            .map(|f| {
                let (stop, from) = (&stop, &from);
                s.spawn(move || flood_forged_tokens(from, f, stop, started))
            })
            .collect();
        // The flood has spent every burst by now.
        std::thread::sleep(Duration::from_secs(3));
        let scrapes = new_scrapers_from_another_address(&sim, &from);
        stop.store(true, Ordering::SeqCst);
        let flood: Vec<u16> = flooders
            .into_iter()
            .flat_map(|f| f.join().unwrap())
            .collect();
        (flood, scrapes)
    });
    let secs = started.elapsed().as_secs_f64();
    let throttled = flood.iter().filter(|c| **c == 429).count();
    let made = reviews(&sim);
    assert!(made >= 10, "{made} reviews of the forged tokens");
    eprintln!(
        "flood of {} forged tokens from 127.0.0.1 ({throttled} throttled), {made} reviews in \
         {secs:.1} s; new scrapers from 127.0.0.2: {scrapes:?}",
        flood.len()
    );
    assert!(throttled > flood.len() / 2, "the flood was not throttled");
    for (code, took) in &scrapes {
        assert_eq!(
            *code, 200,
            "a new scraper from another address was refused: {scrapes:?}"
        );
        assert!(*took < Duration::from_secs(1), "answered after {took:?}");
    }
    assert!(
        made as f64 <= 11.0 + 5.0 * secs,
        "{made} reviews in {secs:.1} s"
    );
    // Known tokens are still answered from the cache.
    assert_eq!(
        from(Ipv4Addr::new(127, 0, 0, 3), &prometheus).map(|a| a.code),
        Ok(200)
    );
    op.assert_clean_exit();
}

/// Flooder `f`: forged tokens from 127.0.0.1 as fast as they are answered,
/// until told to stop (15 s at most); the codes of the answers.
fn flood_forged_tokens(
    from: &impl Fn(Ipv4Addr, &str) -> Result<TlsAnswer, String>,
    f: usize,
    stop: &AtomicBool,
    started: Instant,
) -> Vec<u16> {
    let mut codes = Vec::new();
    for i in 0..400 {
        if stop.load(Ordering::SeqCst) || started.elapsed() > Duration::from_secs(15) {
            break;
        }
        if let Ok(a) = from(Ipv4Addr::new(127, 0, 0, 1), &format!("forged-{f}-{i}")) {
            codes.push(a.code);
        }
    }
    codes
}

/// Three new scrapers from 127.0.0.2, each with a fresh token: the code
/// each got, and how long it took.
fn new_scrapers_from_another_address(
    sim: &Sim,
    from: &impl Fn(Ipv4Addr, &str) -> Result<TlsAnswer, String>,
) -> Vec<(u16, Duration)> {
    let mut scrapes = Vec::new();
    for _ in 0..3 {
        let fresh = sim.service_account_token("monitoring", "prometheus");
        let t = Instant::now();
        let code = from(Ipv4Addr::new(127, 0, 0, 2), &fresh).map_or(0, |a| a.code);
        scrapes.push((code, t.elapsed()));
        std::thread::sleep(Duration::from_millis(500));
    }
    scrapes
}

/// --metrics-cert-dir: the certificate and key given are served, and a
/// rotated pair is served from the next handshake on, without a restart.
#[test]
fn the_metrics_certificate_comes_from_its_directory_and_is_reloaded() {
    let sim = start_sim(fast());
    let dir = tmpdir("rbac-metrics-certs");
    let token = install(&sim, &dir);
    let prometheus = metrics_scraper(&sim);
    let certs = dir.join("certs");
    std::fs::create_dir_all(&certs).unwrap();
    let write_pair = || {
        let k = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        // As a mounted Secret changes: both files replaced at once.
        let tmp = dir.join("certs-next");
        std::fs::create_dir_all(&tmp).unwrap();
        std::fs::write(tmp.join("tls.crt"), k.cert.pem()).unwrap();
        std::fs::write(tmp.join("tls.key"), k.key_pair.serialize_pem()).unwrap();
        for f in ["tls.crt", "tls.key"] {
            std::fs::rename(tmp.join(f), certs.join(f)).unwrap();
        }
        k.cert.der().to_vec()
    };
    let first = write_pair();
    let certs_arg = certs.to_str().unwrap();
    let args = [
        "--metrics-addr",
        "127.0.0.1:0",
        "--metrics-cert-dir",
        certs_arg,
    ];
    let mut op = start_with(&sim, &dir, &token, &args);
    op.wait_ready();
    let addr = op.metrics_addr();
    let trusting = |cert: &[u8]| {
        tls_get(
            addr,
            "/metrics",
            Some(&prometheus),
            Some((cert, "localhost")),
        )
    };
    assert_eq!(trusting(&first).map(|a| a.code), Ok(200));
    std::thread::sleep(Duration::from_millis(1100));
    let second = write_pair();
    wait_until("the new certificate served", || trusting(&second).is_ok());
    let old = trusting(&first);
    assert!(
        old.as_ref().is_err_and(|e| e.contains("certificate")),
        "the old certificate is still served, or the server is gone: {:?}",
        old.map(|a| a.code)
    );
    assert!(
        op.log().contains("metrics certificate reloaded"),
        "{}",
        op.log()
    );
    op.assert_clean_exit();
}

/// The shipped user roles reach people through the built-in ones: the
/// aggregation controller (`ClusterRoleAggregationController.syncClusterRole`)
/// copies `openmed-openmedmodels-edit` into `edit` and `admin`, and
/// `-view` into `view`, so a RoleBinding to `edit` lets one manage
/// OpenMedModels in that namespace only, and one to `view` lets one read.
#[test]
fn users_bound_to_edit_manage_models_and_to_view_only_read() {
    let sim = start_sim(fast());
    let dir = tmpdir("rbac-aggregate");
    install(&sim, &dir);
    for (who, role) in [("editor", "edit"), ("viewer", "view")] {
        sim.create(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": who, "namespace": NS},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": who, "namespace": NS}]}))
        .unwrap();
    }
    wait_until("edit and view aggregated", || {
        ["edit", "view", "admin"].iter().all(|r| {
            let role = sim.object("rbac.authorization.k8s.io", "clusterroles", "", r);
            role.is_some_and(|r| r["rules"].to_string().contains("openmedmodels"))
        })
    });
    let editor = sim.service_account_token(NS, "editor");
    let viewer = sim.service_account_token(NS, "viewer");
    let models = format!("/apis/openmed.ai/v1alpha1/namespaces/{NS}/openmedmodels");
    let one = format!("{models}/m");
    let body = model("m", "svc", V1, 600).to_string();

    assert_eq!(request(&sim, "POST", Some(&viewer), &models, &body).0, 403);
    let (code, out) = request(&sim, "POST", Some(&editor), &models, &body);
    assert_eq!(code, 201, "{out}");
    let (code, out) = get_as(&sim, &viewer, &models);
    assert_eq!(code, 200, "{out}");
    assert_eq!(body_of(&out)["items"][0]["metadata"]["name"], "m");
    let replicas = json!({"spec": {"replicas": 3}}).to_string();
    let patch = |token: &str| request(&sim, "PATCH", Some(token), &one, &replicas).0;
    assert_eq!(patch(&viewer), 403);
    assert_eq!(patch(&editor), 200);
    // Only in the namespace of the binding.
    let elsewhere = models.replace(&format!("/{NS}/"), &format!("/{OPERATOR_NS}/"));
    assert_eq!(get_as(&sim, &editor, &elsewhere).0, 403);
    let (code, out) = request(&sim, "DELETE", Some(&viewer), &one, "");
    assert_eq!(code, 403, "{out}");
    let (code, out) = request(&sim, "DELETE", Some(&editor), &one, "");
    assert_eq!(code, 200, "{out}");
}
