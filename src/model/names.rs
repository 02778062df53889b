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
    if plain.len() <= 253 && is_dns_subdomain(&plain) {
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

/// The Event name for (resource name, reason, generation).
pub fn event_name(name: &str, reason: &str, generation: i64) -> String {
    let lowered = format!("{name}-{reason}").to_lowercase();
    let slug = collapse_replacements(&lowered);
    let slug: String = slug.trim_matches('-').chars().take(220).collect();
    let hash = sha256_hex(format!("{name}:{reason}:{generation}").as_bytes());
    let full = format!("{slug}-{generation}-{}", &hash[..10]);
    let cut: String = full.chars().take(253).collect();
    cut.trim_end_matches('-').to_string()
}

/// Replace every run of characters outside `[a-z0-9-]` with one `-`.
fn collapse_replacements(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut in_run = false;
    for c in s.chars() {
        if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' {
            out.push(c);
            in_run = false;
        } else if !in_run {
            out.push('-');
            in_run = true;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_collapse() {
        assert_eq!(collapse_replacements("a__b..c-d"), "a-b-c-d");
        assert_eq!(collapse_replacements("a-_b"), "a--b");
    }
}
