//! The `workload` target's one op: a classic allocator stress program's
//! shape, with its parameters (see [`crate::executor::workload`], which
//! runs it). Decoded from fuzz bytes, printed and parsed as one line:
//!
//! ```text
//! workload kind=larson threads=4 ops=20000 slots=1000 sizes=8..1000 seed=4141
//! ```

use std::collections::HashMap;
use std::fmt;

use arbitrary::{Arbitrary, Unstructured};

/// Threads a workload runs at most.
pub const MAX_THREADS: usize = 8;
/// Allocator calls one thread makes at most.
pub const MAX_OPS: usize = 200_000;
/// Blocks one thread holds at most.
pub const MAX_SLOTS: usize = 16384;
/// The largest size a workload asks for.
pub const MAX_SIZE: usize = 1 << 20;
/// What every thread's slots may hold at once if each block were of the
/// largest size: `slots` is cut to fit.
const MAX_BYTES: usize = 256 << 20;

/// Which stress program.
#[derive(Arbitrary, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// larson's server: each thread replaces random slots of its own, and
    /// hands one freed-to-be block in eight to another thread, which
    /// checks and frees it (cross-thread frees, all the time).
    Larson,
    /// xmalloc's producer / consumer: half the threads allocate and pass
    /// every block on; the other half check and free them.
    Xmalloc,
    /// mstress / rptest: generations of threads that allocate, free half
    /// of what the generation before left, and exit owning the rest.
    Churn,
    /// Fragmentation: mixed sizes with random lifetimes, and reallocs
    /// that grow and shrink them.
    Frag,
    /// Long-lived blocks held the whole run beside bursts of short-lived
    /// ones.
    Mix,
    /// cache-scratch: each thread frees a small block another thread
    /// allocated, then allocates and rewrites blocks of its size.
    Scratch,
}

impl Kind {
    pub const ALL: [Kind; 6] = [
        Kind::Larson,
        Kind::Xmalloc,
        Kind::Churn,
        Kind::Frag,
        Kind::Mix,
        Kind::Scratch,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Larson => "larson",
            Kind::Xmalloc => "xmalloc",
            Kind::Churn => "churn",
            Kind::Frag => "frag",
            Kind::Mix => "mix",
            Kind::Scratch => "scratch",
        }
    }
}

/// A workload's parameters. Sizes are drawn log-uniformly in
/// `min..=max` (small blocks are the common ones, as in real programs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Workload {
    pub kind: Kind,
    pub threads: usize,
    /// Allocator calls per thread.
    pub ops: usize,
    /// Blocks a thread holds.
    pub slots: usize,
    pub min: usize,
    pub max: usize,
    pub seed: u64,
}

impl Workload {
    /// The same workload inside the bounds above (a parsed one that is
    /// out of them is refused instead, see [`parse`]).
    fn bounded(mut self) -> Workload {
        self.threads = self.threads.clamp(1, MAX_THREADS);
        self.ops = self.ops.clamp(1, MAX_OPS);
        self.max = self.max.clamp(1, MAX_SIZE);
        self.min = self.min.clamp(1, self.max);
        self.slots = self
            .slots
            .clamp(1, MAX_SLOTS)
            .min((MAX_BYTES / self.threads / self.max).max(1));
        self
    }
}

/// Decodes a workload from fuzz bytes: a kind, then each parameter from
/// a byte or two, spread over its range on a log scale.
pub(super) fn decode(u: &mut Unstructured) -> arbitrary::Result<Workload> {
    let kind = u.arbitrary()?;
    let threads = 1 + usize::from(u.arbitrary::<u8>()?) % MAX_THREADS;
    let ops = 1000 + usize::from(u.arbitrary::<u16>()?);
    let e = u.arbitrary::<u8>()? % 14;
    let slots = (1usize << e) + (usize::from(u.arbitrary::<u8>()?) << e) / 256;
    let min = 1usize << (u.arbitrary::<u8>()? % 13);
    let max = min << (u.arbitrary::<u8>()? % 12);
    let seed = u.arbitrary()?;
    Ok(Workload {
        kind,
        threads,
        ops,
        slots,
        min,
        max,
        seed,
    }
    .bounded())
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "workload kind={} threads={} ops={} slots={} sizes={}..{} seed={}",
            self.kind.name(),
            self.threads,
            self.ops,
            self.slots,
            self.min,
            self.max,
            self.seed
        )
    }
}

