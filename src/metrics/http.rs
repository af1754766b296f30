//! A tiny HTTP/1.0 responder for the metrics endpoint: `GET /metrics` answers the
//! Prometheus text exposition, anything else 404. One thread, one request per
//! connection, short timeouts; a sampler thread feeds the last-minute WA window.
//!
//! Invariant: nothing a client sends can block the server for more than the
//! socket timeouts or make it panic; a bad request gets an error status.

use super::Endpoint;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// ":9100" or "9100" means the loopback address; anything else is taken as given.
fn with_host(addr: &str) -> String {
    if let Some(p) = addr.strip_prefix(':') {
        format!("127.0.0.1:{p}")
    } else if addr.parse::<u16>().is_ok() {
        format!("127.0.0.1:{addr}")
    } else {
        addr.to_string()
    }
}

/// Bind `addr` ("127.0.0.1:9100", ":9100" or a port) and serve until `stop` is set.
/// Returns the bound address.
pub fn spawn(addr: &str, ep: Arc<Endpoint>, stop: Arc<AtomicBool>) -> std::io::Result<SocketAddr> {
    let addr = with_host(addr);
    let l = TcpListener::bind(&addr)?;
    l.set_nonblocking(true)?;
    let bound = l.local_addr()?;
    {
        let ep = ep.clone();
        let stop = stop.clone();
        std::thread::Builder::new()
            .name("sluice-metrics-sampler".into())
            .spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    ep.sample();
                    std::thread::sleep(Duration::from_secs(1));
                }
            })?;
    }
    std::thread::Builder::new()
        .name("sluice-metrics".into())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match l.accept() {
                    Ok((s, _)) => {
                        if let Err(e) = answer(s, &ep) {
                            tracing::debug!("metrics: {e}");
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    Err(e) => {
                        tracing::warn!("metrics: accept: {e}");
                        std::thread::sleep(Duration::from_millis(200));
                    }
                }
            }
        })?;
    Ok(bound)
}

fn answer(s: TcpStream, ep: &Endpoint) -> std::io::Result<()> {
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.set_write_timeout(Some(Duration::from_secs(5)))?;
    let mut r = BufReader::new(s.try_clone()?).take(8192);
    let mut line = String::new();
    r.read_line(&mut line)?;
    // Drain the headers (bounded by `take`).
    loop {
        let mut h = String::new();
        if r.read_line(&mut h)? == 0 || h == "\r\n" || h == "\n" {
            break;
        }
    }
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (status, ctype, body) = match (method, path) {
        ("GET", "/metrics") | ("GET", "/") => (
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            ep.scrape(),
        ),
        ("GET", _) => ("404 Not Found", "text/plain", "try /metrics\n".into()),
        _ => ("405 Method Not Allowed", "text/plain", "GET only\n".into()),
    };
    let mut w = s;
    write!(
        w,
        "HTTP/1.0 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    w.write_all(body.as_bytes())?;
    w.flush()
}

use std::io::Read as _;

/// Fetch `http://ADDR/metrics` (for `sluice top` and `sluice info --metrics`).
pub fn fetch(addr: &str) -> std::io::Result<String> {
    let addr = addr
        .trim_start_matches("http://")
        .trim_end_matches("/metrics")
        .trim_end_matches('/');
    let addr = with_host(addr);
    let sa: SocketAddr = std::net::ToSocketAddrs::to_socket_addrs(&addr)?
        .next()
        .ok_or_else(|| std::io::Error::other(format!("{addr}: no address")))?;
    let mut s = TcpStream::connect_timeout(&sa, Duration::from_secs(3))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(s, "GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut resp = String::new();
    s.take(64 << 20).read_to_string(&mut resp)?;
    let (head, body) = resp
        .split_once("\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("malformed HTTP response"))?;
    if !head.starts_with("HTTP/1.0 200") && !head.starts_with("HTTP/1.1 200") {
        return Err(std::io::Error::other(
            head.lines().next().unwrap_or("no status").to_string(),
        ));
    }
    Ok(body.to_string())
}

/// Parse the exposition into (name with labels, value) pairs, comments skipped.
pub fn parse(text: &str) -> Vec<(String, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (k, v) = l.rsplit_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect()
}
