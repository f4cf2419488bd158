//! An op's line as `Display` writes it: each family of ops (block, heap,
//! worker, race) by its own function, as `parse_op` reads each back.

use std::fmt;

use crate::op::{BulkOrder, Family, NewSize, Op, PurgeDelay, NEWEST};

/// A slot as program text: a number, or `newest`.
struct SlotText(usize);

impl fmt::Display for SlotText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            NEWEST => f.write_str("newest"),
            n => write!(f, "{n}"),
        }
    }
}

fn fmt_new_size(to: &NewSize) -> String {
    match to {
        NewSize::Exact(n) => n.to_string(),
        NewSize::Same => "same".into(),
        NewSize::PlusOne => "+1".into(),
        NewSize::MinusOne => "-1".into(),
        NewSize::Double => "double".into(),
        NewSize::Half => "half".into(),
        NewSize::Zero => "zero".into(),
    }
}

fn fmt_order(order: BulkOrder) -> &'static str {
    match order {
        BulkOrder::Forward => "forward",
        BulkOrder::Reverse => "reverse",
        BulkOrder::Alternate => "alternate",
    }
}

fn fmt_delay(delay: PurgeDelay) -> String {
    match delay {
        PurgeDelay::Immediate => "now".into(),
        PurgeDelay::Millis(ms) => ms.to_string(),
        PurgeDelay::Never => "never".into(),
    }
}

/// An op's line: its name, then its fields and flags, as `parse_op` reads
/// them back. Each family's own function writes it (`block_text`,
/// `heap_text`, `worker_text`, `race_text`).
impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.family(), self) {
            (Family::Block, _) => block_text(self, f),
            (Family::Heap, _) => heap_text(self, f),
            (Family::Worker, _) => worker_text(self, f),
            (Family::Race, _) => race_text(self, f),
            (Family::Workload, Op::Workload(w)) => write!(f, "{w}"),
            (Family::Workload, _) => unreachable!("a workload op is Op::Workload"),
        }
    }
}

/// Writes a block op's line (alloc, free, realloc and the calls beyond
/// them); `op` is one of them.
fn block_text(op: &Op, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    match op {
        Op::Alloc {
            size,
            align,
            zeroed,
        } => {
            write!(
                f,
                "alloc size={size} align={align}{}",
                if *zeroed { " zeroed" } else { "" }
            )
        }
        Op::Free { slot } => write!(f, "free slot={}", SlotText(*slot)),
        Op::Realloc { slot, to } => write!(
            f,
            "realloc slot={} to={}",
            SlotText(*slot),
            fmt_new_size(to)
        ),
        Op::UsableSize { slot } => write!(f, "usable-size slot={}", SlotText(*slot)),
        Op::Calloc { count, size } => write!(f, "calloc count={count} size={size}"),
        Op::BulkAlloc { size, align, count } => {
            write!(f, "bulk-alloc size={size} align={align} count={count}")
        }
        Op::BulkFree { slot, count, order } => write!(
            f,
            "bulk-free slot={} count={count} order={}",
            SlotText(*slot),
            fmt_order(*order)
        ),
        Op::ReallocZeroed { slot, to } => write!(
            f,
            "realloc-zeroed slot={} to={}",
            SlotText(*slot),
            fmt_new_size(to)
        ),
        Op::ResizeInPlace { slot, to, extra } => write!(
            f,
            "resize-in-place slot={} to={} extra={extra}",
            SlotText(*slot),
            fmt_new_size(to)
        ),
        Op::FreeSized { slot } => write!(f, "free-sized slot={}", SlotText(*slot)),
        Op::ReallocPlain { slot, to } => write!(
            f,
            "realloc-plain slot={} to={}",
            SlotText(*slot),
            fmt_new_size(to)
        ),
        Op::ReallocNull { size } => write!(f, "realloc-null size={size}"),
        Op::FreeNull => write!(f, "free-null"),
        Op::Attack { attack, size } => write!(f, "attack kind={attack} size={size}"),
        Op::HookFree { slot } => write!(f, "hook-free slot={}", SlotText(*slot)),
        Op::OsFail { ops } => write!(f, "os-fail ops={ops}"),
        Op::Purge { delay, force } => write!(
            f,
            "purge delay={}{}",
            fmt_delay(*delay),
            if *force { " force" } else { "" }
        ),
        _ => unreachable!("`Op`'s `fmt` hands block_text only block ops"),
    }
}

