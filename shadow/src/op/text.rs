//! The text form of a program: one op per line after a `target <name>`
//! line, as `Display` writes it and `FromStr` reads it back.

use std::fmt;
use std::str::FromStr;

use super::{BulkOrder, NewSize, Op, Program, PurgeDelay, Target, NEWEST};

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

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
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
                write!(f, "race-usable-size worker={worker} slot={}", SlotText(*slot))
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
            Op::Workload(w) => write!(f, "{w}"),
        }
    }
}

/// One op per line, after a `target <name>` header line.
impl fmt::Display for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "target {}", self.target)?;
        for op in &self.ops {
            writeln!(f, "{op}")?;
        }
        Ok(())
    }
}

/// Parses the text form written by `Display` (blank lines and `#` comments
/// are allowed), so printed programs and emitted tests replay exactly.
impl FromStr for Program {
    type Err = String;
    fn from_str(text: &str) -> Result<Program, String> {
        let mut lines = text
            .lines()
            .enumerate()
            .map(|(i, l)| (i + 1, l.split('#').next().unwrap_or("").trim()))
            .filter(|(_, l)| !l.is_empty());
        let target = match lines.next() {
            Some((_, l)) if l.starts_with("target ") => l["target ".len()..].trim().parse()?,
            _ => return Err("program text must start with a `target <name>` line".into()),
        };
        let ops = lines
            .map(|(n, l)| parse_op(l).map_err(|e| format!("line {n}: {e}: `{l}`")))
            .collect::<Result<_, _>>()?;
        Ok(Program { target, ops })
    }
}

impl Program {
    /// The program an input file holds: op program text, when its first
    /// line that is not blank or a comment is a `target` line (for
    /// `target`), else fuzz bytes decoded for `target`.
    pub fn from_input(target: Target, data: &[u8]) -> Result<Program, String> {
        let text = std::str::from_utf8(data).ok().filter(|t| {
            t.lines()
                .map(|l| l.split('#').next().unwrap_or("").trim())
                .find(|l| !l.is_empty())
                .is_some_and(|l| l.starts_with("target "))
        });
        let Some(text) = text else {
            return Ok(Program::decode(target, data));
        };
        let program: Program = text
            .parse()
            .map_err(|e| format!("input is not an op program: {e}"))?;
        if program.target != target {
            return Err(format!(
                "the input is a {} program; replay it on the {} fuzz binary",
                program.target, program.target
            ));
        }
        Ok(program)
    }
}

