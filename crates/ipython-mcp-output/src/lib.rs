//! The output pipeline: the messages of one execution in, a bounded [`ExecutionOutput`] and the
//! on-disk record of the full output (spool, transcript, executions store) out. It knows
//! nothing of sessions, admission or MCP, so all of it is testable without a kernel.
//!
//! Modules import one way, from the top down: `executions` (the records a session keeps, the
//! server-side spool writer, paging) takes from `collect` and `transcript`; `collect` from
//! `payload`, `bound` and `terminal`; `payload` from `bound`, `raster` and `rich`; `transcript` from
//! `spool`. At the bottom, `output` is the shared vocabulary (the result shape, [`Withheld`],
//! [`SpoolInfo`], mime bundles) that any of them may use and that uses none of them.
//!
//! Invariants, and where each bound is kept:
//! - Memory per execution does not grow with what user code prints: each stream goes into a
//!   [`TerminalSink`] as it arrives (`max_text_chars`, a head and a tail, exact omitted
//!   counts); displays are capped by count and each payload by JSON depth, items and
//!   characters (`bound`); oversized PNG/JPEG images wait for downscaling only up to
//!   `bound::MAX_FIT_INPUT_BYTES` each and `bound::MAX_FIT_PENDING_BYTES` per execution.
//! - A finished output's payloads fit `max_reply_bytes` (`payload::settle`: images downscaled,
//!   the rest withheld to the spool and listed as [`Withheld`]); nothing is dropped silently.
//! - No file I/O on the async threads: stream and log writes, spills and evictions go through
//!   the session's one FIFO `spool::SpoolQueue`, whose backlog is bounded (what it cannot take
//!   is counted as dropped, never waited for); the other functions that touch the disk
//!   (`payload::settle`, `executions::read_page` and `spool_info`, `transcript::replay`) say
//!   they block, and callers run them on the blocking pool.
//! - What a session remembers is bounded: [`MAX_RECORDS`] executions, spool bytes per
//!   execution and in total, retained output per session and per process ([`SpoolLimits`]).

pub mod bound;
pub mod collect;
pub mod executions;
pub mod output;
pub mod payload;
pub mod raster;
pub mod rich;
pub mod spool;
mod terminal;
pub mod transcript;

pub use bound::{base64_decoded_len, BINARY_IMAGE_TYPES, SVG_TYPE};
pub use executions::{
    Page, PageError, PageLine, PageRequest, SpoolLimits, StreamName, MAX_RECORDS,
};
pub use output::{
    Code, Cut, DisplayItem, ErrorInfo, ExecutionId, ExecutionOutput, ExecutionStatus, Interruption,
    LostName, NamespaceOutcome, Restore, RuntimeInfo, SpoolInfo, Truncated, Withheld,
};
pub use terminal::{Kept, Pager, PagerCall, Paging, TerminalSink};
pub use transcript::SavedOutputs;
