//! The API server's request path: the HTTP/1.1 server and its certificate,
//! routing and the verbs, watches, `as=Table` answers, `Status` errors, the
//! patch formats, selectors, the faults injected into requests, and the
//! timestamps it writes. What is stored, and how each kind is defaulted and
//! validated, is in `registry`.

pub mod api;
pub mod authn;
pub mod errors;
pub mod faults;
pub mod http;
pub mod patch;
pub mod protobuf;
pub mod selector;
pub mod table;
pub mod time;
pub mod tls;
pub mod watch;
