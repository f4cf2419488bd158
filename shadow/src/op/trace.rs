//! A recorded program's allocations (`allocsoak trace record`'s files,
//! written by `soak/src/tools/trace_record.c`), read into what a replay
//! runs: each recorded thread's calls in its order, with every address
//! turned into the block it named at that point of the recording (an
//! address is reused; a block is not).
//!
//! A file is a 16-byte header, `allocsoak-trace2`, then records in the
//! order the calls took effect. A record is a tag byte (its kind, with
//! [`NEW_THREAD`] set when its thread differs from the previous record's,
//! whose id then follows), then its fields as LEB128 varints; an address
//! is the zigzag difference from the last non-null address in the file.
//! About 5 bytes a call.

use std::collections::HashMap;

/// The file's first 16 bytes.
pub const HEADER: &[u8; 16] = b"allocsoak-trace2";
/// Whether `data` is a trace file (a `workload` input may be one).
pub fn is_trace(data: &[u8]) -> bool {
    data.starts_with(HEADER)
}

/// Whether the file at `path` is a trace, from its first 16 bytes alone
/// (false when it cannot be read).
pub fn file_is_trace(path: &std::path::Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 16];
    let read = std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut head));
    read.is_ok() && is_trace(&head)
}

/// The tag bit of a record whose thread id follows.
pub const NEW_THREAD: u8 = 0x08;
/// Replay threads at most: recorded threads past it share one (each
/// keeps its calls' order).
pub const MAX_THREADS: usize = 64;

/// One call of a replay, on its thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Allocate block `block` (a calloc's is zeroed).
    Alloc {
        block: usize,
        size: usize,
        align: usize,
        zeroed: bool,
    },
    /// Free block `block`, which may have come on another thread.
    Free { block: usize },
    /// Reallocate block `block` to `size`; it stays `block`.
    Realloc { block: usize, size: usize },
}

impl Step {
    /// The block a step needs live before it runs, if any.
    pub fn needs(&self) -> Option<usize> {
        match *self {
            Step::Alloc { .. } => None,
            Step::Free { block } | Step::Realloc { block, .. } => Some(block),
        }
    }
}

/// A reading of the recorded program's resident memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mark {
    /// Calls recorded before it.
    pub calls: usize,
    /// Replay steps before it, over all threads.
    pub steps: usize,
    /// Resident bytes.
    pub bytes: u64,
}

/// A trace, ready to replay.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Trace {
    /// Each replay thread's steps, in order.
    pub threads: Vec<Vec<Step>>,
    /// Blocks the steps name.
    pub blocks: usize,
    /// Calls recorded.
    pub calls: usize,
    /// Calls a replay leaves out: a free or realloc of an address the
    /// recording never handed out (a block from before the recorder
    /// loaded), a failed call, a size-0 request.
    pub skipped: usize,
    /// The recorded program's resident memory as the recording went.
    pub resident: Vec<Mark>,
    /// Whether the recorder stopped at its size cap.
    pub truncated: bool,
}

/// Malloc's alignment on the recording's machine (x86-64 glibc).
const MALLOC_ALIGN: usize = 16;

impl Trace {
    /// Reads a trace file's bytes; `Err` says what is wrong with them.
    pub fn parse(data: &[u8]) -> Result<Trace, String> {
        let mut records = Records {
            data: body_of(data)?,
            tid: 0,
            last: 0,
        };
        let mut reading = Reading::default();
        while let Some(record) = records.next_record() {
            let (kind, tid, a, b, result) = record.map_err(|e| {
                format!(
                    "record {} {e}: the file is damaged",
                    reading.trace.calls + reading.trace.resident.len()
                )
            })?;
            let thread = reading.thread_of(tid);
            let call = Call {
                thread,
                a,
                b,
                result,
            };
            reading.add(kind, call);
        }
        Ok(reading.finish())
    }

