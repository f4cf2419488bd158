//! The op language: what a fuzz input decodes into, and how a program prints.
//!
//! Decoding is total: any byte string decodes to a program (possibly empty),
//! and the same bytes always decode to the same program for the same target.
//! Sizes, alignments and counts are drawn from allocator edges (see
//! [`crate::edges`]) rather than uniformly, so a few bytes reach a size-class
//! boundary or an impossible request.

use std::fmt;
use std::str::FromStr;

use arbitrary::{Arbitrary, Unstructured};

pub use crate::allocator::{Attack, PurgeDelay};
use crate::edges::History;
pub use crate::edges::NewSize;

/// Most ops one program runs; longer inputs are cut here.
pub const MAX_OPS: usize = 384;

/// A fuzz target: which op families its programs use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// Single-threaded alloc / free / realloc / calloc / usable-size.
    AllocOps,
    /// `AllocOps` plus heap new / delete / destroy / alloc-in / collect / visit.
    HeapApi,
    /// `AllocOps` plus worker threads that allocate, free, realloc and exit,
    /// one at a time (serial ops) or all at once (race sections).
    MtOps,
    /// `AllocOps` run in lockstep on the allocator under test and on C mimalloc.
    DiffMimalloc,
    /// One classic allocator stress program ([`Workload`]), run free on
    /// several threads for many calls, each block's pattern checked at
    /// its free.
    Workload,
}

impl Target {
    /// Every target, in a stable order.
    pub const ALL: [Target; 5] = [
        Target::AllocOps,
        Target::HeapApi,
        Target::MtOps,
        Target::DiffMimalloc,
        Target::Workload,
    ];

    /// The target's name, as used for fuzz binaries and corpus folders.
    pub fn name(self) -> &'static str {
        match self {
            Target::AllocOps => "alloc_ops",
            Target::HeapApi => "heap_api",
            Target::MtOps => "mt_ops",
            Target::DiffMimalloc => "diff_mimalloc",
            Target::Workload => "workload",
        }
    }
}

