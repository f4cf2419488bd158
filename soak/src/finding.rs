//! What an engine run found, read off its log.

/// The kind of the first finding in an engine log: the violation kind
/// (`allocsoak violation: <kind>:`), else the sanitizer's error type
/// (`heap-use-after-free`, `leak`), else `assertion` when the allocator's
/// own assert fired (mimalloc's or C's), else the engine's (`timeout`,
/// `oom`, `crash`). `None` when the log reports nothing.
///
/// A violation outranks the sanitizer and engine lines it causes (a
/// violation panics, and libFuzzer then reports a deadly signal).
pub fn kind(log: &str) -> Option<String> {
    if let Some(kind) = log.lines().find_map(shadow::violation::kind_of) {
        return Some(kind.to_string());
    }
    for line in log.lines() {
        if let Some(rest) = line.split("ERROR: AddressSanitizer: ").nth(1) {
            return rest.split_whitespace().next().map(str::to_string);
        }
        if line.contains("ERROR: LeakSanitizer: detected memory leaks") {
            return Some("leak".into());
        }
        if line.contains(": assertion failed")
            || (line.contains("Assertion `") && line.contains("' failed"))
        {
            return Some("assertion".into());
        }
        if line.contains("ERROR: libFuzzer: timeout") {
            return Some("timeout".into());
        }
        if line.contains("ERROR: libFuzzer: out-of-memory") {
            return Some("oom".into());
        }
        if line.contains("ERROR: libFuzzer: deadly signal") || line.contains("panicked at") {
            return Some("crash".into());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::kind;

    #[test]
    fn violation_outranks_the_signal_it_causes() {
        let log = "thread '<unnamed>' panicked at shadow/src/executor.rs:1:1:\n\
                   allocsoak violation: overlap: op #3 `alloc size=41 align=4`: block 0x10+41 overlaps live block 0x10+41\n\
                   ==1== ERROR: libFuzzer: deadly signal\n";
        assert_eq!(kind(log).as_deref(), Some("overlap"));
    }

    #[test]
    fn sanitizer_and_engine_errors_have_kinds() {
        let uaf = "==9==ERROR: AddressSanitizer: heap-use-after-free on address 0x7b at pc 0x55\n";
        assert_eq!(kind(uaf).as_deref(), Some("heap-use-after-free"));
        assert_eq!(
            kind("==9==ERROR: LeakSanitizer: detected memory leaks\n").as_deref(),
            Some("leak")
        );
        assert_eq!(
            kind("==9== ERROR: libFuzzer: timeout after 25 seconds\n").as_deref(),
            Some("timeout")
        );
        assert_eq!(
            kind("==9== ERROR: libFuzzer: out-of-memory (used: 2100Mb)\n").as_deref(),
            Some("oom")
        );
        assert_eq!(
            kind("#1000 DONE cov: 10 ft: 20\nDone 1000 runs in 1 second(s)\n"),
            None
        );
    }

    #[test]
    fn an_allocator_assert_outranks_the_abort_it_causes() {
        let mimalloc = "mimalloc: assertion failed: at \"internal.h\":698, mi_page_set_in_full\n\
                        ==7== ERROR: libFuzzer: deadly signal\n";
        assert_eq!(kind(mimalloc).as_deref(), Some("assertion"));
        let c = "alloc_ops: arena.c:12: arena_free: Assertion `p != NULL' failed.\n";
        assert_eq!(kind(c).as_deref(), Some("assertion"));
    }
}
