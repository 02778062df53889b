//! Who may read `/metrics` (and the live view off loopback): the caller's
//! bearer token is authenticated with a TokenReview and the user it names
//! authorized with a SubjectAccessReview for `get` on the non-resource URL
//! `/metrics` (`/live-view` for the view), as controller-runtime's
//! `WithAuthenticationAndAuthorization` filter does.
//!
//! A verdict is cached by a SHA-256 digest of the token (never the token),
//! briefly, so a scraper costs no API request per scrape, and never trusted
//! past its time. Reviews are budgeted per client address and capped in
//! all, so a flood of new or bad tokens cannot become a flood of API
//! requests, and spends its sender's share only: a scraper from another
//! address is still reviewed. Beyond either a caller is told to come back
//! (429).

use crate::kube::path::{ResourcePath, SUBJECT_ACCESS_REVIEWS, TOKEN_REVIEWS};
use crate::kube::ratelimit::{Bucket, Limits};
use crate::kube::Client;
use crate::lock::lock;
use crate::server::Answer;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The non-resource URL a scraper must be allowed to `get`.
pub const METRICS_PATH: &str = "/metrics";
/// The one a viewer of the live view must be allowed to `get` off loopback
/// (a scraper does not thereby see every model's status and Events).
pub const VIEW_PATH: &str = "/live-view";
/// How long a verdict is kept: an allowed caller is re-checked each minute
/// (a revoked binding takes effect within it), a refused one sooner.
const ALLOWED_FOR: Duration = Duration::from_secs(60);
const REFUSED_FOR: Duration = Duration::from_secs(10);
/// Verdicts kept at most (a few hundred bytes of memory in all).
const MAX_CACHED: usize = 1024;
/// Reviews (each a TokenReview and, for a real user, a SubjectAccessReview)
/// a second, after a burst: the cap on what all callers together cost the
/// API server.
const REVIEWS: Limits = Limits {
    qps: Some(5.0),
    burst: 10,
};
/// One client address's share of [`REVIEWS`]: a flood from one address
/// leaves four reviews a second to everyone else.
const REVIEWS_PER_CLIENT: Limits = Limits {
    qps: Some(1.0),
    burst: 3,
};
/// Client addresses whose share is being spent, kept at most; a full
/// bucket is forgotten (it is what a new address gets).
const MAX_CLIENTS: usize = 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    /// No token, or one the API server does not know: 401.
    Unauthenticated,
    /// A user without `get` on `/metrics`: 403.
    Forbidden,
    /// Over the review cap, not yet known: 429, come back in a second.
    Throttled,
    /// The API server could not be asked: 503, not cached.
    Unavailable,
}

impl Verdict {
    /// The answer to a caller this verdict does not let in (None: let in).
    pub fn refusal(self) -> Option<Answer> {
        Some(match self {
            Verdict::Allowed => return None,
            Verdict::Unauthenticated => Answer {
                headers: vec![("WWW-Authenticate", "Bearer")],
                ..Answer::text(
                    401,
                    "Unauthorized: send a bearer token that the Kubernetes API server accepts, as Authorization: Bearer <token>.\n",
                )
            },
            Verdict::Forbidden => Answer::text(
                403,
                "Forbidden: your user may not get this path; grant it get on this non-resource URL.\n",
            ),
            Verdict::Throttled => Answer {
                headers: vec![("Retry-After", "1")],
                ..Answer::text(429, "Too many new callers: retry in a second.\n")
            },
            Verdict::Unavailable => Answer::text(
                503,
                "The Kubernetes API server cannot review the token now: retry later.\n",
            ),
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Allowed => "allowed",
            Verdict::Unauthenticated => "unauthenticated",
            Verdict::Forbidden => "forbidden",
            Verdict::Throttled => "throttled",
            Verdict::Unavailable => "unavailable",
        }
    }
}

/// Asks the API server about one token.
pub trait Reviewer: Send + Sync {
    /// Allowed, Unauthenticated or Forbidden; Err when it cannot tell.
    fn review(&self, token: &str) -> Result<Verdict, String>;
}

/// The cache and the cap in front of a [`Reviewer`]: what guards /metrics
/// and, off loopback, the live view.
pub struct TokenAccess {
    reviewer: Box<dyn Reviewer>,
    cache: Mutex<HashMap<[u8; 32], (Verdict, Instant)>>,
    budget: Mutex<Budget>,
}

/// The review cap and each client address's share of it.
struct Budget {
    all: Option<Bucket>,
    clients: HashMap<ClientKey, Bucket>,
}

/// Who a share belongs to: an IPv4 address, or an IPv6 /64 (what one host
/// is given; its addresses are free for it to pick).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum ClientKey {
    V4(u32),
    V6(u64),
}