impl FromStr for Target {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Target::ALL
            .into_iter()
            .find(|t| t.name() == s)
            .ok_or_else(|| format!("unknown target `{s}`; expected one of alloc_ops, heap_api, mt_ops, diff_mimalloc, workload"))
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The slot of the newest live block. Half of all decoded slots are this:
/// alloc, free, alloc again in one class is where allocators go wrong.
pub const NEWEST: usize = usize::MAX;

/// One step of a program. Slots, heaps and workers are raw indices that the
/// executor reduces modulo what is live, so every op means something.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    Alloc {
        size: usize,
        align: usize,
        zeroed: bool,
    },
    Free {
        slot: usize,
    },
    Realloc {
        slot: usize,
        to: NewSize,
    },
    /// Query the usable size and write all of it.
    UsableSize {
        slot: usize,
    },
    Calloc {
        count: usize,
        size: usize,
    },
    /// `count` blocks of one size and alignment in a row: enough to fill
    /// an allocator's page or slab, or its thread cache (a program holds
    /// up to [`crate::model::MAX_LIVE_BULK`] blocks this way).
    BulkAlloc {
        size: usize,
        align: usize,
        count: usize,
    },
    /// Frees up to `count` live blocks from `slot` on, in `order`: a whole
    /// page freed (page retire), or every other block of it (a page left
    /// half full).
    BulkFree {
        slot: usize,
        count: usize,
        order: BulkOrder,
    },
    /// Zeroed realloc: the bytes past the old usable size read zero.
    ReallocZeroed {
        slot: usize,
        to: NewSize,
    },
    /// In-place resize to `to`, and up to `extra` bytes more if it can.
    ResizeInPlace {
        slot: usize,
        to: NewSize,
        extra: usize,
    },
    /// Sized free, with the size and alignment the block was asked with.
    FreeSized {
        slot: usize,
    },
    /// Plain C realloc of any block, an over-aligned one included: the
    /// result only has malloc's alignment.
    ReallocPlain {
        slot: usize,
        to: NewSize,
    },
    /// `realloc(NULL, size)`, which is `malloc(size)`.
    ReallocNull {
        size: usize,
    },
    /// `free(NULL)`, which does nothing.
    FreeNull,
    /// A heap corruption the allocator promises to stop
    /// ([`crate::allocator::Allocator::stops`]), made on blocks of `size`
    /// in a forked child: the program's own heap is not touched.
    Attack {
        attack: Attack,
        size: usize,
    },
    /// The allocator's OS layer refuses every request for memory during
    /// the next `ops` ops ([`crate::allocator::Extras::fail_os`]): what it
    /// cannot serve from what it holds fails cleanly, and nothing else
    /// changes.
    OsFail {
        ops: usize,
    },
    /// Hands the block to the allocator's hook ([`crate::allocator::Extras::set_hook`]):
    /// the allocator calls it from inside a later call of its own, where it
    /// frees the block and allocates one of its own (reentrant calls),
    /// which it frees the next time it is called.
    HookFree {
        slot: usize,
    },
    /// Sets the purge delay and purges; every live block must be intact.
    Purge {
        delay: PurgeDelay,
        force: bool,
    },
    HeapNew,
    HeapDelete {
        heap: usize,
    },
    HeapDestroy {
        heap: usize,
    },
    HeapAlloc {
        heap: usize,
        size: usize,
        align: usize,
        zeroed: bool,
    },
    HeapCollect {
        heap: usize,
        force: bool,
    },
    HeapVisit {
        heap: usize,
    },
    /// A worker thread allocates a block (the block is then owned by it).
    WorkerAlloc {
        worker: usize,
        size: usize,
        align: usize,
    },
    /// Hand a live block to a worker, which frees it.
    WorkerFree {
        worker: usize,
        slot: usize,
    },
    /// Hand a live block to a worker, which reallocs it.
    WorkerRealloc {
        worker: usize,
        slot: usize,
        to: NewSize,
    },
    /// Hand a live block to a worker, which checks its contents and keeps it.
    WorkerCheck {
        worker: usize,
        slot: usize,
    },
    /// End a worker thread while it still owns blocks; optionally start a new one.
    ThreadExit {
        worker: usize,
        restart: bool,
    },
    /// End worker `worker`'s thread and, in its last moments (after its
    /// thread-locals are gone and the allocator's own thread-exit handlers
    /// ran), allocate a block there, as a program's late destructor calls
    /// the allocator. The block joins the program's; the next job on the
    /// worker starts a fresh thread.
    ExitAlloc {
        worker: usize,
        size: usize,
        align: usize,
    },
    /// As [`Op::ExitAlloc`], freeing a live block there.
    ExitFree {
        worker: usize,
        slot: usize,
    },
    /// Race ops: a run of them is a race section. Each queues a step on its
    /// worker; at the first op after the run (or the program's end) every
    /// worker with steps is released at once and runs them, with no checks
    /// in between, while the others run theirs. The shadow checks every
    /// result and every live block afterwards.
    ///
    /// In a race, worker `worker` allocates (a `zeroed` block is checked
    /// for zeros there), and writes the block's pattern.
    RaceAlloc {
        worker: usize,
        size: usize,
        align: usize,
        zeroed: bool,
    },
    /// In a race, worker `worker` frees a block that was live before the
    /// section, often one another thread owns while that thread allocates;
    /// `sized`: with the sized call, where the allocator has one.
    RaceFree {
        worker: usize,
        slot: usize,
        sized: bool,
    },
    /// In a race, worker `worker` reallocs a block that was live before
    /// the section.
    RaceRealloc {
        worker: usize,
        slot: usize,
        to: NewSize,
    },
    /// In a race, worker `worker` resizes a block that was live before the
    /// section in place (as [`Op::ResizeInPlace`]).
    RaceResize {
        worker: usize,
        slot: usize,
        to: NewSize,
        extra: usize,
    },
    /// In a race, worker `worker` asks a block that was live before the
    /// section its usable size, then writes the pattern over all of it:
    /// a usable size that reaches into a block another worker is handed
    /// meanwhile is an overlap.
    RaceUsableSize {
        worker: usize,
        slot: usize,
    },
    /// The cross-thread free race in one op: worker `owner` allocates
    /// `count` blocks, then a race section runs in which every other
    /// worker frees some of them (dealt round robin from `freer`) while
    /// `owner` allocates `count` more of the same size (remote-free
    /// queues, delayed-free lists and tcache flushes race the owner's own
    /// allocations there, and the freers race each other). Then, where
    /// the allocator promises it ([`crate::allocator::Allocator::remote_reuse`]),
    /// every remotely freed block must be handed out again.
    RaceRemoteFree {
        freer: usize,
        owner: usize,
        size: usize,
        align: usize,
        count: usize,
    },
    /// The thread-exit race in one op: worker `worker` allocates `count`
    /// blocks and frees the first half itself, then a race section runs in
    /// which its thread exits (its caches abandoned, its thread-local
    /// destructors run) while every other worker allocates blocks of the
    /// same size and frees the exiting thread's live ones.
    RaceExit {
        worker: usize,
        size: usize,
        align: usize,
        count: usize,
    },
    /// In a race, every worker allocates `count` blocks of `size` (each
    /// written with its pattern), then frees them oldest first (each
    /// checked before its free): many calls into one size class from
    /// every thread at once.
    RaceChurn {
        size: usize,
        align: usize,
        count: usize,
    },
    /// The fork race in one op: a section runs in which every other
    /// worker churns blocks of `size` while worker `worker` forks the
    /// process; the child, that thread alone, allocates, writes, checks
    /// and frees blocks of `size` and exits. A lock another thread held at
    /// the fork (an allocator without fork handlers) hangs it.
    RaceFork {
        worker: usize,
        size: usize,
        align: usize,
    },
    /// A whole stress program on its own threads (the `workload` target's
    /// one op).
    Workload(Workload),
}

