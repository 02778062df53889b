//! Log lines: readable text by default, one JSON object per line with
//! `--log-format json`. `RUST_LOG` sets the level (default `info`). Every
//! line passes through [`crate::redact`].

use crate::cli::LogFormat;
use std::io::Write;

pub fn init(format: LogFormat) {
    let mut b = env_logger::Builder::new();
    b.filter_level(log::LevelFilter::Info);
    if let Ok(spec) = std::env::var("RUST_LOG") {
        b.parse_filters(&spec);
    }
    // The HTTP and TLS crates dump raw requests, headers included, at debug
    // and trace: never below info, whatever RUST_LOG asks.
    for noisy in ["ureq", "ureq_proto", "rustls", "tiny_http"] {
        b.filter_module(noisy, log::LevelFilter::Info);
    }
    b.target(env_logger::Target::Stderr);
    match format {
        LogFormat::Text => b.format(|f, r| {
            writeln!(
                f,
                "{} {:<5} {}: {}",
                crate::time::now(),
                r.level(),
                r.target(),
                crate::redact::redact(&r.args().to_string())
            )
        }),
        LogFormat::Json => b.format(|f, r| {
            let line = serde_json::json!({
                "ts": crate::time::now(),
                "level": r.level().as_str(),
                "target": r.target(),
                "msg": crate::redact::redact(&r.args().to_string()),
            });
            writeln!(f, "{line}")
        }),
    };
    let _ = b.try_init();
}
