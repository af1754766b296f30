//! NBD frontend: serves one volume to NBD clients (qemu, libnbd, nbdfuse, fio,
//! the kernel's nbd-client) over Unix or TCP sockets. `proto` is the pure wire
//! format; `server` owns sockets, threads and dispatch. No storage policy here:
//! each request maps to one `Volume` call (see docs/nbd.md).

pub mod proto;
pub mod server;
pub mod tls;

pub use server::{Export, Listener, Server, ServerConfig};
pub use tls::{TlsFiles, TlsMode};
