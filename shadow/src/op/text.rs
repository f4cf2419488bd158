//! The text form of a program: one op per line after a `target <name>`
//! line, as `Display` writes it (an op's line: `text_write.rs`) and
//! `FromStr` reads it back.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

use super::{BulkOrder, NewSize, Op, Program, PurgeDelay, Target, NEWEST};

#[path = "text_write.rs"]
mod text_write;

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
    let f = Fields::of(words);
    if name == "workload" {
        return Ok(Op::Workload(super::workload::parse(&f.fields)?));
    }
    for family in [block_op, heap_op, worker_op, race_op] {
        if let Some(op) = family(name, &f)? {
            return Ok(op);
        }
    }
    Err(format!("unknown op `{name}`"))
}

/// An op line's fields (`key=value`) and flags (a bare word).
struct Fields<'a> {
    fields: HashMap<&'a str, &'a str>,
    flags: Vec<&'a str>,
}

impl<'a> Fields<'a> {
    fn of(words: impl Iterator<Item = &'a str>) -> Fields<'a> {
        let (mut fields, mut flags) = (HashMap::new(), Vec::new());
        for w in words {
            match w.split_once('=') {
                Some((k, v)) => {
                    fields.insert(k, v);
                }
                None => flags.push(w),
            }
        }
        Fields { fields, flags }
    }

    fn num(&self, k: &str) -> Result<usize, String> {
        self.fields
            .get(k)
            .ok_or_else(|| format!("missing `{k}=`"))?
            .parse()
            .map_err(|_| format!("`{k}` is not a number"))
    }

    /// An allocator is only ever asked for a power-of-two alignment.
    fn align(&self) -> Result<usize, String> {
        let a = self.num("align")?;
        match a.is_power_of_two() {
            true => Ok(a),
            false => Err(format!("`align={a}` is not a power of two")),
        }
    }

    fn slot(&self) -> Result<usize, String> {
        match self.fields.get("slot") {
            Some(&"newest") => Ok(NEWEST),
            _ => self.num("slot"),
        }
    }

    fn to(&self) -> Result<NewSize, String> {
        Ok(match *self.fields.get("to").ok_or("missing `to=`")? {
            "same" => NewSize::Same,
            "+1" => NewSize::PlusOne,
            "-1" => NewSize::MinusOne,
            "double" => NewSize::Double,
            "half" => NewSize::Half,
            "zero" => NewSize::Zero,
            n => NewSize::Exact(n.parse().map_err(|_| "bad `to=`")?),
        })
    }

    fn flag(&self, f: &str) -> bool {
        self.flags.contains(&f)
    }
}

/// A block op: alloc, free, realloc and the calls beyond them. `None`: not one of them.
fn block_op(name: &str, f: &Fields) -> Result<Option<Op>, String> {
    Ok(Some(match name {
        "alloc" => Op::Alloc {
            size: f.num("size")?,
            align: f.align()?,
            zeroed: f.flag("zeroed"),
        },
        "free" => Op::Free { slot: f.slot()? },
        "realloc" => Op::Realloc {
            slot: f.slot()?,
            to: f.to()?,
        },
        "usable-size" => Op::UsableSize { slot: f.slot()? },
        "calloc" => Op::Calloc {
            count: f.num("count")?,
            size: f.num("size")?,
        },
        "bulk-alloc" => Op::BulkAlloc {
            size: f.num("size")?,
            align: f.align()?,
            count: f.num("count")?,
        },
        "bulk-free" => Op::BulkFree {
            slot: f.slot()?,
            count: f.num("count")?,
            order: match *f.fields.get("order").ok_or("missing `order=`")? {
                "forward" => BulkOrder::Forward,
                "reverse" => BulkOrder::Reverse,
                "alternate" => BulkOrder::Alternate,
                _ => return Err("`order` is forward, reverse or alternate".into()),
            },
        },
        "realloc-zeroed" => Op::ReallocZeroed {
            slot: f.slot()?,
            to: f.to()?,
        },
        "resize-in-place" => Op::ResizeInPlace {
            slot: f.slot()?,
            to: f.to()?,
            extra: f.num("extra")?,
        },
        "free-sized" => Op::FreeSized { slot: f.slot()? },
        "realloc-plain" => Op::ReallocPlain {
            slot: f.slot()?,
            to: f.to()?,
        },
        "realloc-null" => Op::ReallocNull {
            size: f.num("size")?,
        },
        "free-null" => Op::FreeNull,
        "attack" => Op::Attack {
            attack: f.fields.get("kind").ok_or("missing `kind=`")?.parse()?,
            size: f.num("size")?,
        },
        "hook-free" => Op::HookFree { slot: f.slot()? },
        "os-fail" => Op::OsFail { ops: f.num("ops")? },
        "purge" => Op::Purge {
            delay: match *f.fields.get("delay").ok_or("missing `delay=`")? {
                "now" => PurgeDelay::Immediate,
                "never" => PurgeDelay::Never,
                ms => PurgeDelay::Millis(ms.parse().map_err(|_| "bad `delay=`")?),
            },
            force: f.flag("force"),
        },
        _ => return Ok(None),
    }))
}

/// A heap op. `None`: not one of them.
fn heap_op(name: &str, f: &Fields) -> Result<Option<Op>, String> {
    Ok(Some(match name {
        "heap-new" => Op::HeapNew,
        "heap-delete" => Op::HeapDelete {
            heap: f.num("heap")?,
        },
        "heap-destroy" => Op::HeapDestroy {
            heap: f.num("heap")?,
        },
        "heap-alloc" => Op::HeapAlloc {
            heap: f.num("heap")?,
            size: f.num("size")?,
            align: f.align()?,
            zeroed: f.flag("zeroed"),
        },
        "heap-collect" => Op::HeapCollect {
            heap: f.num("heap")?,
            force: f.flag("force"),
        },
        "heap-visit" => Op::HeapVisit {
            heap: f.num("heap")?,
        },
        _ => return Ok(None),
    }))
}

/// A worker's op, or its thread's exit. `None`: not one of them.
fn worker_op(name: &str, f: &Fields) -> Result<Option<Op>, String> {
    Ok(Some(match name {
        "worker-alloc" => Op::WorkerAlloc {
            worker: f.num("worker")?,
            size: f.num("size")?,
            align: f.align()?,
        },
        "worker-free" => Op::WorkerFree {
            worker: f.num("worker")?,
            slot: f.slot()?,
        },
        "worker-realloc" => Op::WorkerRealloc {
            worker: f.num("worker")?,
            slot: f.slot()?,
            to: f.to()?,
        },
        "worker-check" => Op::WorkerCheck {
            worker: f.num("worker")?,
            slot: f.slot()?,
        },
        "thread-exit" => Op::ThreadExit {
            worker: f.num("worker")?,
            restart: f.flag("restart"),
        },
        "exit-alloc" => Op::ExitAlloc {
            worker: f.num("worker")?,
            size: f.num("size")?,
            align: f.align()?,
        },
        "exit-free" => Op::ExitFree {
            worker: f.num("worker")?,
            slot: f.slot()?,
        },
        _ => return Ok(None),
    }))
}

/// A race section. `None`: not one of them.
fn race_op(name: &str, f: &Fields) -> Result<Option<Op>, String> {
    Ok(Some(match name {
        "race-alloc" => Op::RaceAlloc {
            worker: f.num("worker")?,
            size: f.num("size")?,
            align: f.align()?,
            zeroed: f.flag("zeroed"),
        },
        "race-free" => Op::RaceFree {
            worker: f.num("worker")?,
            slot: f.slot()?,
            sized: f.flag("sized"),
        },
        "race-resize" => Op::RaceResize {
            worker: f.num("worker")?,
            slot: f.slot()?,
            to: f.to()?,
            extra: f.num("extra")?,
        },
        "race-usable-size" => Op::RaceUsableSize {
            worker: f.num("worker")?,
            slot: f.slot()?,
        },
        "race-realloc" => Op::RaceRealloc {
            worker: f.num("worker")?,
            slot: f.slot()?,
            to: f.to()?,
        },
        "race-remote-free" => Op::RaceRemoteFree {
            freer: f.num("freer")?,
            owner: f.num("owner")?,
            size: f.num("size")?,
            align: f.align()?,
            count: f.num("count")?,
        },
        "race-exit" => Op::RaceExit {
            worker: f.num("worker")?,
            size: f.num("size")?,
            align: f.align()?,
            count: f.num("count")?,
        },
        "race-churn" => Op::RaceChurn {
            size: f.num("size")?,
            align: f.align()?,
            count: f.num("count")?,
        },
        "race-fork" => Op::RaceFork {
            worker: f.num("worker")?,
            size: f.num("size")?,
            align: f.align()?,
        },
        _ => return Ok(None),
    }))
}