pub(super) fn parse_op(line: &str) -> Result<Op, String> {
    let mut words = line.split_whitespace();
    let name = words.next().ok_or("empty op")?;
    let mut fields = std::collections::HashMap::new();
    let mut flags = Vec::new();
    for w in words {
        match w.split_once('=') {
            Some((k, v)) => {
                fields.insert(k, v);
            }
            None => flags.push(w),
        }
    }
    let num = |k: &str| -> Result<usize, String> {
        fields
            .get(k)
            .ok_or_else(|| format!("missing `{k}=`"))?
            .parse()
            .map_err(|_| format!("`{k}` is not a number"))
    };
    // An allocator is only ever asked for a power-of-two alignment.
    let align = || -> Result<usize, String> {
        let a = num("align")?;
        match a.is_power_of_two() {
            true => Ok(a),
            false => Err(format!("`align={a}` is not a power of two")),
        }
    };
    let slot = || -> Result<usize, String> {
        match fields.get("slot") {
            Some(&"newest") => Ok(NEWEST),
            _ => num("slot"),
        }
    };
    let to = || -> Result<NewSize, String> {
        Ok(match *fields.get("to").ok_or("missing `to=`")? {
            "same" => NewSize::Same,
            "+1" => NewSize::PlusOne,
            "-1" => NewSize::MinusOne,
            "double" => NewSize::Double,
            "half" => NewSize::Half,
            "zero" => NewSize::Zero,
            n => NewSize::Exact(n.parse().map_err(|_| "bad `to=`")?),
        })
    };
    let flag = |f: &str| flags.contains(&f);
    Ok(match name {
        "alloc" => Op::Alloc {
            size: num("size")?,
            align: align()?,
            zeroed: flag("zeroed"),
        },
        "free" => Op::Free { slot: slot()? },
        "realloc" => Op::Realloc {
            slot: slot()?,
            to: to()?,
        },
        "usable-size" => Op::UsableSize { slot: slot()? },
        "calloc" => Op::Calloc {
            count: num("count")?,
            size: num("size")?,
        },
        "bulk-alloc" => Op::BulkAlloc {
            size: num("size")?,
            align: align()?,
            count: num("count")?,
        },
        "bulk-free" => Op::BulkFree {
            slot: slot()?,
            count: num("count")?,
            order: match *fields.get("order").ok_or("missing `order=`")? {
                "forward" => BulkOrder::Forward,
                "reverse" => BulkOrder::Reverse,
                "alternate" => BulkOrder::Alternate,
                _ => return Err("`order` is forward, reverse or alternate".into()),
            },
        },
        "realloc-zeroed" => Op::ReallocZeroed {
            slot: slot()?,
            to: to()?,
        },
        "resize-in-place" => Op::ResizeInPlace {
            slot: slot()?,
            to: to()?,
            extra: num("extra")?,
        },
        "free-sized" => Op::FreeSized { slot: slot()? },
        "realloc-plain" => Op::ReallocPlain {
            slot: slot()?,
            to: to()?,
        },
        "realloc-null" => Op::ReallocNull { size: num("size")? },
        "free-null" => Op::FreeNull,
        "attack" => Op::Attack {
            attack: fields.get("kind").ok_or("missing `kind=`")?.parse()?,
            size: num("size")?,
        },
        "hook-free" => Op::HookFree { slot: slot()? },
        "os-fail" => Op::OsFail { ops: num("ops")? },
        "purge" => Op::Purge {
            delay: match *fields.get("delay").ok_or("missing `delay=`")? {
                "now" => PurgeDelay::Immediate,
                "never" => PurgeDelay::Never,
                ms => PurgeDelay::Millis(ms.parse().map_err(|_| "bad `delay=`")?),
            },
            force: flag("force"),
        },
        "heap-new" => Op::HeapNew,
        "heap-delete" => Op::HeapDelete { heap: num("heap")? },
        "heap-destroy" => Op::HeapDestroy { heap: num("heap")? },
        "heap-alloc" => Op::HeapAlloc {
            heap: num("heap")?,
            size: num("size")?,
            align: align()?,
            zeroed: flag("zeroed"),
        },
        "heap-collect" => Op::HeapCollect {
            heap: num("heap")?,
            force: flag("force"),
        },
        "heap-visit" => Op::HeapVisit { heap: num("heap")? },
        "worker-alloc" => Op::WorkerAlloc {
            worker: num("worker")?,
            size: num("size")?,
            align: align()?,
        },
        "worker-free" => Op::WorkerFree {
            worker: num("worker")?,
            slot: slot()?,
        },
        "worker-realloc" => Op::WorkerRealloc {
            worker: num("worker")?,
            slot: slot()?,
            to: to()?,
        },
        "worker-check" => Op::WorkerCheck {
            worker: num("worker")?,
            slot: slot()?,
        },
        "thread-exit" => Op::ThreadExit {
            worker: num("worker")?,
            restart: flag("restart"),
        },
        "exit-alloc" => Op::ExitAlloc {
            worker: num("worker")?,
            size: num("size")?,
            align: align()?,
        },
        "exit-free" => Op::ExitFree {
            worker: num("worker")?,
            slot: slot()?,
        },
        "race-alloc" => Op::RaceAlloc {
            worker: num("worker")?,
            size: num("size")?,
            align: align()?,
            zeroed: flag("zeroed"),
        },
        "race-free" => Op::RaceFree {
            worker: num("worker")?,
            slot: slot()?,
            sized: flag("sized"),
        },
        "race-resize" => Op::RaceResize {
            worker: num("worker")?,
            slot: slot()?,
            to: to()?,
            extra: num("extra")?,
        },
        "race-usable-size" => Op::RaceUsableSize {
            worker: num("worker")?,
            slot: slot()?,
        },
        "race-realloc" => Op::RaceRealloc {
            worker: num("worker")?,
            slot: slot()?,
            to: to()?,
        },
        "race-remote-free" => Op::RaceRemoteFree {
            freer: num("freer")?,
            owner: num("owner")?,
            size: num("size")?,
            align: align()?,
            count: num("count")?,
        },
        "race-exit" => Op::RaceExit {
            worker: num("worker")?,
            size: num("size")?,
            align: align()?,
            count: num("count")?,
        },
        "race-churn" => Op::RaceChurn {
            size: num("size")?,
            align: align()?,
            count: num("count")?,
        },
        "race-fork" => Op::RaceFork {
            worker: num("worker")?,
            size: num("size")?,
            align: align()?,
        },
        "workload" => Op::Workload(super::workload::parse(&fields)?),
        other => return Err(format!("unknown op `{other}`")),
    })
}
