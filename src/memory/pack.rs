//! A small LZ77 packer for the JSON text the model cache holds.
//!
//! Every OpenMedModel stays in the cache for the operator's lifetime, and
//! its status text repeats itself: the version appears six times, a spec
//! hash twice, the condition keys four times. Packed against a preset
//! dictionary of the keys and phrases the operator itself writes, the text
//! of a converged model shrinks to a fraction, quick to unpack for a pass
//! (docs/performance.md). No crate: the format is ours, private to the
//! process, never written anywhere.
//!
//! Tokens: a byte `0lllllll` is a run of `l + 1` literal bytes that follow;
//! `1lllllll` copies `l + MIN_MATCH` bytes from a distance given by the
//! next two bytes (little-endian), counted back from the end of
//! dictionary + output so far.

const MIN_MATCH: usize = 4;
const MAX_MATCH: usize = 127 + MIN_MATCH;
const MAX_LITERALS: usize = 128;
const MAX_DISTANCE: usize = u16::MAX as usize;
const HASH_BITS: u32 = 12;

/// Where the last 4-byte sequence with each hash started (`u32::MAX`:
/// none yet).
#[derive(Clone, Default)]
struct HashStarts(Vec<u32>);

impl HashStarts {
    /// The earlier start of the sequence at `at`, recording `at` instead.
    #[inline]
    fn swap(&mut self, buf: &[u8], at: usize) -> Option<usize> {
        let b: [u8; MIN_MATCH] = buf.get(at..at + MIN_MATCH)?.try_into().ok()?;
        let hash = u32::from_le_bytes(b).wrapping_mul(2_654_435_761) >> (32 - HASH_BITS);
        let slot = self.0.get_mut(hash as usize)?;
        let before = std::mem::replace(slot, at as u32);
        (before != u32::MAX).then_some(before as usize)
    }
}

/// A preset dictionary, hashed once: packing a text then starts from a
/// copy of the table instead of hashing the dictionary again.
pub struct Dictionary {
    bytes: &'static [u8],
    recent: HashStarts,
}

impl Dictionary {
    pub fn new(text: &'static str) -> Dictionary {
        let bytes = text.as_bytes();
        let mut recent = HashStarts(vec![u32::MAX; 1 << HASH_BITS]);
        for at in 0..bytes.len() {
            recent.swap(bytes, at);
        }
        Dictionary { bytes, recent }
    }
}

/// `text`, packed against `dict`. Texts past 4 GiB are not packed well
/// (positions are 32-bit); nothing the API server sends comes near.
pub fn pack(text: &str, dict: &Dictionary) -> Box<[u8]> {
    SCRATCH.with(|scratch| match scratch.try_borrow_mut() {
        Ok(mut scratch) => pack_in(&mut scratch, text, dict),
        Err(_) => pack_in(&mut Scratch::default(), text, dict),
    })
}

/// What [`pack`] works in: the hash table (16 KiB) and dictionary + text.
#[derive(Default)]
struct Scratch {
    recent: HashStarts,
    buf: Vec<u8>,
}

/// Beyond this, a thread's buffer is let go after the pack.
const SCRATCH_KEEP: usize = 256 * 1024;

thread_local! {
    /// Each thread's [`Scratch`], reused: every decoded model is packed,
    /// and a fresh table and buffer a time were an allocation and a free
    /// of 16 KiB each, which musl's allocator hands back to the kernel
    /// (docs/performance.md).
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::default();
}

/// This thread's scratch goes back to the allocator: for a thread about to
/// wait long ([`crate::memory::thread_idle`]).
pub fn release_scratch() {
    let _ = SCRATCH.try_with(|cell| {
        if let Ok(mut scratch) = cell.try_borrow_mut() {
            *scratch = Scratch::default();
        }
    });
}

fn pack_in(scratch: &mut Scratch, text: &str, dict: &Dictionary) -> Box<[u8]> {
    scratch.recent.0.clear();
    scratch.recent.0.extend_from_slice(&dict.recent.0);
    scratch.buf.clear();
    scratch.buf.extend_from_slice(dict.bytes);
    scratch.buf.extend_from_slice(text.as_bytes());
    let (recent, buf) = (&mut scratch.recent, scratch.buf.as_slice());
    let mut out = Vec::with_capacity(text.len() / 3);
    let mut literals = dict.bytes.len();
    let mut at = literals;
    while at < buf.len() {
        let len = recent
            .swap(buf, at)
            .filter(|from| at - from <= MAX_DISTANCE)
            .map(|from| (from, common_prefix(&buf[from..], &buf[at..])))
            .filter(|(_, len)| *len >= MIN_MATCH);
        let Some((from, len)) = len else {
            at += 1;
            continue;
        };
        put_literals(&mut out, &buf[literals..at]);
        let distance = (at - from) as u16;
        out.push(0x80 | (len - MIN_MATCH) as u8);
        out.extend_from_slice(&distance.to_le_bytes());
        for skipped in at + 1..at + len {
            recent.swap(buf, skipped);
        }
        at += len;
        literals = at;
    }
    put_literals(&mut out, &buf[literals..]);
    if scratch.buf.capacity() > SCRATCH_KEEP {
        scratch.buf = Vec::new();
    }
    out.into_boxed_slice()
}

