//! Simpler forms of one op, for minimizing a failing program op by op
//! (as syzkaller minimizes a call's arguments once the calls are few).
//! An op is simplified as it reads: one `key=value` of its text at a
//! time, or one flag dropped, then parsed back.

use super::Op;
use crate::edges::IMPOSSIBLE_FROM;

/// Size-class edges a size shrinks toward, smallest first.
const SIZE_EDGES: [usize; 14] = [
    1,
    8,
    16,
    64,
    256,
    1 << 10,
    4 << 10,
    16 << 10,
    64 << 10,
    256 << 10,
    1 << 20,
    4 << 20,
    64 << 20,
    1 << 32,
];

impl Op {
    /// Simpler forms of this op, the simplest first, each differing in one
    /// field: a smaller size (a class edge, or the power of two below it),
    /// a smaller alignment, count or `extra`, the newest block or slot 0,
    /// heap and worker 0, the forward order, an immediate purge, a flag
    /// (`zeroed`, `force`, `restart`) dropped. An impossible size stays: it
    /// is the request.
    pub fn simpler(&self) -> Vec<Op> {
        let text = self.to_string();
        let words: Vec<&str> = text.split_whitespace().collect();
        let mut out = Vec::new();
        for (i, word) in words.iter().enumerate().skip(1) {
            let forms = match word.split_once('=') {
                Some((key, value)) => simpler_values(key, value)
                    .into_iter()
                    .map(|v| format!("{key}={v}"))
                    .collect(),
                None => vec![String::new()],
            };
            for form in forms {
                let mut changed = words.clone();
                changed[i] = &form;
                if let Ok(op) = super::text::parse_op(&changed.join(" ")) {
                    if op != *self && !out.contains(&op) {
                        out.push(op);
                    }
                }
            }
        }
        out
    }
}

/// Simpler values for one field of an op's text, simplest first.
fn simpler_values(key: &str, value: &str) -> Vec<String> {
    let number = value.parse::<usize>().ok();
    let numbers = |all: Vec<usize>| all.iter().map(usize::to_string).collect();
    match (key, number) {
        ("size" | "to", Some(n)) => numbers(smaller_sizes(n)),
        ("align", Some(n)) => numbers(smaller_aligns(n)),
        // A workload's: fewer threads, calls and blocks, the first seed.
        ("count" | "threads" | "ops" | "slots", Some(n)) => numbers(smaller_counts(n)),
        ("seed", Some(n)) if n > 0 => vec!["0".into()],
        ("sizes", _) => narrower_sizes(value),
        ("extra" | "heap" | "worker" | "freer" | "owner", Some(n)) if n > 0 => vec!["0".into()],
        // Each step is simpler, so a search never cycles: a slot merges
        // into the newest block (half of all decoded slots) or slot 0.
        ("slot", Some(0)) => vec!["newest".into()],
        ("slot", Some(_)) => vec!["newest".into(), "0".into()],
        ("order", _) if value != "forward" => vec!["forward".into()],
        ("delay", _) if value != "now" => vec!["now".into()],
        _ => Vec::new(),
    }
}

/// Sizes below `size` to try, smallest first: the class edges below it and
/// the power of two just below it. None for an impossible size.
fn smaller_sizes(size: usize) -> Vec<usize> {
    if size >= IMPOSSIBLE_FROM {
        return Vec::new();
    }
    let below = 1usize << size.max(2).ilog2();
    let mut out: Vec<usize> = SIZE_EDGES.iter().copied().filter(|&s| s < size).collect();
    if below < size && !out.contains(&below) {
        out.push(below);
    }
    out.sort_unstable();
    out
}

/// Alignments below `align`, smallest first (1 is the natural alignment).
fn smaller_aligns(align: usize) -> Vec<usize> {
    [1, 16, 4096, align / 2]
        .into_iter()
        .filter(|&a| a < align && a.is_power_of_two())
        .collect()
}

