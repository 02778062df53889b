//! Flags → config → run; nothing else.

use openmed_operator::{cli, controller, logging, signals};

fn main() {
    let cmd = match cli::parse(std::env::args().skip(1), &|k| std::env::var(k).ok()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("openmed-operator: {e}");
            std::process::exit(2);
        }
    };
    match cmd {
        cli::Command::Help => println!("{}", cli::HELP),
        cli::Command::Version => println!("openmed-operator {}", env!("CARGO_PKG_VERSION")),
        cli::Command::Run(cfg) => {
            logging::init(cfg.log_format);
            signals::install();
            if let Err(e) = controller::run(*cfg) {
                eprintln!("openmed-operator: {e}");
                std::process::exit(1);
            }
        }
    }
}
