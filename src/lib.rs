//! sluice: a host-side log-structured block volume.
//!
//! Layers (imports only go downward; see ARCHITECTURE.md):
//! frontends (`nbd`, `cli`, `bench`, `sim`, `trace`) -> `volume` (its stages:
//! engine, commit stage, housekeeper) -> parts (`map`, `log`, `segments`, `gc`,
//! `checkpoint`, `recovery`, `check`, `crc_index`, `parity`) -> `geometry`
//! (and `stripe`) -> `format`
//! (pure) and `media` (the only IO). `tests/layers.rs` fails on an upward
//! import inside the crate; module privacy keeps the stages to the volume:
//!
//! ```compile_fail
//! // The engine is private to the volume: a frontend cannot reach around the
//! // stages to the map and the open chunks.
//! use sluice::volume::core::Core;
//! ```
//!
//! ```compile_fail
//! // Nor can it drive the commit stage or the housekeeper directly.
//! use sluice::volume::housekeeper::Housekeeper;
//! ```

pub mod bench;
pub mod check;
pub mod checkpoint;
pub mod compress;
pub mod crc_index;
pub mod error;
pub mod format;
pub mod gc;
pub mod geometry;
pub mod lease;
pub mod log;
pub mod map;
pub mod media;
pub mod metrics;
pub mod nbd;
pub mod objseg;
pub mod parity;
pub mod recovery;
pub mod segments;
pub mod sim;
pub mod size;
pub mod stats;
pub mod store;
pub mod stripe;
pub mod stripe_set;
pub mod trace;
pub mod volume;

pub use error::{Error, Result};
pub use gc::GcPolicy;
pub use stats::Stats;
pub use volume::{
    CreateOptions, Extent, LogDevice, MountReport, OpenOptions, StoreHandle, Volume, WallClock,
    DEFAULT_INTENT_LOG_BYTES,
};