impl ClientKey {
    fn of(ip: IpAddr) -> ClientKey {
        match ip {
            IpAddr::V4(v4) => ClientKey::V4(v4.into()),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => ClientKey::V4(v4.into()),
                None => ClientKey::V6((u128::from(v6) >> 64) as u64),
            },
        }
    }
}

impl Budget {
    /// Take a review for `client` from its share, then from the cap.
    fn try_take(&mut self, client: IpAddr, now: Instant) -> bool {
        if self.clients.len() >= MAX_CLIENTS {
            self.clients.retain(|_, b| !b.is_full(now));
        }
        let key = ClientKey::of(client);
        if !self.clients.contains_key(&key) && self.clients.len() >= MAX_CLIENTS {
            // Every share in the table is being spent: more addresses than
            // that are flooding, and the cap alone decides.
            return self.all.as_mut().is_none_or(|b| b.try_take(now));
        }
        let Some(share) = Bucket::new(REVIEWS_PER_CLIENT, now) else {
            return true;
        };
        let share = self.clients.entry(key).or_insert(share);
        share.try_take(now) && self.all.as_mut().is_none_or(|b| b.try_take(now))
    }
}

impl TokenAccess {
    pub fn new(reviewer: Box<dyn Reviewer>) -> TokenAccess {
        TokenAccess {
            reviewer,
            cache: Mutex::new(HashMap::new()),
            budget: Mutex::new(Budget {
                all: Bucket::new(REVIEWS, Instant::now()),
                clients: HashMap::new(),
            }),
        }
    }

    /// The verdict on a request from `client` carrying `authorization`
    /// (the header). A cached verdict holds until its time is up, never
    /// after: past it, the token is reviewed again or the caller waits.
    pub fn check(&self, authorization: Option<&str>, client: IpAddr) -> Verdict {
        let Some(token) = authorization.and_then(bearer) else {
            return Verdict::Unauthenticated;
        };
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let now = Instant::now();
        if let Some((v, until)) = lock(&self.cache).get(&key).copied() {
            if until > now {
                return v;
            }
        }
        if !lock(&self.budget).try_take(client, now) {
            return Verdict::Throttled;
        }
        match self.reviewer.review(token) {
            Ok(v) => {
                self.remember(key, v, now);
                v
            }
            Err(e) => {
                log::warn!("cannot review a metrics caller's token: {e}");
                Verdict::Unavailable
            }
        }
    }

    fn remember(&self, key: [u8; 32], v: Verdict, now: Instant) {
        let ttl = if v == Verdict::Allowed {
            ALLOWED_FOR
        } else {
            REFUSED_FOR
        };
        let mut cache = lock(&self.cache);
        if cache.len() >= MAX_CACHED {
            cache.retain(|_, (_, until)| *until > now);
        }
        if cache.len() >= MAX_CACHED {
            // Still full of live verdicts: the one that ends first goes.
            if let Some(k) = cache.iter().min_by_key(|(_, (_, u))| *u).map(|(k, _)| *k) {
                cache.remove(&k);
            }
        }
        cache.insert(key, (v, now + ttl));
    }
}

/// The token of an `Authorization: Bearer <token>` header.
pub fn bearer(header: &str) -> Option<&str> {
    let (scheme, token) = header.trim().split_once(' ')?;
    let token = token.trim();
    let plain = !token.is_empty() && !token.contains(char::is_whitespace);
    (scheme.eq_ignore_ascii_case("bearer") && plain).then_some(token)
}

/// Reviews made with the API server (on a client without the leader's
/// write gate: a standby answers scrapes too), for `get` on `path`.
pub struct ApiReviewer {
    pub client: std::sync::Arc<Client>,
    pub path: &'static str,
}

