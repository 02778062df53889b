//! Lists as the real server serves them: paged with continue tokens, a
//! snapshot at the first page's resourceVersion.

use super::*;

pub(super) fn list(shared: &Arc<Shared>, req: &Request, res: &Res) -> Result<Response, ApiErr> {
    let def = &res.def;
    // ValidateListOptions (apimachinery meta/internalversion/validation).
    if req.q("sendInitialEvents").is_some() {
        return Err(ApiErr::invalid_options(
            "ListOptions",
            vec![Cause::forbidden(
                "sendInitialEvents",
                "sendInitialEvents is forbidden for list",
            )],
        ));
    }
    if output_of(req) == Output::Partial {
        return Err(not_acceptable(format!(
            "you requested PartialObjectMetadata, but the requested object is a list ({})",
            go_type(def, true)
        )));
    }
    let (l, f) = selectors(req, def)?;
    let limit: usize = req
        .q("limit")
        .and_then(|x| x.parse().ok())
        .filter(|x| *x > 0)
        .unwrap_or(usize::MAX);
    let st = lock(&shared.store);
    let ns = res.ns.as_deref();
    // A later page is read at the first page's revision (a snapshot).
    let (list_rv, after, objects) = match req.q("continue").filter(|c| !c.is_empty()) {
        Some(tok) => {
            let (rv, key) = decode_continue(tok)
                .ok_or_else(|| ApiErr::bad_request("continue key is not valid"))?;
            let Some(objects) = st.list_at(def, ns, rv) else {
                return Err(ApiErr::expired("The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter."));
            };
            (rv, Some(key), objects)
        }
        None => (st.rv, None, st.list(def, ns)),
    };
    drop(st);
    let all: Vec<Arc<Value>> = objects
        .into_iter()
        .filter(|o| l.matches(o) && f.matches(&def.kind, o))
        .filter(|o| match &after {
            Some(k) => obj_key(o) > *k,
            None => true,
        })
        .collect();
    let page: Vec<&Value> = all.iter().take(limit).map(|a| &**a).collect();
    let more = all.len() > page.len();
    let mut meta = json!({"resourceVersion": list_rv.to_string()});
    if more {
        if let Some(last) = page.last() {
            meta["continue"] = json!(encode_continue(list_rv, &obj_key(last)));
            meta["remainingItemCount"] = json!(all.len() - page.len());
        }
    }
    let now = SystemTime::now();
    let body = match output_of(req) {
        Output::Table => {
            let include = table::Include::of(req.q("includeObject"));
            let rv = list_rv.to_string();
            let mut t = table::table(def, &res.version, &page, &rv, now, include);
            t["metadata"] = meta;
            t
        }
        Output::PartialList => {
            json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": meta, "items": page.iter().map(|o| partial(o)).collect::<Vec<_>>()})
        }
        Output::Json | Output::Partial => json!({
            "kind": format!("{}List", def.kind),
            "apiVersion": def.api_version(&res.version),
            "metadata": meta,
            "items": page.iter().map(|o| present(o, res)).collect::<Vec<_>>(),
        }),
    };
    Ok(ok(200, &body))
}

/// An object's place in a list: (namespace, name), the store's order.
pub(super) fn obj_key(o: &Value) -> (String, String) {
    let m = |k: &str| o["metadata"][k].as_str().unwrap_or("").to_string();
    (m("namespace"), m("name"))
}

pub(super) fn encode_continue(rv: u64, (ns, name): &(String, String)) -> String {
    let key = format!("{ns}/{name}");
    format!(
        "{rv}:{}",
        key.bytes().map(|b| format!("{b:02x}")).collect::<String>()
    )
}

pub(super) fn decode_continue(tok: &str) -> Option<(u64, (String, String))> {
    let (rv, hex) = tok.split_once(':')?;
    let bytes: Option<Vec<u8>> = (0..hex.len())
        .step_by(2)
        .map(|i| {
            hex.get(i..i + 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        })
        .collect();
    let key = String::from_utf8(bytes?).ok()?;
    let (ns, name) = key.split_once('/')?;
    Some((rv.parse().ok()?, (ns.to_string(), name.to_string())))
}