/// Writes a heap op's line; `op` is one of them.
fn heap_text(op: &Op, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    match op {
        Op::HeapNew => write!(f, "heap-new"),
        Op::HeapDelete { heap } => write!(f, "heap-delete heap={heap}"),
        Op::HeapDestroy { heap } => write!(f, "heap-destroy heap={heap}"),
        Op::HeapAlloc {
            heap,
            size,
            align,
            zeroed,
        } => write!(
            f,
            "heap-alloc heap={heap} size={size} align={align}{}",
            if *zeroed { " zeroed" } else { "" }
        ),
        Op::HeapCollect { heap, force } => {
            write!(
                f,
                "heap-collect heap={heap}{}",
                if *force { " force" } else { "" }
            )
        }
        Op::HeapVisit { heap } => write!(f, "heap-visit heap={heap}"),
        _ => unreachable!("`Op`'s `fmt` hands heap_text only heap ops"),
    }
}

/// Writes a worker's op's line, or its thread's exit's; `op` is one of
/// them.
fn worker_text(op: &Op, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    match op {
        Op::WorkerAlloc {
            worker,
            size,
            align,
        } => {
            write!(f, "worker-alloc worker={worker} size={size} align={align}")
        }
        Op::WorkerFree { worker, slot } => {
            write!(f, "worker-free worker={worker} slot={}", SlotText(*slot))
        }
        Op::WorkerRealloc { worker, slot, to } => {
            write!(
                f,
                "worker-realloc worker={worker} slot={} to={}",
                SlotText(*slot),
                fmt_new_size(to)
            )
        }
        Op::WorkerCheck { worker, slot } => {
            write!(f, "worker-check worker={worker} slot={}", SlotText(*slot))
        }
        Op::ThreadExit { worker, restart } => {
            write!(
                f,
                "thread-exit worker={worker}{}",
                if *restart { " restart" } else { "" }
            )
        }
        Op::ExitAlloc {
            worker,
            size,
            align,
        } => write!(f, "exit-alloc worker={worker} size={size} align={align}"),
        Op::ExitFree { worker, slot } => {
            write!(f, "exit-free worker={worker} slot={}", SlotText(*slot))
        }
        _ => unreachable!("`Op`'s `fmt` hands worker_text only worker ops"),
    }
}

/// Writes a race section's op's line; `op` is one of them.
fn race_text(op: &Op, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    match op {
        Op::RaceAlloc {
            worker,
            size,
            align,
            zeroed,
        } => write!(
            f,
            "race-alloc worker={worker} size={size} align={align}{}",
            if *zeroed { " zeroed" } else { "" }
        ),
        Op::RaceFree {
            worker,
            slot,
            sized,
        } => write!(
            f,
            "race-free worker={worker} slot={}{}",
            SlotText(*slot),
            if *sized { " sized" } else { "" }
        ),
        Op::RaceRealloc { worker, slot, to } => write!(
            f,
            "race-realloc worker={worker} slot={} to={}",
            SlotText(*slot),
            fmt_new_size(to)
        ),
        Op::RaceResize {
            worker,
            slot,
            to,
            extra,
        } => write!(
            f,
            "race-resize worker={worker} slot={} to={} extra={extra}",
            SlotText(*slot),
            fmt_new_size(to)
        ),
        Op::RaceUsableSize { worker, slot } => {
            write!(
                f,
                "race-usable-size worker={worker} slot={}",
                SlotText(*slot)
            )
        }
        Op::RaceRemoteFree {
            freer,
            owner,
            size,
            align,
            count,
        } => write!(
            f,
            "race-remote-free freer={freer} owner={owner} size={size} align={align} count={count}"
        ),
        Op::RaceExit {
            worker,
            size,
            align,
            count,
        } => write!(
            f,
            "race-exit worker={worker} size={size} align={align} count={count}"
        ),
        Op::RaceChurn { size, align, count } => {
            write!(f, "race-churn size={size} align={align} count={count}")
        }
        Op::RaceFork {
            worker,
            size,
            align,
        } => write!(f, "race-fork worker={worker} size={size} align={align}"),
        _ => unreachable!("`Op`'s `fmt` hands race_text only race ops"),
    }
}