    /// The bytes the parsed trace holds: a replay process's own memory,
    /// which a measure of the allocator's leaves out.
    pub fn heap_bytes(&self) -> usize {
        let steps: usize = self.threads.iter().map(Vec::capacity).sum();
        steps * std::mem::size_of::<Step>()
            + self.threads.capacity() * std::mem::size_of::<Vec<Step>>()
            + self.resident.capacity() * std::mem::size_of::<Mark>()
    }
}

/// A trace file's records, past its header; `Err` says why the file is
/// not a trace this reader reads.
fn body_of(data: &[u8]) -> Result<&[u8], String> {
    match data.strip_prefix(HEADER.as_slice()) {
        Some(body) => Ok(body),
        None if data.starts_with(b"allocsoak-trace") => Err("recorded in an older trace format; record it again with this `allocsoak trace record`".into()),
        None => Err("not an allocsoak trace (its first bytes are not `allocsoak-trace2`); record one with `allocsoak trace record`".into()),
    }
}

/// One record's fields as [`Records`] decoded them, its thread turned
/// into the replay thread it runs on.
#[derive(Clone, Copy)]
struct Call {
    thread: usize,
    a: u64,
    b: u64,
    result: u64,
}

/// A trace as its records are read into it.
#[derive(Default)]
struct Reading {
    trace: Trace,
    /// The block each live address is.
    live: HashMap<u64, usize>,
    /// The replay thread each recorded thread is.
    threads: HashMap<u32, usize>,
}

impl Reading {
    /// The replay thread recorded thread `tid` runs on, given (with its
    /// list of steps) at its first record.
    fn thread_of(&mut self, tid: u32) -> usize {
        let next = self.threads.len();
        let t = *self.threads.entry(tid).or_insert(next % MAX_THREADS);
        if self.trace.threads.len() <= t {
            self.trace.threads.resize(t + 1, Vec::new());
        }
        t
    }

    /// Adds a record of `kind` to the trace: a call's step (or a skipped
    /// call), a resident mark, or the recorder's stop at its cap.
    fn add(&mut self, kind: u32, call: Call) {
        match kind {
            1 => {
                self.trace.calls += 1;
                self.alloc(call, call.a, MALLOC_ALIGN, false)
            }
            3 => {
                self.trace.calls += 1;
                self.alloc(call, call.a.saturating_mul(call.b), MALLOC_ALIGN, true)
            }
            5 => {
                self.trace.calls += 1;
                let align = usize::try_from(call.a).unwrap_or(0).max(MALLOC_ALIGN);
                match align.is_power_of_two() {
                    true => self.alloc(call, call.b, align, false),
                    false => self.trace.skipped += 1,
                }
            }
            2 => {
                self.trace.calls += 1;
                self.free(call)
            }
            4 => {
                self.trace.calls += 1;
                self.realloc(call)
            }
            6 => self.trace.resident.push(Mark {
                calls: self.trace.calls,
                steps: self.trace.threads.iter().map(Vec::len).sum(),
                bytes: call.a,
            }),
            7 => self.trace.truncated = true,
            _ => unreachable!("Records yields the kinds it knows"),
        }
    }

    /// Adds a new block of `size` at `call.result`, on the call's thread;
    /// a failed call or a size-0 request is skipped.
    fn alloc(&mut self, call: Call, size: u64, align: usize, zeroed: bool) {
        let (Ok(size), false) = (usize::try_from(size), call.result == 0 || size == 0) else {
            self.trace.skipped += 1;
            return;
        };
        let block = self.trace.blocks;
        self.trace.blocks += 1;
        self.live.insert(call.result, block);
        self.trace.threads[call.thread].push(Step::Alloc {
            block,
            size,
            align,
            zeroed,
        });
    }

    /// Adds a free of the block at `call.a`; skipped when no live block is
    /// there.
    fn free(&mut self, call: Call) {
        match self.live.remove(&call.a) {
            Some(block) => self.trace.threads[call.thread].push(Step::Free { block }),
            None => self.trace.skipped += 1,
        }
    }