/// The order a bulk free frees its blocks in.
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BulkOrder {
    /// Oldest first.
    Forward,
    /// Newest first.
    Reverse,
    /// Every other block, oldest first.
    Alternate,
}

impl Op {
    /// Whether the op makes one of the optional calls
    /// ([`crate::allocator::Extras`]).
    pub fn is_extra(&self) -> bool {
        matches!(
            self,
            Op::ReallocZeroed { .. }
                | Op::ResizeInPlace { .. }
                | Op::FreeSized { .. }
                | Op::ReallocPlain { .. }
                | Op::ReallocNull { .. }
                | Op::FreeNull
                | Op::HookFree { .. }
                | Op::OsFail { .. }
                | Op::Purge { .. }
                | Op::RaceFree { sized: true, .. }
                | Op::RaceResize { .. }
        )
    }

    /// Whether the op runs allocator calls on another thread than the
    /// program's: skipped for a single-threaded allocator.
    pub fn uses_other_threads(&self) -> bool {
        matches!(self.family(), Family::Worker | Family::Race)
    }

    /// Whether the op is part of a race section.
    pub fn is_race(&self) -> bool {
        self.family() == Family::Race
    }

    /// The op's family: the one place that sorts every op into one, so
    /// each family's text, parser and runner take their own ops alone.
    pub fn family(&self) -> Family {
        match self {
            Op::Alloc { .. }
            | Op::Free { .. }
            | Op::Realloc { .. }
            | Op::UsableSize { .. }
            | Op::Calloc { .. }
            | Op::BulkAlloc { .. }
            | Op::BulkFree { .. }
            | Op::ReallocZeroed { .. }
            | Op::ResizeInPlace { .. }
            | Op::FreeSized { .. }
            | Op::ReallocPlain { .. }
            | Op::ReallocNull { .. }
            | Op::FreeNull
            | Op::Attack { .. }
            | Op::HookFree { .. }
            | Op::OsFail { .. }
            | Op::Purge { .. } => Family::Block,
            Op::HeapNew
            | Op::HeapDelete { .. }
            | Op::HeapDestroy { .. }
            | Op::HeapAlloc { .. }
            | Op::HeapCollect { .. }
            | Op::HeapVisit { .. } => Family::Heap,
            Op::WorkerAlloc { .. }
            | Op::WorkerFree { .. }
            | Op::WorkerRealloc { .. }
            | Op::WorkerCheck { .. }
            | Op::ThreadExit { .. }
            | Op::ExitAlloc { .. }
            | Op::ExitFree { .. } => Family::Worker,
            Op::RaceAlloc { .. }
            | Op::RaceFree { .. }
            | Op::RaceRealloc { .. }
            | Op::RaceResize { .. }
            | Op::RaceUsableSize { .. }
            | Op::RaceRemoteFree { .. }
            | Op::RaceExit { .. }
            | Op::RaceChurn { .. }
            | Op::RaceFork { .. } => Family::Race,
            Op::Workload(_) => Family::Workload,
        }
    }
}

