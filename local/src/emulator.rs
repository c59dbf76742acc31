//! Starts moto server for `granary-local demo` when no endpoint is given, and stops it on drop.

use anyhow::{bail, Context, Result};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Emulator {
    child: Child,
    pub endpoint: String,
}

/// A bare HTTP/1.1 request to the emulator's control API (no HTTP client crate needed for two calls).
fn http(addr: &str, method: &str, path: &str, body: &str) -> Result<u16> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut resp = String::new();
    s.read_to_string(&mut resp)?;
    resp.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .context("no HTTP status from the emulator")
}

impl Emulator {
    /// Starts `moto_server` (from GRANARY_MOTO_SERVER, else .venv/bin/moto_server) on a free port.
    pub fn start() -> Result<Self> {
        let bin = std::env::var_os("GRANARY_MOTO_SERVER")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(".venv/bin/moto_server"));
        if !bin.exists() {
            bail!("{} not found: run `scripts/emulator.sh install` (or `make demo`), or pass --endpoint URL of a running emulator", bin.display());
        }
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let addr = format!("127.0.0.1:{port}");
        let child = Command::new(&bin)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let emulator = Self {
            child,
            endpoint: format!("http://{addr}"),
        };
        let started = Instant::now();
        while http(&addr, "GET", "/moto-api/", "").is_err() {
            if started.elapsed() > Duration::from_secs(20) {
                bail!("moto server did not answer on {addr} within 20 s");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let status = http(
            &addr,
            "POST",
            "/moto-api/config",
            r#"{"batch":{"use_docker":false},"lambda":{"use_docker":false}}"#,
        )?;
        anyhow::ensure!(
            (200..300).contains(&status),
            "configuring moto returned HTTP {status}"
        );
        Ok(emulator)
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
