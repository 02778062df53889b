//! Streaming watch decoding: newline-delimited JSON events read as they
//! arrive, one line at a time, never the whole response.

use super::error::{api_error_from_body, sanitize, Error, Result};
use super::fields::{As, Decode};
use super::shape::Shape;
use serde::de::DeserializeSeed;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;
use std::borrow::Cow;
use std::io::{ErrorKind, Read};
use std::marker::PhantomData;

/// One event of a watch, its object decoded as `O` (a pruned `Value`, or
/// a typed view: [`super::fields`]).
#[derive(Debug, Clone, PartialEq)]
pub enum WatchEvent<O = Value> {
    Added(O),
    Modified(O),
    Deleted(O),
    /// The server has sent everything up to this resourceVersion.
    Bookmark {
        resource_version: String,
    },
}

/// Decode one watch line, whole.
pub fn decode_event(line: &[u8]) -> Result<WatchEvent> {
    decode_shaped(line, &Shape::All)
}

/// A watch line: its type, and its object's text, both borrowed from the
/// line; the object is decoded once its type says how.
#[derive(Deserialize)]
struct Line<'a> {
    #[serde(rename = "type", borrow)]
    ty: Cow<'a, str>,
    #[serde(borrow)]
    object: Option<&'a RawValue>,
}

/// Decode one watch line, its object as `O` (keeping of a `Value` what
/// `shape` names). An `ERROR` event becomes an `Err` carrying the server's
/// Status (410 Expired/Gone means: relist).
pub fn decode_shaped<O: Decode>(line: &[u8], shape: &'static Shape) -> Result<WatchEvent<O>> {
    let (kind, text) = match split(line)? {
        Split::Object(kind, text) => (kind, text),
        Split::Bookmark(resource_version) => return Ok(WatchEvent::Bookmark { resource_version }),
    };
    let mut de = serde_json::Deserializer::from_slice(text.as_bytes());
    let o = As::<O>::new(shape)
        .deserialize(&mut de)
        .and_then(|o| de.end().map(|()| o))
        .map_err(|e| not_an_event(line, e))?;
    Ok(match kind {
        EventType::Added => WatchEvent::Added(o),
        EventType::Modified => WatchEvent::Modified(o),
        EventType::Deleted => WatchEvent::Deleted(o),
    })
}

enum EventType {
    Added,
    Modified,
    Deleted,
}

/// A watch line split into its event type and its object's text, or a
/// bookmark read. Apart from the decoding of the object: one copy for
/// every kind.
enum Split<'a> {
    Object(EventType, &'a str),
    Bookmark(String),
}

#[inline(never)]
fn split(line: &[u8]) -> Result<Split<'_>> {
    let Line { ty, object } = serde_json::from_slice(line).map_err(|e| not_an_event(line, e))?;
    let Some(text) = object.map(RawValue::get).filter(|t| t.starts_with('{')) else {
        return Err(Error::Decode(format!(
            "watch event without an object: {}",
            preview(line)
        )));
    };
    let kind = match ty.as_ref() {
        "ADDED" => EventType::Added,
        "MODIFIED" => EventType::Modified,
        "DELETED" => EventType::Deleted,
        "BOOKMARK" => {
            let o: Value = serde_json::from_str(text).map_err(|e| not_an_event(line, e))?;
            let rv = o
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .ok_or_else(|| Error::Decode("bookmark without metadata.resourceVersion".into()))?;
            return Ok(Split::Bookmark(rv.to_string()));
        }
        "ERROR" => {
            let o: Value = serde_json::from_str(text).map_err(|e| not_an_event(line, e))?;
            let code = o.get("code").and_then(Value::as_u64).unwrap_or(500) as u16;
            return Err(Error::Api(api_error_from_body(code, text.as_bytes(), None)));
        }
        other => {
            return Err(Error::Decode(format!(
                "unknown watch event type {:?}",
                sanitize(other, 32)
            )))
        }
    };
    Ok(Split::Object(kind, text))
}

fn not_an_event(line: &[u8], e: serde_json::Error) -> Error {
    Error::Decode(format!(
        "watch line is not a watch event ({e}): {}",
        preview(line)
    ))
}

fn preview(line: &[u8]) -> String {
    sanitize(&String::from_utf8_lossy(&line[..line.len().min(80)]), 80)
}

/// The area a watch stream reads into, and what it grows by.
const READ_AREA: usize = 16 * 1024;
/// The least room a read is given.
const READ_AT_LEAST: usize = 4 * 1024;