impl Reviewer for ApiReviewer {
    fn review(&self, token: &str) -> Result<Verdict, String> {
        let post = |rt, body: &Value| {
            let path = ResourcePath::collection(rt, None).map_err(|e| e.to_string())?;
            self.client.create(&path, body).map_err(|e| e.to_string())
        };
        let who = post(TOKEN_REVIEWS, &token_review(token))?;
        let Some(user) = authenticated_user(&who) else {
            return Ok(Verdict::Unauthenticated);
        };
        let may = post(SUBJECT_ACCESS_REVIEWS, &access_review(&user, self.path))?;
        Ok(if may["status"]["allowed"] == true {
            Verdict::Allowed
        } else {
            Verdict::Forbidden
        })
    }
}

/// The TokenReview to create for `token`.
pub fn token_review(token: &str) -> Value {
    json!({
        "apiVersion": TOKEN_REVIEWS.api_version(),
        "kind": TOKEN_REVIEWS.kind,
        "spec": {"token": token},
    })
}

/// The user a TokenReview's answer names, if it authenticated the token.
pub fn authenticated_user(review: &Value) -> Option<Value> {
    let status = &review["status"];
    (status["authenticated"] == true && status["user"]["username"].is_string())
        .then(|| status["user"].clone())
}

/// The SubjectAccessReview asking whether `user` may get `path`.
pub fn access_review(user: &Value, path: &str) -> Value {
    let mut spec = json!({
        "user": user["username"],
        "nonResourceAttributes": {"path": path, "verb": "get"},
    });
    for field in ["uid", "groups", "extra"] {
        if !user[field].is_null() {
            spec[field] = user[field].clone();
        }
    }
    json!({
        "apiVersion": SUBJECT_ACCESS_REVIEWS.api_version(),
        "kind": SUBJECT_ACCESS_REVIEWS.kind,
        "spec": spec,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// Each refusal's body is one sentence saying what to do.
    #[test]
    fn refusals_are_sentences() {
        for v in [
            Verdict::Unauthenticated,
            Verdict::Forbidden,
            Verdict::Throttled,
            Verdict::Unavailable,
        ] {
            let body = v.refusal().unwrap().body;
            let first = body.chars().next().unwrap();
            assert!(
                first.is_uppercase() && body.ends_with(".\n") && body.lines().count() == 1,
                "{v:?}: {body:?}"
            );
        }
        let body = Verdict::Unauthenticated.refusal().unwrap().body;
        assert!(body.contains("Authorization: Bearer"), "{body}");
    }

    /// Allows "good", knows "nosy" (forbidden), fails on "down".
    struct Fake(Arc<AtomicUsize>);

    impl Reviewer for Fake {
        fn review(&self, token: &str) -> Result<Verdict, String> {
            self.0.fetch_add(1, Ordering::SeqCst);
            match token {
                "good" => Ok(Verdict::Allowed),
                "nosy" => Ok(Verdict::Forbidden),
                "down" => Err("connection refused".into()),
                _ => Ok(Verdict::Unauthenticated),
            }
        }
    }

    fn access() -> (TokenAccess, Arc<AtomicUsize>) {
        let n = Arc::new(AtomicUsize::new(0));
        (TokenAccess::new(Box::new(Fake(n.clone()))), n)
    }

    #[test]
    fn a_verdict_is_cached_and_a_missing_token_costs_no_review() {
        let (a, reviews) = access();
        assert_eq!(a.check(None, SCRAPER), Verdict::Unauthenticated);
        assert_eq!(
            a.check(Some("Basic Zm9vOmJhcg=="), SCRAPER),
            Verdict::Unauthenticated
        );
        assert_eq!(reviews.load(Ordering::SeqCst), 0);
        for _ in 0..5 {
            assert_eq!(a.check(Some("Bearer good"), SCRAPER), Verdict::Allowed);
            assert_eq!(a.check(Some("bearer nosy"), SCRAPER), Verdict::Forbidden);
            assert_eq!(
                a.check(Some("Bearer forged"), SCRAPER),
                Verdict::Unauthenticated
            );
        }
        assert_eq!(reviews.load(Ordering::SeqCst), 3);
        // An outage is not remembered: the next scrape asks again.
        assert_eq!(a.check(Some("Bearer down"), FLOODER), Verdict::Unavailable);
        assert_eq!(a.check(Some("Bearer down"), FLOODER), Verdict::Unavailable);
        assert_eq!(reviews.load(Ordering::SeqCst), 5);
    }

    const FLOODER: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 1));
    const SCRAPER: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 2));

    #[test]
    fn a_flood_spends_its_senders_share_and_the_cap_holds() {
        let (a, reviews) = access();
        let mut throttled = 0;
        for i in 0..1000 {
            if a.check(Some(&format!("Bearer forged-{i}")), FLOODER) == Verdict::Throttled {
                throttled += 1;
            }
        }
        // The share's burst, plus what its rate refills while the loop runs.
        let made = reviews.load(Ordering::SeqCst);
        assert!(made <= 5, "{made} reviews for one address");
        assert!(throttled >= 995, "{throttled}");
        // A scraper never seen before, from another address: reviewed.
        assert_eq!(a.check(Some("Bearer good"), SCRAPER), Verdict::Allowed);
        assert_eq!(reviews.load(Ordering::SeqCst), made + 1);
        // Many addresses at once: the cap, not the shares, bounds them.
        let before = reviews.load(Ordering::SeqCst);
        for i in 0..2000u32 {
            let ip = IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + i));
            a.check(Some(&format!("Bearer many-{i}")), ip);
        }
        let made = reviews.load(Ordering::SeqCst) - before;
        assert!(made <= 15, "{made} reviews from 2,000 addresses");
        assert!(lock(&a.cache).len() <= MAX_CACHED);
        assert!(lock(&a.budget).clients.len() <= MAX_CLIENTS);
    }

    #[test]
    fn an_expired_verdict_never_lets_its_caller_in() {
        let (a, _) = access();
        assert_eq!(a.check(Some("Bearer good"), SCRAPER), Verdict::Allowed);
        for i in 0..100 {
            a.check(Some(&format!("Bearer forged-{i}")), SCRAPER);
        }
        // Its minute up while its own address has spent its share: no
        // grace, it waits for a review like any caller.
        let key: [u8; 32] = Sha256::digest(b"good").into();
        let past = Instant::now() - ALLOWED_FOR;
        lock(&a.cache).insert(key, (Verdict::Allowed, past));
        assert_eq!(a.check(Some("Bearer good"), SCRAPER), Verdict::Throttled);
    }

    #[test]
    fn an_ipv6_host_is_one_client_and_mapped_ipv4_is_ipv4() {
        let ip = |s: &str| ClientKey::of(s.parse().unwrap());
        assert_eq!(ip("2001:db8:1:2::1"), ip("2001:db8:1:2:ffff::9"));
        assert_ne!(ip("2001:db8:1:2::1"), ip("2001:db8:1:3::1"));
        assert_eq!(ip("::ffff:127.0.0.2"), ip("127.0.0.2"));
    }

    #[test]
    fn the_cache_never_holds_more_than_its_bound() {
        let (a, _) = access();
        for i in 0..(MAX_CACHED + 50) {
            let mut key = [0u8; 32];
            key[..2].copy_from_slice(&(i as u16).to_le_bytes());
            key[2] = 1;
            a.remember(key, Verdict::Allowed, Instant::now());
        }
        assert_eq!(lock(&a.cache).len(), MAX_CACHED);
    }

    #[test]
    fn only_a_bearer_token_is_taken() {
        assert_eq!(bearer("Bearer abc.def"), Some("abc.def"));
        assert_eq!(bearer("  bearer   abc "), Some("abc"));
        assert_eq!(bearer("Bearer"), None);
        assert_eq!(bearer("Bearer a b"), None);
        assert_eq!(bearer("Token abc"), None);
    }

    #[test]
    fn reviews_carry_the_token_and_the_users_identity_and_nothing_else() {
        let t = token_review("tok");
        assert_eq!(t["kind"], "TokenReview");
        assert_eq!(t["apiVersion"], "authentication.k8s.io/v1");
        assert_eq!(t["spec"], json!({"token": "tok"}));
        let answer = json!({"status": {"authenticated": true, "user": {
            "username": "system:serviceaccount:monitoring:prometheus",
            "uid": "u-1", "groups": ["system:serviceaccounts"]}}});
        let user = authenticated_user(&answer).unwrap();
        let sar = access_review(&user, METRICS_PATH);
        assert_eq!(sar["kind"], "SubjectAccessReview");
        assert_eq!(
            sar["spec"],
            json!({"user": "system:serviceaccount:monitoring:prometheus", "uid": "u-1",
                   "groups": ["system:serviceaccounts"],
                   "nonResourceAttributes": {"path": "/metrics", "verb": "get"}})
        );
        assert!(!sar.to_string().contains("tok\""));
        let refused = json!({"status": {"authenticated": false, "error": "invalid bearer token"}});
        assert_eq!(authenticated_user(&refused), None);
    }
}