#[inline]
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len()).min(MAX_MATCH);
    let (a, b) = (&a[..n], &b[..n]);
    let mut i = 0;
    while i < n && a[i] == b[i] {
        i += 1;
    }
    i
}

fn put_literals(out: &mut Vec<u8>, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        let n = bytes.len().min(MAX_LITERALS);
        out.push((n - 1) as u8);
        out.extend_from_slice(&bytes[..n]);
        bytes = &bytes[n..];
    }
}

/// The text `pack` was given, or None if `packed` is not its output for
/// this `dict`. Copies that reach back into the dictionary read it where it
/// is, so only the text is written.
pub fn unpack(packed: &[u8], dict: &Dictionary) -> Option<String> {
    let dict = dict.bytes;
    let mut out: Vec<u8> = Vec::with_capacity(packed.len() * 4);
    let mut at = 0;
    while at < packed.len() {
        let token = packed[at] as usize;
        if token & 0x80 == 0 {
            let bytes = packed.get(at + 1..at + 2 + token)?;
            out.extend_from_slice(bytes);
            at += 2 + token;
        } else {
            let d = packed.get(at + 1..at + 3)?;
            let distance = u16::from_le_bytes([d[0], d[1]]) as usize;
            let from = (dict.len() + out.len())
                .checked_sub(distance)
                .filter(|_| distance > 0)?;
            let len = (token & 0x7f) + MIN_MATCH;
            match from.checked_sub(dict.len()) {
                // Within the text and not overlapping what it writes.
                Some(j) if j + len <= out.len() => out.extend_from_within(j..j + len),
                None if from + len <= dict.len() => out.extend_from_slice(&dict[from..from + len]),
                _ => {
                    for i in from..from + len {
                        let byte = match i.checked_sub(dict.len()) {
                            Some(j) => out[j],
                            None => dict[i],
                        };
                        out.push(byte);
                    }
                }
            }
            at += 3;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Text of every kind: empty, short, repetitive, long runs, long
    /// distances, multi-byte characters, and pseudo-random noise.
    fn samples() -> Vec<String> {
        let mut seed = 0x2545_f491_u64;
        let mut noise = String::new();
        for _ in 0..5000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            noise.push(char::from(b' ' + (seed % 90) as u8));
        }
        vec![
            String::new(),
            "a".into(),
            "abcabcabcabcabcabc".into(),
            "x".repeat(1000),
            format!("{}{}{}", "head", "y".repeat(70_000), "head"),
            "é😀ü".repeat(50),
            noise.clone(),
            format!("{noise}{noise}"),
        ]
    }

    #[test]
    fn every_text_comes_back_as_it_was() {
        for dict in ["", "abc", DICT_FOR_TESTS].map(Dictionary::new) {
            for text in samples() {
                let packed = pack(&text, &dict);
                assert_eq!(unpack(&packed, &dict).as_deref(), Some(text.as_str()));
            }
        }
    }

    const DICT_FOR_TESTS: &str = r#"{"conditions":[{"lastTransitionTime":""#;

    #[test]
    fn repeated_text_packs_small() {
        let text = r#"{"conditions":[{"lastTransitionTime":"2026-01-01T00:00:00Z","message":"OpenMed/OpenMed-PII-Small-v1 is serving"},{"lastTransitionTime":"2026-01-01T00:00:00Z","message":"rollout of OpenMed/OpenMed-PII-Small-v1 complete"}]}"#;
        let packed = pack(text, &Dictionary::new(DICT_FOR_TESTS));
        assert!(
            packed.len() * 10 < text.len() * 6,
            "{} -> {}",
            text.len(),
            packed.len()
        );
    }

    #[test]
    fn damaged_input_is_refused_not_a_panic() {
        let (none, abcd) = (Dictionary::new(""), Dictionary::new("abcd"));
        let packed = pack("abcdabcdabcdabcd", &none);
        for cut in 0..packed.len() {
            let _ = unpack(&packed[..cut], &none);
        }
        assert_eq!(
            unpack(&[0x80, 5, 0], &none),
            None,
            "a copy before the start"
        );
        assert_eq!(unpack(&[0x80, 0, 0], &abcd), None, "distance 0");
        assert_eq!(unpack(&[3, b'a'], &none), None, "a literal run cut short");
    }
}
