//! A tiny HTTP/1.0 responder for the metrics endpoint: `GET /metrics` answers the
//! Prometheus text exposition, anything else 404. One thread multiplexes every
//! connection with poll(2) (non-blocking sockets, one request per connection);
//! a sampler thread feeds the last-minute WA window.
//!
//! Invariant: nothing a client sends, and no number of clients, can delay
//! another client's scrape: no socket call blocks, each connection has a total
//! deadline measured from its accept (`DEADLINE`, reading and writing
//! together), at most `MAX_CONNS` are kept (a new one evicts the oldest), and a
//! bad request gets an error status, never a panic.

use super::Endpoint;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::io::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Time a connection has, from accept, to send its request and read the answer.
pub const DEADLINE: Duration = Duration::from_secs(5);
/// Connections kept open at once; the oldest is dropped for a new one.
pub const MAX_CONNS: usize = 256;
/// Longest request head read.
const MAX_REQUEST: usize = 8192;

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

/// Bind `addr` ("127.0.0.1:9100", ":9100" or a port) without serving yet, so a
/// busy port fails before any volume is opened.
pub fn bind(addr: &str) -> std::io::Result<TcpListener> {
    let l = TcpListener::bind(with_host(addr))?;
    l.set_nonblocking(true)?;
    Ok(l)
}

/// Serve `l` (from `bind`) until `stop` is set. Returns the bound address.
pub fn serve(
    l: TcpListener,
    ep: Arc<Endpoint>,
    stop: Arc<AtomicBool>,
) -> std::io::Result<SocketAddr> {
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
        .spawn(move || run(&l, &ep, &stop))?;
    Ok(bound)
}

/// Bind and serve (`bind` then `serve`).
pub fn spawn(addr: &str, ep: Arc<Endpoint>, stop: Arc<AtomicBool>) -> std::io::Result<SocketAddr> {
    serve(bind(addr)?, ep, stop)
}

/// One client connection: its request so far, then its answer so far.
struct Conn {
    s: TcpStream,
    deadline: Instant,
    request: Vec<u8>,
    answer: Option<(Vec<u8>, usize)>,
}

