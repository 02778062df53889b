//! Serving a watch: the options a watch request may carry, the initial
//! events (the listed state, a `sendInitialEvents` stream or a replay from a
//! resourceVersion, an ERROR event with 410 Expired when it is older than
//! the history), then
//! the stored changes as chunked newline-delimited JSON events, with
//! bookmarks, selector transitions, the watch-lag fault, cuts and expiry.
//! `api` routes a `GET ...?watch=1` here.

use crate::apiserver::api::{lock, output_of, partial, selectors, Output, Res, Shared};
use crate::apiserver::errors::{ApiErr, Cause};
use crate::apiserver::http::{Body, ChunkWriter, Request, Response};
use crate::apiserver::selector::{FieldSelector, LabelSelector};
use crate::apiserver::table;
use crate::registry::resources::ResourceDef;
use crate::registry::store::{EvKind, HistEvent, Store};
use serde_json::{json, Value};
use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

struct WatchSpec {
    def: ResourceDef,
    version: String,
    ns: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
    output: Output,
    /// What a Table row carries (`includeObject`).
    include: table::Include,
    bookmarks: bool,
    deadline: Instant,
    /// The request path, for the watch-lag fault.
    path: String,
}

impl WatchSpec {
    /// What a watch request asks for; the selectors' errors are its errors.
    fn parse(req: &Request, res: &Res) -> Result<WatchSpec, ApiErr> {
        let (labels, fields) = selectors(req, &res.def)?;
        let timeout = req
            .q("timeoutSeconds")
            .and_then(|t| t.parse::<u64>().ok())
            .map(Duration::from_secs)
            .unwrap_or(Duration::from_secs(1800));
        Ok(WatchSpec {
            def: res.def.clone(),
            version: res.version.clone(),
            ns: res.ns.clone(),
            labels,
            fields,
            output: output_of(req),
            include: table::Include::of(req.q("includeObject")),
            bookmarks: matches!(req.q("allowWatchBookmarks"), Some("true") | Some("1")),
            deadline: Instant::now() + timeout,
            path: req.path.clone(),
        })
    }

    fn matches(&self, ns: &str, o: &Value) -> bool {
        self.ns.as_deref().map(|n| n == ns).unwrap_or(true)
            && self.labels.matches(o)
            && self.fields.matches(&self.def.kind, o)
    }

    fn line(&self, ty: &str, obj: &Value, rv: &str) -> Vec<u8> {
        let object = match self.output {
            // Each event is one object: `asPartialObjectMetadataList` fails
            // on it and the watch encoder sends the object untransformed.
            Output::Json | Output::PartialList => {
                let mut o = obj.clone();
                o["apiVersion"] = json!(self.def.api_version(&self.version));
                o
            }
            Output::Partial => partial(obj),
            Output::Table => {
                let now = SystemTime::now();
                table::table(&self.def, &self.version, &[obj], rv, now, self.include)
            }
        };
        let mut line = json!({"type": ty, "object": object})
            .to_string()
            .into_bytes();
        line.push(b'\n');
        line
    }

    /// The stored objects this watcher sees, as synthetic ADDED events.
    fn state(&self, st: &Store) -> Vec<Vec<u8>> {
        let rv = st.rv.to_string();
        st.list(&self.def, self.ns.as_deref())
            .iter()
            .filter(|o| self.matches(o["metadata"]["namespace"].as_str().unwrap_or(""), o))
            .map(|o| self.line("ADDED", o, &rv))
            .collect()
    }

    /// A BOOKMARK: an empty object of the watched kind carrying only the
    /// resourceVersion (and the annotations given), transformed like any
    /// event object (`PartialObjectMetadata` when asked for).
    fn bookmark(&self, rv: u64, annotations: Option<Value>) -> Vec<u8> {
        let mut meta = json!({"resourceVersion": rv.to_string()});
        if let Some(a) = annotations {
            meta["annotations"] = a;
        }
        let (kind, api_version) = match self.output {
            Output::Partial => (
                "PartialObjectMetadata".to_string(),
                "meta.k8s.io/v1".to_string(),
            ),
            _ => (self.def.kind.clone(), self.def.api_version(&self.version)),
        };
        let mark = json!({"type": "BOOKMARK", "object": {"kind": kind, "apiVersion": api_version, "metadata": meta}});
        let mut l = mark.to_string().into_bytes();
        l.push(b'\n');
        l
    }

