//! Names the operator derives: the default manifest ConfigMap name and
//! Event names (deterministic, so a retried or restarted pass posts the same
//! Event again and the server's AlreadyExists makes it a no-op).

use super::canonical::sha256_hex;
use crate::kube::names::is_dns_subdomain;

const CM_SUFFIX: &str = "model-manifest";

/// `<name>-model-manifest`, or for names too long for that, a cut prefix
/// plus the first 10 hex characters of its SHA-256.
pub fn default_config_map_name(name: &str) -> String {
    let plain = format!("{name}-{CM_SUFFIX}");
    // A DNS subdomain is at most 253 characters (§2.5).
    if is_dns_subdomain(&plain) {
        return plain;
    }
    let keep = 63 - CM_SUFFIX.len() - 10 - 2;
    let prefix: String = name
        .chars()
        .take(keep)
        .map(|c| if c == '.' { '-' } else { c })
        .collect();
    let prefix = prefix.trim_end_matches('-');
    format!(
        "{prefix}-{CM_SUFFIX}-{}",
        &sha256_hex(plain.as_bytes())[..10]
    )
}

/// The reason an Event's name is made from (§2.6): a rollback's Events
/// carry their tag (`<reason>-<kind>-<hash10>`), others the bare reason.
pub fn name_reason<'a>(reason: &'a str, tag: Option<&str>) -> std::borrow::Cow<'a, str> {
    match tag {
        Some(t) => format!("{reason}-{t}").into(),
        None => reason.into(),
    }
}

/// The Event name for (resource name, reason, generation): the lowered
/// `name-reason` with every run of characters outside `[a-z0-9-]` made one
/// `-`, trimmed of `-` and cut to 220, then `-generation-` and ten hex
/// characters of the SHA-256 of `name:reason:generation`; at most 253
/// characters, no trailing `-`. Built in one buffer: a pass that posts
/// asks for two names of each Event.
pub fn event_name(name: &str, reason: &str, generation: i64) -> String {
    use sha2::Digest;
    use std::fmt::Write;
    let mut out = String::with_capacity(name.len() + reason.len() + 24);
    let mut in_run = false;
    let chars = name
        .chars()
        .chain(std::iter::once('-'))
        .chain(reason.chars());
    for c in chars.flat_map(char::to_lowercase) {
        if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' {
            out.push(c);
            in_run = false;
        } else if !in_run {
            out.push('-');
            in_run = true;
        }
    }
    let start = out.len() - out.trim_start_matches('-').len();
    out.drain(..start);
    out.truncate(out.trim_end_matches('-').len().min(220));
    // The hash input, after the slug in the same buffer.
    let slug = out.len();
    let _ = write!(out, "{name}:{reason}:{generation}");
    let hash = sha2::Sha256::digest(&out.as_bytes()[slug..]);
    out.truncate(slug);
    let _ = write!(out, "-{generation}-");
    for b in &hash[..5] {
        let _ = write!(out, "{b:02x}");
    }
    out.truncate(253);
    out.truncate(out.trim_end_matches('-').len());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Replace every run of characters outside `[a-z0-9-]` with one `-`:
    /// the text between single such characters, joined by `-`, dropping
    /// the empty pieces inside a run (not those at either end).
    fn collapse_replacements(s: &str) -> String {
        let kept = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
        let pieces: Vec<&str> = s.split(|c: char| !kept(c)).collect();
        let last = pieces.len() - 1;
        let mut joined: Vec<&str> = Vec::new();
        for (i, p) in pieces.into_iter().enumerate() {
            if !p.is_empty() || i == 0 || i == last {
                joined.push(p);
            }
        }
        joined.join("-")
    }

    /// The name by its definition, step by step.
    fn by_definition(name: &str, reason: &str, generation: i64) -> String {
        let lowered = format!("{name}-{reason}").to_lowercase();
        let slug = collapse_replacements(&lowered);
        let slug: String = slug.trim_matches('-').chars().take(220).collect();
        let hash = sha256_hex(format!("{name}:{reason}:{generation}").as_bytes());
        let full = format!("{slug}-{generation}-{}", &hash[..10]);
        let cut: String = full.chars().take(253).collect();
        cut.trim_end_matches('-').to_string()
    }

    #[test]
    fn an_event_name_is_what_its_definition_gives() {
        let long = "x".repeat(300);
        let dashes = format!("{}-y", "-".repeat(230));
        let names = [
            "m",
            "My_Model.v2",
            "--a--",
            "İstanbul-ΣΑΣ",
            "日本",
            "a-_b",
            "",
            &long,
            &dashes,
        ];
        for name in names {
            for reason in ["RolloutStarted", "X", "", "--"] {
                for generation in [0, 1, 12, -3, i64::MAX] {
                    let want = by_definition(name, reason, generation);
                    let got = event_name(name, reason, generation);
                    assert_eq!(got, want, "{name}|{reason}|{generation}");
                }
            }
        }
    }

    #[test]
    fn runs_collapse() {
        assert_eq!(collapse_replacements("a__b..c-d"), "a-b-c-d");
        assert_eq!(collapse_replacements("a-_b"), "a--b");
    }
}