/// Parses a `workload` line's fields; a value out of its bounds is an
/// error that names the bound.
pub(super) fn parse(fields: &HashMap<&str, &str>) -> Result<Workload, String> {
    let field = |k: &str| {
        fields
            .get(k)
            .copied()
            .ok_or_else(|| format!("missing `{k}=`"))
    };
    let num = |k: &str, most: usize| -> Result<usize, String> {
        let n: usize = field(k)?
            .parse()
            .map_err(|_| format!("`{k}` is not a number"))?;
        match (1..=most).contains(&n) {
            true => Ok(n),
            false => Err(format!("`{k}={n}` is out of 1..={most}")),
        }
    };
    let kind = field("kind")?;
    let kind = Kind::ALL
        .into_iter()
        .find(|k| k.name() == kind)
        .ok_or_else(|| {
            format!(
                "unknown workload `{kind}`; expected larson, xmalloc, churn, frag, mix or scratch"
            )
        })?;
    let (min, max) = field("sizes")?
        .split_once("..")
        .ok_or("`sizes` is MIN..MAX")?;
    let size = |s: &str| -> Result<usize, String> {
        match s.parse::<usize>() {
            Ok(n) if (1..=MAX_SIZE).contains(&n) => Ok(n),
            _ => Err(format!("`sizes` takes sizes in 1..={MAX_SIZE}, not `{s}`")),
        }
    };
    let w = Workload {
        kind,
        threads: num("threads", MAX_THREADS)?,
        ops: num("ops", MAX_OPS)?,
        slots: num("slots", MAX_SLOTS)?,
        min: size(min)?,
        max: size(max)?,
        seed: field("seed")?
            .parse()
            .map_err(|_| "`seed` is not a number")?,
    };
    if w.min > w.max {
        return Err(format!("`sizes={}..{}` is empty", w.min, w.max));
    }
    if w.bounded() != w {
        return Err(format!(
            "`slots={}` holds over {} MiB at `sizes=..{}` on {} threads; ask for fewer",
            w.slots,
            MAX_BYTES >> 20,
            w.max,
            w.threads
        ));
    }
    Ok(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workload_prints_and_parses_back() {
        let line = "workload kind=larson threads=4 ops=20000 slots=1000 sizes=8..1000 seed=4141";
        let op = super::super::text::parse_op(line).unwrap();
        assert_eq!(op.to_string(), line);
    }

    #[test]
    fn a_line_out_of_bounds_is_refused_with_the_bound() {
        for (line, says) in [
            (
                "workload kind=larson threads=9 ops=1 slots=1 sizes=8..8 seed=1",
                "1..=8",
            ),
            (
                "workload kind=larson threads=8 ops=1 slots=16384 sizes=8..1048576 seed=1",
                "fewer",
            ),
            (
                "workload kind=heavy threads=1 ops=1 slots=1 sizes=8..8 seed=1",
                "larson",
            ),
            (
                "workload kind=frag threads=1 ops=1 slots=1 sizes=9..8 seed=1",
                "empty",
            ),
        ] {
            let e = super::super::text::parse_op(line).unwrap_err();
            assert!(e.contains(says), "{line}: {e}");
        }
    }

    #[test]
    fn decoded_workloads_stay_in_bounds() {
        for seed in 0..2000u32 {
            let bytes: Vec<u8> = (0..32)
                .map(|i| (seed.wrapping_mul(2654435761) >> (i % 24)) as u8 ^ i)
                .collect();
            let w = decode(&mut Unstructured::new(&bytes)).unwrap();
            assert_eq!(w.bounded(), w);
            assert!(w.threads * w.slots * w.max <= MAX_BYTES || w.slots == 1);
        }
    }
}
