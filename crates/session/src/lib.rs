//! # dsh-session
//!
//! The session log: the one record of what the model saw. The [`SessionLog`] handle talks
//! to the session-writer actor, which assigns `seq` (from 1, +1, no gaps) and acknowledges an
//! append only once it is as durable as the [`Durability`] setting asks. Backends store the
//! events: [`MemoryBackend`], and [`FileBackend`] (JSON Lines, recovered when opened, see
//! [`SessionLog::open_file`]). [`replay`] rebuilds the model-visible transcript from a log, and
//! [`check`] verifies a log's invariants.
//!
//! ```
//! use dsh_session::{Durability, SessionLog};
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let log = SessionLog::memory().await.unwrap();
//! assert!(log.snapshot().await.unwrap().is_empty());
//! assert_eq!("batch".parse::<Durability>(), Ok(Durability::Batch));
//! # log.close().await.unwrap();
//! # });
//! ```
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

mod backend;
pub mod check;
mod error;
mod file;
mod inbox;
mod limits;
mod lines;
mod log;
mod memory;
mod open;
mod parallel_replay;
#[cfg(feature = "postgres")]
pub mod postgres;
mod recover;
pub mod replay;
mod secrets;
mod writer;

pub use backend::{Durability, LogBackend};
pub use error::SessionError;
pub use file::FileBackend;
pub use inbox::PendingAppend;
pub use log::SessionLog;
pub use memory::MemoryBackend;
pub use recover::Recovery;
pub use secrets::mask_passwords;
pub use writer::{LogStats, WriterConfig, WriterMsg};
