//! The operator as a child process: started, probed, read and stopped.

use super::*;

pub struct Operator {
    child: Child,
    log: PathBuf,
    health: Option<SocketAddr>,
    metrics: Option<SocketAddr>,
}

impl Operator {
    pub fn start(sim_url: &str, dir: &Path, extra: &[&str]) -> Operator {
        Operator::start_with_env(sim_url, dir, extra, &[])
    }

    /// [`Operator::start`] with extra environment variables.
    pub fn start_with_env(
        sim_url: &str,
        dir: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Operator {
        // OMO_OPERATOR_BIN runs another build, e.g. the static release one
        // for figures: OMO_OPERATOR_BIN=target/static/... cargo test --test e2e a_converged -- --nocapture
        let bin = std::env::var("OMO_OPERATOR_BIN").unwrap_or_else(|_| operator_bin());
        Operator::start_bin(&bin, sim_url, dir, extra, env)
    }

    /// [`Operator::start_with_env`] with the binary at `bin`.
    pub fn start_bin(
        bin: &str,
        sim_url: &str,
        dir: &Path,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Operator {
        let mut cmd = Command::new(bin);
        let log = dir.join(format!("operator-{:x}.log", rand_tag()));
        let f = std::fs::File::create(&log).unwrap();
        // The ServiceAccount's token, unless the test brings its own.
        if !extra.contains(&"--token-file") {
            // One file per process: tests start several at once in a dir.
            let token = dir.join(format!("service-account-token-{:x}", rand_tag()));
            std::fs::write(&token, OPERATOR_TOKEN).unwrap();
            cmd.arg("--token-file").arg(token);
        }
        // Plain, open metrics on a port of their own, unless the test is
        // about how metrics are served.
        if !extra.iter().any(|a| a.starts_with("--metrics-")) {
            cmd.args(["--metrics-addr", "127.0.0.1:0", "--metrics-secure=false"]);
        }
        // The live view on a port of its own (many operators run at once).
        if !extra.iter().any(|a| a.starts_with("--ui-addr")) {
            cmd.args(["--ui-addr", "127.0.0.1:0"]);
        }
        let child = cmd
            .args([
                "--server",
                sim_url,
                "--health-addr",
                "127.0.0.1:0",
                "--resync-seconds",
                "2",
            ])
            .args(extra)
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::from(f))
            .spawn()
            .unwrap();
        Operator {
            child,
            log,
            health: None,
            metrics: None,
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn health_addr(&mut self) -> SocketAddr {
        if self.health.is_none() {
            self.health = Some(self.address_in_log("health on http://"));
        }
        self.health.unwrap()
    }

    /// Where the live view is served.
    pub fn view_addr(&self) -> SocketAddr {
        self.address_in_log("live view on http")
    }

    /// Where /metrics is served (plain or TLS).
    pub fn metrics_addr(&mut self) -> SocketAddr {
        if self.metrics.is_none() {
            self.metrics = Some(self.address_in_log("metrics on http"));
        }
        self.metrics.unwrap()
    }

    /// The address the start line gives after `marker`.
    fn address_in_log(&self, marker: &str) -> SocketAddr {
        let mut found = None;
        wait_until(&format!("{marker:?} in the log"), || {
            found = self
                .log()
                .split(marker)
                .nth(1)
                .map(|r| {
                    r.trim_start_matches("s://")
                        .trim_start_matches("://")
                        .chars()
                        .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == ':')
                        .collect::<String>()
                })
                .and_then(|a| a.parse().ok());
            found.is_some()
        });
        found.unwrap()
    }

    /// A plain GET: /metrics from the metrics address, the rest from the
    /// health address.
    pub fn http_get(&mut self, path: &str) -> (u16, String) {
        let addr = if path.starts_with("/metrics") {
            self.metrics_addr()
        } else {
            self.health_addr()
        };
        http_get_at(addr, path)
    }

    pub fn wait_ready(&mut self) {
        wait_until("/readyz", || self.http_get("/readyz").0 == 200);
    }
}

/// A plain HTTP/1.0 GET: (status, body); status 0 when nothing came back.
pub fn http_get_at(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    // A server that closes at once answers nothing: status 0.
    if write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").is_err() {
        return (0, String::new());
    }
    // A stream never ends: read until the server closes or 10 s pass.
    let until = Instant::now() + Duration::from_secs(10);
    let mut raw = Vec::new();
    let mut buf = [0u8; 8192];
    while let Some(left) = until.checked_duration_since(Instant::now()) {
        let _ = s.set_read_timeout(Some(left.max(Duration::from_millis(1))));
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
        }
    }
    let out = String::from_utf8_lossy(&raw).into_owned();
    let body = out.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    (status_of(&out), body)
}

/// The status code of an HTTP response (0 when there is none).
pub fn status_of(response: &str) -> u16 {
    response
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

impl Operator {
    /// SIGTERM, then the exit status (None if it did not exit in time).
    pub fn terminate(&mut self, within: Duration) -> Option<ExitStatus> {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let t = Instant::now();
        while t.elapsed() < within {
            if let Ok(Some(st)) = self.child.try_wait() {
                return Some(st);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// SIGTERM must end the operator with exit 0 within a few seconds.
    pub fn assert_clean_exit(&mut self) {
        match self.terminate(Duration::from_secs(10)) {
            Some(st) => assert!(st.success(), "{st:?}\n{}", self.log()),
            None => panic!("did not exit after SIGTERM\n{}", self.log()),
        }
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// User + system CPU time so far, in milliseconds.
    pub fn cpu_ms(&self) -> Option<u64> {
        let (user, system) = process_cpu_ms(&self.child.id().to_string())?;
        Some(user + system)
    }

    /// Threads of the operator process now.
    pub fn threads(&self) -> Option<u64> {
        self.proc_status("Threads:")
    }

    pub fn rss_kib(&self) -> Option<u64> {
        self.proc_status("VmRSS:")
    }

    pub fn peak_rss_kib(&self) -> Option<u64> {
        self.proc_status("VmHWM:")
    }

    /// A number from `/proc/<pid>/status`, by its field name.
    fn proc_status(&self, field: &str) -> Option<u64> {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).ok()?;
        s.lines()
            .find(|l| l.starts_with(field))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A random number, for file names no other run uses.
pub fn rand_tag() -> u128 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u8(1);
    h.finish() as u128
}

impl Operator {
    /// The exit status if the process has ended (a crash, say), without
    /// waiting.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// The process id, for readings from `/proc`.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Where this process writes its log.
    pub fn log_path(&self) -> &Path {
        &self.log
    }
}

/// User and system CPU of process `pid` so far ("self": this one), in ms,
/// from `/proc/PID/stat` (fields 14 and 15, in 10 ms ticks).
pub fn process_cpu_ms(pid: &str) -> Option<(u64, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let f: Vec<&str> = s.rsplit(") ").next()?.split_whitespace().collect();
    let tick = |i: usize| f.get(i)?.parse::<u64>().ok().map(|t| t * 10);
    Some((tick(11)?, tick(12)?))
}