    /// Adds a realloc of the block at `call.a` to `call.b` bytes, which
    /// leaves it at `call.result`.
    fn realloc(&mut self, call: Call) {
        let Call {
            thread: t,
            a,
            b,
            result,
        } = call;
        match (a, self.live.get(&a).copied()) {
            // realloc(NULL, n) is malloc(n).
            (0, _) => self.alloc(call, b, MALLOC_ALIGN, false),
            (_, None) => self.trace.skipped += 1,
            // A failed realloc leaves the block as it was.
            _ if result == 0 && b != 0 => self.trace.skipped += 1,
            // realloc(p, 0) frees p (glibc).
            (_, Some(block)) if b == 0 => {
                self.live.remove(&a);
                self.trace.threads[t].push(Step::Free { block });
            }
            (_, Some(block)) => {
                self.live.remove(&a);
                self.live.insert(result, block);
                self.trace.threads[t].push(Step::Realloc {
                    block,
                    size: b as usize,
                });
            }
        }
    }

    /// The trace, with the blocks the program never freed freed at the
    /// replay's end, on the thread that made them (in `Trace::threads`
    /// order).
    fn finish(self) -> Trace {
        let mut trace = self.trace;
        let mut left: Vec<(usize, u64)> = self.live.into_iter().map(|(p, b)| (b, p)).collect();
        left.sort_unstable();
        let owner = owners(&trace.threads, trace.blocks);
        for (block, _) in left {
            trace.threads[owner[block]].push(Step::Free { block });
        }
        trace
    }
}

/// A trace's records, decoded one at a time: `(kind, thread, a, b,
/// result)` as the recorder's `add` took them.
struct Records<'a> {
    data: &'a [u8],
    /// The thread of the last record.
    tid: u32,
    /// The last non-null address.
    last: u64,
}

type Record = (u32, u32, u64, u64, u64);

impl Records<'_> {
    fn next_record(&mut self) -> Option<Result<Record, String>> {
        let (&tag, rest) = self.data.split_first()?;
        self.data = rest;
        Some(self.decode(tag))
    }

    fn decode(&mut self, tag: u8) -> Result<Record, String> {
        if tag & NEW_THREAD != 0 {
            self.tid = u32::try_from(self.varint()?).map_err(|_| "has a thread id over 32 bits")?;
        }
        let kind = u32::from(tag & !NEW_THREAD);
        let (a, b, result) = match kind {
            1 => (self.varint()?, 0, self.address()?),
            2 => (self.address()?, 0, 0),
            3 | 5 => (self.varint()?, self.varint()?, self.address()?),
            4 => (self.address()?, self.varint()?, self.address()?),
            6 => (self.varint()?, 0, 0),
            7 => (0, 0, 0),
            other => return Err(format!("has kind {other}, which no recorder writes")),
        };
        Ok((kind, self.tid, a, b, result))
    }

    fn varint(&mut self) -> Result<u64, String> {
        let mut value = 0u64;
        for (i, &byte) in self.data.iter().enumerate().take(10) {
            value |= u64::from(byte & 0x7f) << (7 * i);
            if byte & 0x80 == 0 {
                self.data = &self.data[i + 1..];
                return Ok(value);
            }
        }
        Err("is cut short".into())
    }

    fn address(&mut self) -> Result<u64, String> {
        let zigzag = self.varint()?;
        let delta = (zigzag >> 1) as i64 ^ -((zigzag & 1) as i64);
        let address = self.last.wrapping_add(delta as u64);
        if address != 0 {
            self.last = address;
        }
        Ok(address)
    }
}

/// The thread each block was allocated on.
fn owners(threads: &[Vec<Step>], blocks: usize) -> Vec<usize> {
    let mut owner = vec![0; blocks];
    for (t, steps) in threads.iter().enumerate() {
        for step in steps {
            if let Step::Alloc { block, .. } = step {
                owner[*block] = t;
            }
        }
    }
    owner
}

