//! Flags → config → run; nothing else.

use openmed_operator::{cli, controller, logging, release, signals};

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
        cli::Command::Release(args) => {
            logging::init(cli::LogFormat::Text);
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
            limit_malloc_arenas();
            signals::install();
            if let Err(e) = controller::run(*cfg) {
                eprintln!("openmed-operator: {e}");
                std::process::exit(1);
            }
        }
    }
}

/// glibc gives each thread that allocates its own arena (up to 8 per core)
/// and seldom hands freed arena memory back: the reflector threads taking
/// turns at a list near its bounds left 523 MiB resident where one list
/// peaks at 161 MiB (314 MiB with two arenas). One arena, as musl has: the
/// threads mostly wait on sockets, so they hardly contend for it.
fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; called once, at
    // start, before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}
