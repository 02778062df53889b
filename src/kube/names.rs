//! Kubernetes object-name rules (DNS-1123), written out by hand so that no
//! regex engine is needed in the operator binary.

fn is_lower_alnum(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

/// RFC 1123 label: at most 63 characters of `[a-z0-9-]`, starting and ending
/// with an alphanumeric. Namespaces and container names follow this rule.
pub fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && is_lower_alnum(b[0])
        && is_lower_alnum(b[b.len() - 1])
        && b.iter().all(|&c| is_lower_alnum(c) || c == b'-')
}

/// RFC 1123 subdomain: at most 253 characters, dot-separated labels (each
/// label here may be longer than 63, as Kubernetes allows for object names).
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|part| {
            let b = part.as_bytes();
            !b.is_empty()
                && is_lower_alnum(b[0])
                && is_lower_alnum(b[b.len() - 1])
                && b.iter().all(|&c| is_lower_alnum(c) || c == b'-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels() {
        assert!(is_dns_label("openmed-service"));
        assert!(is_dns_label("a"));
        assert!(is_dns_label(&"a".repeat(63)));
        for bad in ["", "-a", "a-", "A", "a.b", "a_b", &"a".repeat(64)] {
            assert!(!is_dns_label(bad), "{bad:?}");
        }
    }

    #[test]
    fn subdomains() {
        assert!(is_dns_subdomain("svc.a"));
        assert!(is_dns_subdomain("my.model-model-manifest"));
        assert!(is_dns_subdomain(&"m".repeat(253)));
        for bad in [
            "",
            "-svc",
            "svc.",
            ".svc",
            "a..b",
            "Svc",
            "a/b",
            "..",
            &"m".repeat(254),
        ] {
            assert!(!is_dns_subdomain(bad), "{bad:?}");
        }
    }
}
