//! A recorded program's allocations (`allocsoak trace record`'s files,
//! written by `soak/src/tools/trace_record.c`), read into what a replay
//! runs: each recorded thread's calls in its order, with every address
//! turned into the block it named at that point of the recording (an
//! address is reused; a block is not).
//!
//! A file is a 16-byte header, `allocsoak-trace1`, then 32-byte records
//! (little-endian `u32` kind, `u32` thread, `u64` a, `u64` b, `u64`
//! result), in the order the calls took effect.

use std::collections::HashMap;

/// The file's first 16 bytes.
pub const HEADER: &[u8; 16] = b"allocsoak-trace1";
const RECORD: usize = 32;
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
    /// The recorded program's resident bytes, after this many calls.
    pub resident: Vec<(usize, u64)>,
    /// Whether the recorder stopped at its size cap.
    pub truncated: bool,
}

/// Malloc's alignment on the recording's machine (x86-64 glibc).
const MALLOC_ALIGN: usize = 16;

impl Trace {
    /// Reads a trace file's bytes; `Err` says what is wrong with them.
    pub fn parse(data: &[u8]) -> Result<Trace, String> {
        let body = data
            .strip_prefix(HEADER.as_slice())
            .ok_or("not an allocsoak trace (its first bytes are not `allocsoak-trace1`); record one with `allocsoak trace record`")?;
        let mut trace = Trace::default();
        // The block each live address is, and which replay thread each
        // recorded thread is.
        let mut live: HashMap<u64, usize> = HashMap::new();
        let mut threads: HashMap<u32, usize> = HashMap::new();
        for record in body.chunks_exact(RECORD) {
            let word = |at: usize| u64::from_le_bytes(record[at..at + 8].try_into().unwrap());
            let kind = u32::from_le_bytes(record[0..4].try_into().unwrap());
            let tid = u32::from_le_bytes(record[4..8].try_into().unwrap());
            let (a, b, result) = (word(8), word(16), word(24));
            let next = threads.len();
            let t = *threads.entry(tid).or_insert(next % MAX_THREADS);
            if trace.threads.len() <= t {
                trace.threads.resize(t + 1, Vec::new());
            }
            let fresh = |trace: &mut Trace,
                         live: &mut HashMap<u64, usize>,
                         size: u64,
                         align: usize,
                         zeroed: bool| {
                let (Ok(size), false) = (usize::try_from(size), result == 0 || size == 0) else {
                    trace.skipped += 1;
                    return;
                };
                let block = trace.blocks;
                trace.blocks += 1;
                live.insert(result, block);
                trace.threads[t].push(Step::Alloc {
                    block,
                    size,
                    align,
                    zeroed,
                });
            };
            match kind {
                1 => {
                    trace.calls += 1;
                    fresh(&mut trace, &mut live, a, MALLOC_ALIGN, false)
                }
                3 => {
                    trace.calls += 1;
                    fresh(
                        &mut trace,
                        &mut live,
                        a.saturating_mul(b),
                        MALLOC_ALIGN,
                        true,
                    )
                }
                5 => {
                    trace.calls += 1;
                    let align = usize::try_from(a).unwrap_or(0).max(MALLOC_ALIGN);
                    match align.is_power_of_two() {
                        true => fresh(&mut trace, &mut live, b, align, false),
                        false => trace.skipped += 1,
                    }
                }
                2 => {
                    trace.calls += 1;
                    match live.remove(&a) {
                        Some(block) => trace.threads[t].push(Step::Free { block }),
                        None => trace.skipped += 1,
                    }
                }
                4 => {
                    trace.calls += 1;
                    match (a, live.get(&a).copied()) {
                        // realloc(NULL, n) is malloc(n).
                        (0, _) => fresh(&mut trace, &mut live, b, MALLOC_ALIGN, false),
                        (_, None) => trace.skipped += 1,
                        // A failed realloc leaves the block as it was.
                        _ if result == 0 && b != 0 => trace.skipped += 1,
                        // realloc(p, 0) frees p (glibc).
                        (_, Some(block)) if b == 0 => {
                            live.remove(&a);
                            trace.threads[t].push(Step::Free { block });
                        }
                        (_, Some(block)) => {
                            live.remove(&a);
                            live.insert(result, block);
                            trace.threads[t].push(Step::Realloc {
                                block,
                                size: b as usize,
                            });
                        }
                    }
                }
                6 => trace.resident.push((trace.calls, a)),
                7 => trace.truncated = true,
                other => {
                    return Err(format!(
                        "record {} has kind {other}, which no recorder writes: the file is damaged",
                        trace.calls + trace.resident.len()
                    ))
                }
            }
        }
        // Blocks the program never freed are freed at the replay's end, on
        // the thread that made them (in `Trace::threads` order).
        let mut left: Vec<(usize, u64)> = live.into_iter().map(|(p, b)| (b, p)).collect();
        left.sort_unstable();
        let owner = owners(&trace.threads, trace.blocks);
        for (block, _) in left {
            trace.threads[owner[block]].push(Step::Free { block });
        }
        Ok(trace)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: u32, thread: u32, a: u64, b: u64, result: u64) -> Vec<u8> {
        [
            &kind.to_le_bytes()[..],
            &thread.to_le_bytes(),
            &a.to_le_bytes(),
            &b.to_le_bytes(),
            &result.to_le_bytes(),
        ]
        .concat()
    }

    #[test]
    fn addresses_become_blocks_and_threads_keep_their_order() {
        let data = [
            HEADER.to_vec(),
            record(1, 100, 24, 0, 0x1000), // malloc(24) on 100 = block 0
            record(2, 200, 0x1000, 0, 0),  // freed on 200
            record(1, 200, 40, 0, 0x1000), // the address again: block 1
            record(4, 100, 0x1000, 80, 0x2000), // realloc'd on 100
            record(3, 100, 4, 8, 0x3000),  // calloc: block 2, zeroed
            record(2, 100, 0x9999, 0, 0),  // never handed out: skipped
            record(6, 100, 1 << 20, 0, 0), // resident bytes
            record(5, 200, 64, 100, 0x4000), // memalign: block 3
        ]
        .concat();
        let trace = Trace::parse(&data).unwrap();
        assert_eq!(trace.blocks, 4);
        assert_eq!((trace.calls, trace.skipped), (7, 1));
        assert_eq!(trace.resident, [(6, 1 << 20)]);
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
        let e = Trace::parse(&[HEADER.to_vec(), record(99, 1, 0, 0, 0)].concat()).unwrap_err();
        assert!(e.contains("damaged"), "{e}");
    }
}
