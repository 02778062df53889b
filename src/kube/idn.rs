//! International host names in their ASCII form (`xn--` labels, RFC 3492
//! Punycode), as Go's `idna.Lookup.ToASCII` gives them for the host names a
//! kubeconfig or `NO_PROXY` holds.
//!
//! The binary carries no Unicode tables (the `url` crate's IDNA back end is
//! its stub, `idna_adapter` 1.0: `docs/performance.md`), so the mapping is
//! lower case and the full stops UTS 46 maps, not its normalisation: a name
//! typed in NFC, as names are, gets the same ASCII form.

use std::borrow::Cow;

/// A domain's ASCII form; `None` when a label has none (over 63 bytes).
pub fn domain_to_ascii(domain: &str) -> Option<String> {
    if domain.is_ascii() {
        return Some(domain.to_ascii_lowercase());
    }
    let lower = domain
        .to_lowercase()
        .replace(['\u{3002}', '\u{ff0e}', '\u{ff61}'], ".");
    let mut out = String::with_capacity(lower.len() + 8);
    for (i, label) in lower.split('.').enumerate() {
        if i > 0 {
            out.push('.');
        }
        if label.is_ascii() {
            out.push_str(label);
            continue;
        }
        let encoded = encode(label)?;
        if encoded.len() + 4 > 63 {
            return None;
        }
        out.push_str("xn--");
        out.push_str(&encoded);
    }
    Some(out)
}

/// An absolute URL with its host in ASCII form, so that a URL parser
/// without Unicode tables reads it; the rest is kept as it was.
pub fn url_with_ascii_host(url: &str) -> Option<Cow<'_, str>> {
    if url.is_ascii() {
        return Some(Cow::Borrowed(url));
    }
    let start = url.find("://").map_or(0, |i| i + 3);
    let authority_end = url[start..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| start + i);
    let host_start = url[start..authority_end]
        .rfind('@')
        .map_or(start, |i| start + i + 1);
    let host_end = url[host_start..authority_end]
        .rfind(':')
        .map_or(authority_end, |i| host_start + i);
    let host = &url[host_start..host_end];
    if host.is_ascii() {
        return Some(Cow::Borrowed(url));
    }
    let ascii = domain_to_ascii(host)?;
    Some(Cow::Owned(format!(
        "{}{ascii}{}",
        &url[..host_start],
        &url[host_end..]
    )))
}

const BASE: u32 = 36;
const T_MIN: u32 = 1;
const T_MAX: u32 = 26;
const SKEW: u32 = 38;
const DAMP: u32 = 700;

/// RFC 3492 §6.3: the basic code points, a `-`, then each other code point
/// as a generalised variable-length integer. `None` on overflow or an empty
/// label.
fn encode(label: &str) -> Option<String> {
    let input: Vec<u32> = label.chars().map(u32::from).collect();
    if input.is_empty() {
        return None;
    }
    let mut out: String = label.chars().filter(char::is_ascii).collect();
    let basic = out.len() as u32;
    if basic > 0 {
        out.push('-');
    }
    let (mut n, mut delta, mut bias, mut handled) = (128u32, 0u32, 72u32, basic);
    while (handled as usize) < input.len() {
        let m = input.iter().copied().filter(|&c| c >= n).min()?;
        delta = delta.checked_add((m - n).checked_mul(handled + 1)?)?;
        n = m;
        for &c in &input {
            if c < n {
                delta = delta.checked_add(1)?;
            }
            if c == n {
                let mut q = delta;
                let mut k = BASE;
                loop {
                    let t = k.saturating_sub(bias).clamp(T_MIN, T_MAX);
                    if q < t {
                        break;
                    }
                    out.push(digit(t + (q - t) % (BASE - t)));
                    q = (q - t) / (BASE - t);
                    k += BASE;
                }
                out.push(digit(q));
                bias = adapt(delta, handled + 1, handled == basic);
                delta = 0;
                handled += 1;
            }
        }
        delta = delta.checked_add(1)?;
        n = n.checked_add(1)?;
    }
    Some(out)
}

/// RFC 3492 §6.1, the bias adaptation.
fn adapt(delta: u32, points: u32, first: bool) -> u32 {
    let mut delta = if first { delta / DAMP } else { delta / 2 };
    delta += delta / points;
    let mut k = 0;
    while delta > ((BASE - T_MIN) * T_MAX) / 2 {
        delta /= BASE - T_MIN;
        k += BASE;
    }
    k + (BASE - T_MIN + 1) * delta / (delta + SKEW)
}

fn digit(d: u32) -> char {
    // d < BASE by construction: a-z then 0-9.
    let d = d as u8;
    char::from(if d < 26 { b'a' + d } else { b'0' + d - 26 })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 3492 §7.1's sample strings (lower-case ones) and names from Go's
    /// idna and httpproxy tests.
    #[test]
    fn labels_encode_as_rfc_3492_samples() {
        for (label, want) in [
            ("他们为什么不说中文", "ihqwcrb4cv8a8dqg056pqjye"),
            (
                "почемужеонинеговорятпорусски",
                "b1abfaaepdrnnbgefbadotcwatmq2g4l",
            ),
            (
                "porquénopuedensimplementehablarenespañol",
                "porqunopuedensimplementehablarenespaol-fmd56a",
            ),
            ("ليهمابتكلموشعربي؟", "egbpdaj6bu4bxfgehfvwxn"),
            ("示例", "fsq092h"),
            ("bücher", "bcher-kva"),
            ("münchen", "mnchen-3ya"),
        ] {
            assert_eq!(encode(label).as_deref(), Some(want), "{label}");
        }
    }

    #[test]
    fn domains_and_urls_get_their_ascii_form() {
        assert_eq!(
            domain_to_ascii("www.示例.com").as_deref(),
            Some("www.xn--fsq092h.com")
        );
        assert_eq!(
            domain_to_ascii("API.Bücher。Example").as_deref(),
            Some("api.xn--bcher-kva.example")
        );
        assert_eq!(
            domain_to_ascii("Plain.Example").as_deref(),
            Some("plain.example")
        );
        assert_eq!(domain_to_ascii(&"ü".repeat(60)), None, "longer than 63");
        assert_eq!(
            url_with_ascii_host("https://München.example:6443/").as_deref(),
            Some("https://xn--mnchen-3ya.example:6443/")
        );
        assert_eq!(
            url_with_ascii_host("http://user:pä@bücher.example").as_deref(),
            Some("http://user:pä@xn--bcher-kva.example")
        );
        assert_eq!(
            url_with_ascii_host("https://a.example/ü").as_deref(),
            Some("https://a.example/ü"),
            "only the host changes"
        );
    }
}