    /// The event this watcher sees for a stored change, with selector
    /// transitions turned into ADDED / DELETED as the real server does.
    fn translate(&self, ev: &HistEvent) -> Option<Vec<u8>> {
        if ev.res != self.def.key() {
            return None;
        }
        let rv = ev.rv.to_string();
        let now_match = self.matches(&ev.ns, &ev.obj);
        let was_match = ev
            .old
            .as_ref()
            .map(|o| self.matches(&ev.ns, o))
            .unwrap_or(false);
        let ty = match ev.kind {
            EvKind::Added if now_match => "ADDED",
            EvKind::Deleted if now_match || was_match => "DELETED",
            EvKind::Modified if now_match && was_match => "MODIFIED",
            EvKind::Modified if now_match => "ADDED",
            EvKind::Modified if was_match => {
                // `cacheWatcher.convertToWatchEvent`: an object that leaves
                // the selector is sent as DELETED with its previous state,
                // at the event's resourceVersion.
                let mut gone = ev.old.as_deref().cloned().unwrap_or_default();
                gone["metadata"]["resourceVersion"] = json!(rv);
                return Some(self.line("DELETED", &gone, &rv));
            }
            _ => return None,
        };
        Some(self.line(ty, &ev.obj, &rv))
    }
}

fn expired_line(msg: &str) -> Vec<u8> {
    let mut l = json!({"type": "ERROR", "object": ApiErr::expired(msg).status()})
        .to_string()
        .into_bytes();
    l.push(b'\n');
    l
}

/// `validateWatchOptions` (apimachinery meta/internalversion/validation),
/// with the WatchList feature on as in 1.32: `sendInitialEvents` needs
/// `resourceVersionMatch=NotOlderThan`, which needs `sendInitialEvents`.
fn watch_options(req: &Request) -> Result<Option<bool>, ApiErr> {
    let send = req.q("sendInitialEvents").map(|v| v == "true" || v == "1");
    let matched = req.q("resourceVersionMatch").unwrap_or("");
    let mut causes = Vec::new();
    let rvm = "resourceVersionMatch";
    if send.is_some() && matched != "NotOlderThan" {
        causes.push(Cause::forbidden(
            rvm,
            "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
        ));
    }
    if !matched.is_empty() {
        if send.is_none() {
            causes.push(Cause::forbidden(
                rvm,
                "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
            ));
        }
        if matched != "NotOlderThan" {
            causes.push(Cause::not_supported(
                rvm,
                &json!(matched),
                &["NotOlderThan"],
            ));
        }
        if req.q("continue").is_some_and(|c| !c.is_empty()) {
            causes.push(Cause::forbidden(
                rvm,
                "resourceVersionMatch is forbidden when continue is provided",
            ));
        }
    }
    if causes.is_empty() {
        Ok(send)
    } else {
        Err(ApiErr::invalid_options("ListOptions", causes))
    }
}

/// The expire-watches fault, taken by this watch: `Some(true)` for a 410
/// inside the stream, `Some(false)` for a 410 as the HTTP answer.
fn take_expiry(shared: &Shared) -> Option<bool> {
    let mut f = lock(&shared.faults);
    if f.expire_watches > 0 {
        f.expire_watches -= 1;
        Some(f.expire_in_stream)
    } else {
        None
    }
}

/// The lines a watch starts with and the resourceVersion its events follow:
/// the watch-list stream, nothing, the current state, or (from a given
/// resourceVersion) nothing but a replay. From a resourceVersion older than
/// the history, the one line is an ERROR event with the 410 Status and no
/// events follow (None): the watch cache answers so once the request is
/// admitted (`Cacher.Watch` returns `newErrWatcher`), not with an HTTP 410.
fn initial_events(
    st: &Store,
    spec: &WatchSpec,
    send_initial: Option<bool>,
    requested: &str,
    expire: Option<bool>,
) -> Result<(Vec<Vec<u8>>, Option<u64>), ApiErr> {
    let from_now = requested.is_empty() || requested == "0";
    if send_initial == Some(true) {
        // The watch-list stream: the state as synthetic ADDED events, then
        // (with bookmarks allowed) one BOOKMARK annotated
        // `k8s.io/initial-events-end` at the state's resourceVersion.
        let mut lines = spec.state(st);
        if spec.bookmarks {
            let end = json!({"k8s.io/initial-events-end": "true"});
            lines.push(spec.bookmark(st.rv, Some(end)));
        }
        return Ok((lines, Some(st.rv)));
    }
    if from_now {
        let lines = match send_initial {
            Some(false) => Vec::new(),
            _ => spec.state(st),
        };
        return Ok((lines, Some(st.rv)));
    }
    let n: u64 = requested
        .parse()
        .map_err(|_| ApiErr::bad_request(format!("invalid resource version {requested:?}")))?;
    let too_old = format!(
        "too old resource version: {n} ({})",
        st.compacted.max(n + 1)
    );
    if expire == Some(false) {
        // The fault: a 410 as the HTTP answer (a proxy's, or an older server's).
        return Err(ApiErr::expired(too_old));
    }
    if n < st.compacted {
        return Ok((vec![expired_line(&too_old)], None));
    }
    Ok((Vec::new(), Some(n.min(st.rv))))
}