/// The families of ops ([`Op::family`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// A block's calls on the program's thread, and the ops on the
    /// allocator as a whole (attacks, purges, OS failures, the hook).
    Block,
    /// A heap's calls.
    Heap,
    /// A worker thread's calls, and its exit.
    Worker,
    /// A race section's steps.
    Race,
    /// A `workload` program's one op.
    Workload,
}

/// A decoded program: the target it was decoded for and its ops, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Program {
    pub target: Target,
    pub ops: Vec<Op>,
}

impl Program {
    /// Decodes fuzz input for `target`. Never fails: decoding stops at the
    /// first op the remaining bytes cannot complete, or at [`MAX_OPS`].
    pub fn decode(target: Target, data: &[u8]) -> Program {
        let mut u = Unstructured::new(data);
        let mut ops = Vec::new();
        let h = &mut History::default();
        // A workload program is one op: its parameters.
        let most = match target {
            Target::Workload => 1,
            _ => MAX_OPS,
        };
        while !u.is_empty() && ops.len() < most {
            match decode::next_op(target, &mut u, h) {
                // Both sides of a differential run must make the same
                // calls, and the extras differ from allocator to allocator.
                Ok(op) if target == Target::DiffMimalloc && op.is_extra() => {}
                Ok(op) => ops.push(op),
                Err(_) => break,
            }
        }
        Program { target, ops }
    }

    /// Programs as one standalone Rust test that replays them with no fuzz
    /// engine, in order on one instance of `allocator` (a name
    /// `allocator::by_name` accepts): a bug that needs the state earlier
    /// programs left (as the inputs of one fuzz process leave it) replays
    /// too. Most tests are one program. `setup` is Rust the test runs
    /// first (a declared allocator's `declare` line), or empty; a `zoo:`
    /// allocator's test registers the zoo crate first.
    pub fn rust_test(
        programs: &[Program],
        test_name: &str,
        allocator: &str,
        setup: &str,
    ) -> String {
        let what = match programs.len() {
            1 => "one op program".to_string(),
            n => {
                format!("{n} op programs in order (the allocator keeps state from one to the next)")
            }
        };
        let texts: String = programs
            .iter()
            .map(|p| format!("        r#\"\n{p}\"#,\n"))
            .collect();
        let features = crate::allocator::dependency_features(allocator);
        let (zoo_dependency, zoo_setup) = if allocator.starts_with("zoo:") {
            (
                "\n// zoo = { path = \"<allocsoak>/zoo\" }",
                "    zoo::register();\n",
            )
        } else {
            ("", "")
        };
        format!(
            "// Emitted by allocsoak: a replay of {what}, no fuzz engine needed.\n\
             // Needs allocsoak's `shadow` crate in [dev-dependencies]:\n\
             // shadow = {{ path = \"<allocsoak>/shadow\"{features} }}{zoo_dependency}\n\
             // It runs on {allocator:?} unless ALLOCSOAK_ALLOCATOR names another allocator;\n\
             // it panics with an `allocsoak violation:` line while the bug is there.\n\
             #[test]\n\
             fn {test_name}() {{\n\
             {setup}{zoo_setup}\
             \x20   let name = std::env::var(\"ALLOCSOAK_ALLOCATOR\").unwrap_or_else(|_| {allocator:?}.to_string());\n\
             \x20   let allocator = shadow::allocator::by_name(&name).expect(\"allocator\");\n\
             \x20   for text in [\n{texts}\x20   ] {{\n\
             \x20       let program: shadow::Program = text.parse().expect(\"program text\");\n\
             \x20       shadow::run(&program, allocator);\n\
             \x20   }}\n\
             }}\n"
        )
    }
}

mod decode;
mod simpler;
mod text;
pub mod trace;
pub mod workload;

pub use workload::Workload;