/// An iterator of watch events over a response body. It ends (returns
/// `None`) when the server closes the stream; after any `Err` it ends too.
pub struct WatchStream<O = Value> {
    reader: Box<dyn Read + Send>,
    /// Zeroed once as it grows, read into in place: the bytes received are
    /// `buf[..end]`. A buffer on the stack would be zeroed at every read
    /// and keep its pages resident in every watch thread (steady RSS,
    /// docs/performance.md).
    buf: Vec<u8>,
    end: usize,
    start: usize,
    /// `buf[start..scanned]` holds no newline: each byte is searched once,
    /// so one big event costs time linear in its size.
    scanned: usize,
    /// Bytes searched for a newline so far (for the test of linearity).
    searched: u64,
    line_cap: usize,
    finished: bool,
    /// What of each object is decoded, if it is decoded as a `Value`.
    shape: &'static Shape,
    decoded: PhantomData<fn() -> O>,
}

impl WatchStream {
    /// A stream of whole objects.
    pub fn new(reader: Box<dyn Read + Send>, line_cap: usize) -> WatchStream {
        WatchStream::of(reader, line_cap, &Shape::All)
    }
}

impl<O: Decode> WatchStream<O> {
    /// A stream of objects decoded as `O` (of a `Value`, what `shape`
    /// names).
    pub fn of(reader: Box<dyn Read + Send>, line_cap: usize, shape: &'static Shape) -> Self {
        WatchStream {
            reader,
            buf: vec![0; READ_AREA],
            end: 0,
            start: 0,
            scanned: 0,
            searched: 0,
            line_cap,
            finished: false,
            shape,
            decoded: PhantomData,
        }
    }

    fn fail(&mut self, e: Error) -> Option<Result<WatchEvent<O>>> {
        self.finished = true;
        Some(Err(e))
    }

    /// Moves the unread bytes to the front, and grows the area when less
    /// than [`READ_AT_LEAST`] is free.
    fn make_room(&mut self) {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.scanned -= self.start;
            self.start = 0;
        }
        if self.buf.len() - self.end < READ_AT_LEAST {
            self.buf.resize(self.end + READ_AREA, 0);
        }
    }

    fn decode(&mut self, line_end: usize) -> Option<Result<WatchEvent<O>>> {
        let line = &self.buf[self.start..line_end];
        let r = decode_shaped(line, self.shape);
        if r.is_err() {
            self.finished = true;
        }
        Some(r)
    }
}

impl<O: Decode> Iterator for WatchStream<O> {
    type Item = Result<WatchEvent<O>>;