/// Serve a watch request: validate it, work out where it starts, and answer
/// a stream that sends the initial lines and then the events as they come.
pub(crate) fn watch(shared: &Arc<Shared>, req: &Request, res: Res) -> Result<Response, ApiErr> {
    let send_initial = watch_options(req)?;
    let spec = WatchSpec::parse(req, &res)?;
    let expire = take_expiry(shared);
    let requested = req.q("resourceVersion").unwrap_or("");
    let (initial, cursor) = {
        let st = lock(&shared.store);
        initial_events(&st, &spec, send_initial, requested, expire)?
    };
    let shared = shared.clone();
    let epoch = shared.watch_epoch.load(Ordering::SeqCst);
    let in_stream_expiry = expire == Some(true);
    let stream = move |w: &mut ChunkWriter<'_>| -> io::Result<()> {
        if in_stream_expiry {
            return w.send(&expired_line("too old resource version (injected)"));
        }
        for l in initial {
            w.send(&l)?;
        }
        match cursor {
            Some(cursor) => stream_events(&shared, &spec, cursor, epoch, w),
            None => Ok(()),
        }
    };
    Ok(Response {
        status: 200,
        headers: vec![("Content-Type".into(), "application/json".into())],
        body: Body::Stream(Box::new(stream)),
    })
}

/// The events of one watch after `cursor`, as they become due: each one
/// `lag` after it happened (the watch-lag fault; none by default), in
/// order. The cursor only passes events already sent (or not this watch's),
/// so a bookmark never carries a resourceVersion past an event held back.
fn stream_events(
    shared: &Arc<Shared>,
    spec: &WatchSpec,
    mut cursor: u64,
    epoch: u64,
    w: &mut ChunkWriter<'_>,
) -> io::Result<()> {
    let cut = || io::Error::new(io::ErrorKind::ConnectionAborted, "watch cut");
    let end_epoch = shared.watch_end_epoch.load(Ordering::SeqCst);
    let mut last_bookmark = Instant::now();
    // When the first event held back by a lag falls due.
    let mut held: Option<Instant> = None;
    loop {
        if shared.watch_epoch.load(Ordering::SeqCst) != epoch
            || shared.stopping.load(Ordering::SeqCst)
        {
            return Err(cut());
        }
        let now = Instant::now();
        if now >= spec.deadline || shared.watch_end_epoch.load(Ordering::SeqCst) != end_epoch {
            return Ok(());
        }
        let mut wait = (spec.deadline - now).min(Duration::from_millis(200));
        if let Some(due) = held {
            wait = wait.min(due.saturating_duration_since(now));
        }
        let (events, current) = {
            let mut st = lock(&shared.store);
            if st.rv <= cursor || held.is_some_and(|due| due > now) {
                st = shared
                    .changed
                    .wait_timeout(st, wait)
                    .map(|(g, _)| g)
                    .unwrap_or_else(|p| p.into_inner().0);
            }
            (st.events_after(cursor), st.rv)
        };
        let Some(events) = events else {
            w.send(&expired_line(&format!(
                "too old resource version: {cursor}"
            )))?;
            return Ok(());
        };
        let lag = lock(&shared.faults).watch_lag_for(&spec.path);
        let now = Instant::now();
        let due_at = |at: Instant| at.checked_add(lag).unwrap_or(spec.deadline);
        let ready = events.iter().take_while(|e| due_at(e.at) <= now).count();
        let mut sent = 0;
        for ev in &events[..ready] {
            if let Some(line) = spec.translate(ev) {
                w.send(&line)?;
                sent += 1;
            }
        }
        if sent > 0 {
            let mut stats = lock(&shared.stats);
            *stats.watch_events.entry(spec.def.key()).or_default() += sent;
        }
        held = events.get(ready).map(|e| due_at(e.at));
        cursor = match (held, events[..ready].last()) {
            (None, _) => current,
            (Some(_), Some(last)) => last.rv,
            (Some(_), None) => cursor,
        };
        // Every event up to `cursor` has been sent, so a bookmark at it is
        // never behind an event before it nor ahead of one held back.
        if spec.bookmarks && last_bookmark.elapsed() >= shared.bookmark_interval {
            last_bookmark = Instant::now();
            w.send(&spec.bookmark(cursor, None))?;
        }
    }
}