impl Conn {
    /// Read what is there; build the answer once the request head is complete.
    /// false: drop the connection.
    fn readable(&mut self, ep: &Endpoint) -> bool {
        let mut buf = [0u8; 2048];
        loop {
            match self.s.read(&mut buf) {
                Ok(0) => {
                    // the client closed its side: answer what it sent, if anything
                    if self.request.is_empty() {
                        return false;
                    }
                    break;
                }
                Ok(n) => {
                    self.request.extend_from_slice(&buf[..n]);
                    if head_done(&self.request) || self.request.len() >= MAX_REQUEST {
                        break;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        self.answer = Some((answer(&self.request, ep), 0));
        true
    }

    /// Write what the socket takes. false: done or failed (drop it).
    fn writable(&mut self) -> bool {
        let Some((out, sent)) = &mut self.answer else {
            return true;
        };
        while *sent < out.len() {
            match self.s.write(&out[*sent..]) {
                Ok(0) => return false,
                Ok(n) => *sent += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        let _ = self.s.shutdown(std::net::Shutdown::Write);
        false
    }
}

fn head_done(r: &[u8]) -> bool {
    r.windows(4).any(|w| w == b"\r\n\r\n") || r.windows(2).any(|w| w == b"\n\n")
}

/// The whole HTTP answer to a request head.
fn answer(request: &[u8], ep: &Endpoint) -> Vec<u8> {
    let text = String::from_utf8_lossy(request);
    let line = text.lines().next().unwrap_or("");
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let complete = head_done(request) || request.len() < MAX_REQUEST;
    let (status, ctype, body) = match (method, path) {
        _ if !complete => (
            "431 Request Header Fields Too Large",
            "text/plain",
            "request too long\n".into(),
        ),
        ("GET", "/metrics") | ("GET", "/") => (
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            ep.scrape(),
        ),
        ("GET", _) => ("404 Not Found", "text/plain", "try /metrics\n".into()),
        _ => ("405 Method Not Allowed", "text/plain", "GET only\n".into()),
    };
    let mut out = format!(
        "HTTP/1.0 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}

/// The endpoint's loop: accept, read, answer, all without blocking, until `stop`.
fn run(l: &TcpListener, ep: &Endpoint, stop: &AtomicBool) {
    let mut conns: std::collections::VecDeque<Conn> = Default::default();
    let mut fds: Vec<libc::pollfd> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        fds.clear();
        fds.push(libc::pollfd {
            fd: l.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        for c in &conns {
            let events = if c.answer.is_some() {
                libc::POLLOUT
            } else {
                libc::POLLIN
            };
            fds.push(libc::pollfd {
                fd: c.s.as_raw_fd(),
                events,
                revents: 0,
            });
        }
        // Wake at the nearest deadline, and at least every 100 ms to see `stop`.
        let now = Instant::now();
        let wait = conns
            .iter()
            .map(|c| c.deadline.saturating_duration_since(now))
            .min()
            .unwrap_or(Duration::MAX)
            .min(Duration::from_millis(100));
        // SAFETY: poll on a slice of pollfds we own, its length as nfds.
        let n = unsafe {
            libc::poll(
                fds.as_mut_ptr(),
                fds.len() as libc::nfds_t,
                wait.as_millis() as i32,
            )
        };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != ErrorKind::Interrupted {
                tracing::warn!("metrics: poll: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
            continue;
        }
        // Serve the connections that are ready (indices follow `conns` as polled).
        let mut keep = Vec::with_capacity(conns.len());
        for (c, fd) in conns.drain(..).zip(&fds[1..]) {
            let mut c = c;
            let mut alive = true;
            if fd.revents != 0 {
                if c.answer.is_none() {
                    alive = c.readable(ep);
                }
                if alive && c.answer.is_some() {
                    alive = c.writable();
                }
            }
            if alive && Instant::now() < c.deadline {
                keep.push(c);
            }
        }
        conns.extend(keep);
        if fds[0].revents != 0 {
            loop {
                match l.accept() {
                    Ok((s, _)) => {
                        if s.set_nonblocking(true).is_err() {
                            continue;
                        }
                        if conns.len() >= MAX_CONNS {
                            conns.pop_front();
                        }
                        conns.push_back(Conn {
                            s,
                            deadline: Instant::now() + DEADLINE,
                            request: Vec::new(),
                            answer: None,
                        });
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => {
                        // e.g. EMFILE: try again on the next round
                        tracing::warn!("metrics: accept: {e}");
                        std::thread::sleep(Duration::from_millis(20));
                        break;
                    }
                }
            }
        }
    }
}

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

/// Split the `export` label off a series key: `name{export="x",op="w"}` gives
/// (`x` as escaped in the text, `name{op="w"}`); None for a series without one.
pub fn split_export(key: &str) -> Option<(&str, String)> {
    let open = key.find("{export=\"")?;
    let value_start = open + "{export=\"".len();
    let rest = &key[value_start..];
    let mut escaped = false;
    let end = rest.char_indices().find_map(|(i, c)| match c {
        _ if escaped => {
            escaped = false;
            None
        }
        '\\' => {
            escaped = true;
            None
        }
        '"' => Some(i),
        _ => None,
    })?;
    let value = &rest[..end];
    let after = &rest[end + 1..];
    let name = &key[..open];
    let stripped = match after.strip_prefix(',') {
        Some(more) => format!("{name}{{{more}"),
        None => name.to_string(), // after == "}"
    };
    Some((value, stripped))
}

/// The exports a scrape shows, in its order: (name as escaped in the text, path).
pub fn exports(samples: &[(String, f64)]) -> Vec<(String, String)> {
    samples
        .iter()
        .filter(|(k, _)| k.starts_with("sluice_export_info{"))
        .filter_map(|(k, _)| {
            let (name, rest) = split_export(k)?;
            let path = rest
                .strip_prefix("sluice_export_info{path=\"")?
                .strip_suffix("\"}")?;
            Some((name.to_string(), path.to_string()))
        })
        .collect()
}

/// The series of one export (`name` as escaped in the text), its `export`
/// label removed, with every series of the whole server (no `export` label).
pub fn of_export(samples: &[(String, f64)], name: &str) -> std::collections::HashMap<String, f64> {
    samples
        .iter()
        .filter_map(|(k, v)| match split_export(k) {
            Some((e, key)) if e == name => Some((key, *v)),
            Some(_) => None,
            None => Some((k.clone(), *v)),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_export_label_splits_off() {
        assert_eq!(
            split_export(r#"a_total{export="x\"y,z",op="w"}"#),
            Some((r#"x\"y,z"#, r#"a_total{op="w"}"#.to_string()))
        );
        assert_eq!(
            split_export(r#"a_total{export=""}"#),
            Some(("", "a_total".to_string()))
        );
        assert_eq!(split_export(r#"a_total{op="w"}"#), None);
        let s = parse(
            "sluice_export_info{export=\"a\",path=\"/v/a.img\"} 1\n\
             sluice_export_info{export=\"b\",path=\"/v/b.img\"} 1\n\
             x{export=\"a\"} 1\nx{export=\"b\"} 2\ny 3\n",
        );
        assert_eq!(
            exports(&s),
            vec![
                ("a".into(), "/v/a.img".into()),
                ("b".into(), "/v/b.img".into())
            ]
        );
        let b = of_export(&s, "b");
        assert_eq!((b["x"], b["y"]), (2.0, 3.0));
    }
}