/// Narrower ranges inside a workload's `sizes=MIN..MAX`: one size at
/// either end, then either half.
fn narrower_sizes(value: &str) -> Vec<String> {
    let Some((min, max)) = value.split_once("..") else {
        return Vec::new();
    };
    let (Ok(min), Ok(max)) = (min.parse::<usize>(), max.parse::<usize>()) else {
        return Vec::new();
    };
    let mid = min + (max - min) / 2;
    [(min, min), (max, max), (min, mid), (mid + 1, max)]
        .into_iter()
        .filter(|&(a, b)| a <= b && (a, b) != (min, max))
        .map(|(a, b)| format!("{a}..{b}"))
        .collect()
}

/// Counts below `count`, smallest first.
fn smaller_counts(count: usize) -> Vec<usize> {
    let mut out: Vec<usize> = [1, 2, 16, count / 2]
        .into_iter()
        .filter(|&c| c > 0 && c < count)
        .collect();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ops(text: &str) -> Vec<String> {
        let program: crate::op::Program = format!("target mt_ops\n{text}\n").parse().unwrap();
        program.ops[0].simpler().iter().map(Op::to_string).collect()
    }

    #[test]
    fn sizes_shrink_to_class_edges_and_keep_impossible_ones() {
        assert_eq!(
            ops("alloc size=300 align=32 zeroed"),
            [
                "alloc size=1 align=32 zeroed",
                "alloc size=8 align=32 zeroed",
                "alloc size=16 align=32 zeroed",
                "alloc size=64 align=32 zeroed",
                "alloc size=256 align=32 zeroed",
                "alloc size=300 align=1 zeroed",
                "alloc size=300 align=16 zeroed",
                "alloc size=300 align=32",
            ]
        );
        let huge = format!("alloc size={} align=8", usize::MAX);
        assert_eq!(
            ops(&huge),
            [
                format!("alloc size={} align=1", usize::MAX),
                format!("alloc size={} align=4", usize::MAX)
            ]
        );
    }

    #[test]
    fn slots_workers_and_orders_simplify() {
        assert_eq!(
            ops("bulk-free slot=3 count=4 order=alternate"),
            [
                "bulk-free slot=newest count=4 order=alternate",
                "bulk-free slot=0 count=4 order=alternate",
                "bulk-free slot=3 count=1 order=alternate",
                "bulk-free slot=3 count=2 order=alternate",
                "bulk-free slot=3 count=4 order=forward",
            ]
        );
        assert_eq!(
            ops("worker-realloc worker=2 slot=newest to=100"),
            [
                "worker-realloc worker=0 slot=newest to=100",
                "worker-realloc worker=2 slot=newest to=1",
                "worker-realloc worker=2 slot=newest to=8",
                "worker-realloc worker=2 slot=newest to=16",
                "worker-realloc worker=2 slot=newest to=64",
            ]
        );
        assert!(ops("free-null").is_empty());
        assert_eq!(ops("free slot=0"), ["free slot=newest"]);
        assert!(ops("free slot=newest").is_empty());
    }

    #[test]
    fn a_workload_gets_fewer_threads_calls_blocks_and_sizes() {
        let line = "workload kind=larson threads=4 ops=4000 slots=64 sizes=8..64 seed=9";
        let simpler = ops(line);
        for form in [
            "workload kind=larson threads=1 ops=4000 slots=64 sizes=8..64 seed=9",
            "workload kind=larson threads=4 ops=2000 slots=64 sizes=8..64 seed=9",
            "workload kind=larson threads=4 ops=4000 slots=32 sizes=8..64 seed=9",
            "workload kind=larson threads=4 ops=4000 slots=64 sizes=8..8 seed=9",
            "workload kind=larson threads=4 ops=4000 slots=64 sizes=37..64 seed=9",
            "workload kind=larson threads=4 ops=4000 slots=64 sizes=8..64 seed=0",
        ] {
            assert!(simpler.iter().any(|s| s == form), "{form} in {simpler:?}");
        }
        assert!(simpler
            .iter()
            .all(|s| s.starts_with("workload kind=larson")));
    }
}