/// Writes records in the format, as the recorder does: for a trace made
/// by hand (tests, tools). Records are `(kind, thread, a, b, result)`, the
/// recorder's `add` arguments.
pub struct Writer {
    /// The file's bytes so far.
    pub out: Vec<u8>,
    tid: u32,
    last: u64,
}

impl Default for Writer {
    fn default() -> Writer {
        Writer::new()
    }
}

impl Writer {
    pub fn new() -> Writer {
        Writer {
            out: HEADER.to_vec(),
            tid: 0,
            last: 0,
        }
    }

    fn put(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.out.push(v as u8 | 0x80);
            v >>= 7;
        }
        self.out.push(v as u8);
    }

    fn address(&mut self, address: u64) {
        let delta = address.wrapping_sub(self.last) as i64;
        self.put(((delta << 1) ^ (delta >> 63)) as u64);
        if address != 0 {
            self.last = address;
        }
    }

    pub fn record(&mut self, kind: u32, thread: u32, a: u64, b: u64, result: u64) -> &mut Self {
        let new = thread != self.tid;
        self.out.push(kind as u8 | if new { NEW_THREAD } else { 0 });
        if new {
            self.put(thread.into());
            self.tid = thread;
        }
        match kind {
            1 => {
                self.put(a);
                self.address(result);
            }
            2 => self.address(a),
            3 | 5 => {
                self.put(a);
                self.put(b);
                self.address(result);
            }
            4 => {
                self.address(a);
                self.put(b);
                self.address(result);
            }
            6 => self.put(a),
            _ => {}
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_become_blocks_and_threads_keep_their_order() {
        let data = Writer::new()
            .record(1, 100, 24, 0, 0x1000) // malloc(24) on 100 = block 0
            .record(2, 200, 0x1000, 0, 0) // freed on 200
            .record(1, 200, 40, 0, 0x1000) // the address again: block 1
            .record(4, 100, 0x1000, 80, 0x2000) // realloc'd on 100
            .record(3, 100, 4, 8, 0x3000) // calloc: block 2, zeroed
            .record(2, 100, 0x9999, 0, 0) // never handed out: skipped
            .record(6, 100, 1 << 20, 0, 0) // resident bytes
            .record(5, 200, 64, 100, 0x4000) // memalign: block 3
            .out
            .clone();
        let trace = Trace::parse(&data).unwrap();
        assert_eq!(trace.blocks, 4);
        assert_eq!((trace.calls, trace.skipped), (7, 1));
        let mark = Mark {
            calls: 6,
            steps: 5,
            bytes: 1 << 20,
        };
        assert_eq!(trace.resident, [mark]);
        let alloc = |block, size, align, zeroed| Step::Alloc {
            block,
            size,
            align,
            zeroed,
        };
        assert_eq!(
            trace.threads[0],
            [
                alloc(0, 24, 16, false),
                Step::Realloc { block: 1, size: 80 },
                alloc(2, 32, 16, true),
                Step::Free { block: 2 },
            ]
        );
        assert_eq!(
            trace.threads[1],
            [
                Step::Free { block: 0 },
                alloc(1, 40, 16, false),
                alloc(3, 100, 64, false),
                Step::Free { block: 1 },
                Step::Free { block: 3 },
            ]
        );
    }

    #[test]
    fn a_file_that_is_not_a_trace_says_so() {
        let e = Trace::parse(b"target alloc_ops\n").unwrap_err();
        assert!(e.contains("allocsoak trace record"), "{e}");
        let e = Trace::parse(b"allocsoak-trace1").unwrap_err();
        assert!(e.contains("older trace format"), "{e}");
        // malloc on thread 1, its size missing.
        let e = Trace::parse(&[HEADER.as_slice(), &[0x09, 1]].concat()).unwrap_err();
        assert_eq!(e, "record 0 is cut short: the file is damaged");
        let e = Trace::parse(&[HEADER.as_slice(), &[0x08, 1]].concat()).unwrap_err();
        assert_eq!(
            e,
            "record 0 has kind 0, which no recorder writes: the file is damaged"
        );
    }
}
