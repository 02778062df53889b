//! Log lines: readable text by default, one JSON object per line with
//! `--log-format json`. `RUST_LOG` sets the level (default `info`).

use crate::cli::LogFormat;
use std::io::Write;

pub fn init(format: LogFormat) {
    let mut b = env_logger::Builder::new();
    b.filter_level(log::LevelFilter::Info);
    if let Ok(spec) = std::env::var("RUST_LOG") {
        b.parse_filters(&spec);
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
                r.args()
            )
        }),
        LogFormat::Json => b.format(|f, r| {
            let line = serde_json::json!({
                "ts": crate::time::now(),
                "level": r.level().as_str(),
                "target": r.target(),
                "msg": r.args().to_string(),
            });
            writeln!(f, "{line}")
        }),
    };
    let _ = b.try_init();
}
