//! Triage: what a crash is and whether two crashes are one bug.
//!
//! - [`signature::Signature`]: the dedup key of a crash, read off an
//!   engine log; the dedup rule is written on the type.
//! - [`signature::kind`]: the one-word kind of a log's first finding.
//! - [`signature::stack`]: the crash stack of a log, for a report.
//! - [`replay::Replayer`]: one input replayed on a fuzz binary.
//! - [`render::program_text`]: the op program with the failing op marked.
//!
//! ```
//! use triage::signature::Signature;
//!
//! let log = "==7==ERROR: AddressSanitizer: heap-use-after-free on address 0x7b at pc 0x55\n\
//!            READ of size 8 at 0x7b thread T0\n\
//!            \x20   #0 0x55 in mi_free /src/mimalloc/free.c:40:5\n\
//!            \x20   #1 0x55 in <shadow::executor::Executor>::free_block /work/shadow/src/executor.rs:373:18\n";
//! let sig = Signature::from_log(log, "alloc_ops/mimalloc").unwrap();
//! assert_eq!(
//!     sig.title(),
//!     "heap-use-after-free READ in mi_free < shadow::executor::Executor::free_block"
//! );
//! assert_eq!(sig.id().len(), 16);
//! ```

#![deny(missing_docs)]

pub mod render;
pub mod replay;
pub mod signature;
