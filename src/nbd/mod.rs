//! NBD frontend: serves one volume to NBD clients (qemu, libnbd, nbdfuse, fio,
//! the kernel's nbd-client) over Unix or TCP sockets. No storage policy here:
//! each request maps to one `Volume` call (see docs/nbd.md). By job:
//! - `proto`: the pure wire format (no IO, fuzzed);
//! - `transport`: sockets, the receive buffer (through TLS after STARTTLS),
//!   non-blocking sends; `tls`: the rustls session (no IO);
//! - `handshake`: option haggling, one handler per option;
//! - `requests`: a connection's request loop and dispatch;
//! - `reply`: a connection's budget, reply batching, backlog and writer thread;
//! - `pool`: the shared worker pool;
//! - `server`: the accept loop, connection life, shutdown.

mod handshake;
mod pool;
pub mod proto;
mod reply;
mod requests;
pub mod server;
pub mod tls;
mod transport;

pub use server::{Export, Server, ServerConfig};
pub use tls::{TlsFiles, TlsMode};
pub use transport::{Listener, Stream};
