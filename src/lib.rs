//! sluice: a host-side log-structured block volume.
//!
//! Layers (imports only go downward; see ARCHITECTURE.md):
//! frontends (`nbd`, `cli`) -> `volume` -> `log` / `map` / `segments` / `gc` /
//! `recovery` / `checkpoint` -> `format` (pure) and `media` (the only IO).

pub mod bench;
pub mod check;
pub mod checkpoint;
pub mod crc_index;
pub mod error;
pub mod format;
pub mod gc;
pub mod geometry;
pub mod log;
pub mod map;
pub mod media;
pub mod nbd;
pub mod recovery;
pub mod segments;
pub mod sim;
pub mod size;
pub mod stats;
pub mod trace;
pub mod volume;

pub use error::{Error, Result};
pub use gc::GcPolicy;
pub use stats::Stats;
pub use volume::{CreateOptions, Extent, MountReport, OpenOptions, Volume};
