//! Flags → config → run; nothing else.

use openmed_operator::runtime::Stop;
use openmed_operator::{app, cli, config, logging, memory, release, signals};
use std::sync::Arc;

fn main() {
    let cmd = match cli::parse(std::env::args().skip(1), &|k| std::env::var(k).ok()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("openmed-operator: {e}");
            std::process::exit(2);
        }
    };
    match cmd {
        cli::Command::Help => println!("{}", cli::help()),
        cli::Command::ReleaseHelp => println!("{}", cli::release_help()),
        cli::Command::Version => println!("openmed-operator {}", env!("CARGO_PKG_VERSION")),
        cli::Command::Release(args) => {
            logging::init(config::LogFormat::Text);
            match release::run(&args) {
                Ok(done) => println!("{done}"),
                Err(e) => {
                    eprintln!("openmed-operator release: {e}");
                    std::process::exit(1);
                }
            }
        }
        cli::Command::Run(cfg) => {
            logging::init(cfg.log_format);
            memory::limit_arenas();
            let stop = Arc::new(Stop::new());
            if let Err(e) = signals::install(stop.clone()) {
                eprintln!("openmed-operator: cannot handle SIGTERM/SIGINT: {e}");
                std::process::exit(1);
            }
            if let Err(e) = app::run(*cfg, stop) {
                eprintln!("openmed-operator: {e}");
                std::process::exit(1);
            }
        }
    }
}
