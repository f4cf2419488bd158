//! Crash reports: what a crash log says, as a key every crash of one bug
//! shares (syzkaller's `pkg/report`).
//!
//! - [`Signature`]: the dedup key of a log's first finding; the dedup rule
//!   is written on the type. [`kind`] is the one-word kind of that
//!   finding, [`stack`] its crash stack.
//! - [`key`]: the key of an `allocsoak violation:` line, which tolerance
//!   (in `shadow`) and signatures share.
//! - [`Record`]: a violation as the harness raised it, typed; signed by
//!   [`Signature::from_record`] without reading the log.
//!
//! Parsing is in named steps (`parse.rs`), frame rules in `frame.rs`, and
//! real engine logs pin both (`testdata/`, `tests/golden.rs`).
//!
//! ```
//! use report::Signature;
//!
//! let log = "==7==ERROR: AddressSanitizer: heap-use-after-free on address 0x7b at pc 0x55\n\
//!            READ of size 8 at 0x7b thread T0\n\
//!            \x20   #0 0x55 in mi_free /src/mimalloc/free.c:40:5\n\
//!            \x20   #1 0x55 in <shadow::executor::Executor>::free_block /work/shadow/src/executor.rs:373:18\n";
//! let sig = Signature::from_log(log, "alloc_ops/mimalloc").unwrap();
//! // The harness's frames below the allocator's are noise.
//! assert_eq!(sig.title(), "heap-use-after-free READ in mi_free");
//! assert_eq!(sig.id().len(), 16);
//! ```

#![deny(missing_docs)]

mod frame;
pub mod key;
pub mod miri;
mod parse;
pub mod record;
mod signature;

pub use frame::{declared_name, Frame};
pub use parse::{
    reported_address, reported_region, HELD_BLOCK, ON_REFERENCE, REFERENCE_FRAME, REFERENCE_NAMED,
};
pub use record::{Ending, Record};
pub use signature::{kind, stack, Signature, DEADLY};