    fn next(&mut self) -> Option<Result<WatchEvent<O>>> {
        if self.finished {
            return None;
        }
        loop {
            let from = self.scanned.max(self.start);
            let found = self.buf[from..self.end].iter().position(|&b| b == b'\n');
            self.searched += found.map_or(self.end - from, |p| p + 1) as u64;
            if let Some(pos) = found {
                let end = from + pos;
                let blank = self.buf[self.start..end]
                    .iter()
                    .all(u8::is_ascii_whitespace);
                let out = if blank { None } else { self.decode(end) };
                self.start = end + 1;
                self.scanned = self.start;
                match out {
                    Some(ev) => return Some(ev),
                    None => continue,
                }
            }
            self.scanned = self.end;
            if self.end - self.start > self.line_cap {
                return self.fail(Error::BodyTooLarge {
                    limit: self.line_cap as u64,
                });
            }
            self.make_room();
            match self.reader.read(&mut self.buf[self.end..]) {
                Ok(0) => {
                    self.finished = true;
                    if self.buf[..self.end].iter().all(u8::is_ascii_whitespace) {
                        return None;
                    }
                    // A last event without its newline is still an event.
                    return self.decode(self.end);
                }
                Ok(n) => self.end += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) if matches!(e.kind(), ErrorKind::TimedOut | ErrorKind::WouldBlock) => {
                    return self.fail(Error::Timeout(format!("watch read: {e}")))
                }
                Err(e) => {
                    let msg = e.to_string();
                    if msg.contains("timeout") || msg.contains("Timeout") {
                        return self.fail(Error::Timeout(format!("watch read: {msg}")));
                    }
                    return self.fail(Error::Transport(format!("watch read: {msg}")));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A watch thread's stack stays shallow while it reads: what it
    /// touches stays resident while it waits for the next event.
    #[test]
    fn reading_a_watch_leaves_little_of_the_stack_resident() {
        let events: String = (0..200)
            .map(|i| {
                format!("{{\"type\":\"ADDED\",\"object\":{{\"metadata\":{{\"name\":\"m{i}\",\"resourceVersion\":\"{i}\"}}}}}}\n")
            })
            .collect();
        let (count, kib) = std::thread::spawn(move || {
            crate::memory::stack::trim();
            let data = events.into_bytes();
            let step = data.len();
            let stream = WatchStream::new(Box::new(Trickle { data, pos: 0, step }), 1 << 20);
            let count = stream.filter(Result::is_ok).count();
            (count, crate::memory::stack::resident_kib_here())
        })
        .join()
        .unwrap();
        assert_eq!(count, 200);
        assert!(kib <= 48, "{kib} KiB of the stack resident after reading");
    }

    /// Hands out its data a few bytes at a time, like a slow network.
    struct Trickle {
        data: Vec<u8>,
        pos: usize,
        step: usize,
    }
    impl Read for Trickle {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            let n = self.step.min(out.len()).min(self.data.len() - self.pos);
            out[..n].copy_from_slice(&self.data[self.pos..self.pos + n]);
            self.pos += n;
            Ok(n)
        }
    }

    fn stream(data: &str, step: usize) -> WatchStream {
        WatchStream::new(
            Box::new(Trickle {
                data: data.as_bytes().to_vec(),
                pos: 0,
                step,
            }),
            1 << 20,
        )
    }

    #[test]
    fn decodes_every_type() {
        let obj = json!({"metadata": {"name": "a", "resourceVersion": "5"}});
        for (ty, want) in [
            ("ADDED", WatchEvent::Added(obj.clone())),
            ("MODIFIED", WatchEvent::Modified(obj.clone())),
            ("DELETED", WatchEvent::Deleted(obj.clone())),
            (
                "BOOKMARK",
                WatchEvent::Bookmark {
                    resource_version: "5".into(),
                },
            ),
        ] {
            let line = json!({"type": ty, "object": obj}).to_string();
            assert_eq!(decode_event(line.as_bytes()).unwrap(), want);
        }
    }

    #[test]
    fn error_event_410_means_relist() {
        for reason in ["Expired", "Gone"] {
            let line = json!({"type": "ERROR", "object": {"kind": "Status", "status": "Failure", "code": 410, "reason": reason, "message": "too old resource version: 1 (50)"}}).to_string();
            let e = decode_event(line.as_bytes()).unwrap_err();
            assert!(e.is_gone(), "{e}");
        }
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for bad in [
            "{not json",
            "[]",
            r#"{"type":"ADDED"}"#,
            r#"{"type":"WHAT","object":{}}"#,
            r#"{"type":"BOOKMARK","object":{}}"#,
        ] {
            assert!(decode_event(bad.as_bytes()).is_err(), "{bad}");
        }
    }

    #[test]
    fn lines_split_across_reads() {
        let a = json!({"type": "ADDED", "object": {"metadata": {"name": "a"}}}).to_string();
        let b = json!({"type": "MODIFIED", "object": {"metadata": {"name": "é"}}}).to_string();
        let data = format!("{a}\n\n{b}\n");
        for step in [1, 2, 3, 7, 64, 4096] {
            let evs: Vec<_> = stream(&data, step).collect::<Result<_>>().unwrap();
            assert_eq!(evs.len(), 2, "step {step}");
            assert!(matches!(&evs[1], WatchEvent::Modified(o) if o["metadata"]["name"] == "é"));
        }
    }

    #[test]
    fn final_line_without_newline_counts() {
        let a = json!({"type": "ADDED", "object": {"metadata": {"name": "a"}}}).to_string();
        let evs: Vec<_> = stream(&a, 5).collect();
        assert_eq!(evs.len(), 1);
        assert!(evs[0].is_ok());
    }

    #[test]
    fn stream_stops_after_garbage() {
        let good = json!({"type": "ADDED", "object": {"metadata": {"name": "a"}}}).to_string();
        let data = format!("{good}\ngarbage\n{good}\n");
        let evs: Vec<_> = stream(&data, 16).collect();
        assert_eq!(evs.len(), 2);
        assert!(evs[0].is_ok() && evs[1].is_err());
    }

    #[test]
    fn oversized_line_is_refused() {
        let big = format!(
            r#"{{"type":"ADDED","object":{{"x":"{}"}}}}"#,
            "y".repeat(5000)
        );
        let mut s = WatchStream::new(
            Box::new(Trickle {
                data: big.into_bytes(),
                pos: 0,
                step: 512,
            }),
            1024,
        );
        assert!(matches!(s.next(), Some(Err(Error::BodyTooLarge { .. }))));
        assert!(s.next().is_none());
    }

    /// Each byte is searched for a newline once, so one big event trickled
    /// in small reads costs time linear in its size, not quadratic (see
    /// docs/performance.md). Counted, not timed.
    #[test]
    fn a_big_event_in_small_reads_is_searched_once() {
        let line = format!(
            "{{\"type\":\"ADDED\",\"object\":{{\"x\":\"{}\"}}}}\n",
            "y".repeat(4 << 20)
        );
        let len = line.len() as u64;
        let mut s = WatchStream::new(
            Box::new(Trickle {
                data: line.into_bytes(),
                pos: 0,
                step: 4096,
            }),
            8 << 20,
        );
        assert!(matches!(s.next(), Some(Ok(WatchEvent::Added(_)))));
        assert!(s.searched <= len, "{} bytes searched for {len}", s.searched);
        assert!(s.next().is_none());
    }
}
