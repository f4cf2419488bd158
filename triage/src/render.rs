//! Op programs as people read them: one op per line, the failing op marked.

use shadow::Program;

/// The op index a log's violation line names (`op #N`).
pub fn failing_op(log: &str) -> Option<usize> {
    log.lines().find_map(|l| {
        let rest = &l[l.find("allocsoak violation: ")?..];
        rest.split("op #")
            .nth(1)?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    })
}

/// The program text (`target` header, then one op per line), with the op
/// the log's violation names marked `# <-- op #N fails here`.
pub fn program_text(program: &Program, log: &str) -> String {
    let failing = failing_op(log);
    let mut out = String::new();
    for (i, line) in program.to_string().lines().enumerate() {
        out.push_str(line);
        // Line 0 is the header; op k is line k + 1.
        if i > 0 && failing == Some(i - 1) {
            out.push_str(&format!("    # <-- op #{} fails here", i - 1));
        }
        out.push('\n');
    }
    out
}

/// Programs replayed in order in one process: each under a header line,
/// the last (the crash input's) with its failing op marked. One program
/// renders as [`program_text`] does.
pub fn sequence_text(programs: &[Program], log: &str) -> String {
    let Some((last, before)) = programs.split_last() else {
        return String::new();
    };
    if before.is_empty() {
        return program_text(last, log);
    }
    let n = programs.len();
    let mut out = String::new();
    for (i, program) in before.iter().enumerate() {
        out.push_str(&format!("# input {} of {n}: history/{i:06}\n", i + 1));
        out.push_str(&program_text(program, ""));
        out.push('\n');
    }
    out.push_str(&format!("# input {n} of {n}: the crash input\n"));
    out.push_str(&program_text(last, log));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_failing_op_is_marked() {
        let program: Program = "target alloc_ops\nalloc size=8 align=16\nalloc size=8 align=8\n"
            .parse()
            .unwrap();
        let log = "thread panicked:\nallocsoak violation: alignment: op #1 `alloc size=8 align=8`: block 0x3 (size 8) is not aligned to 8\n";
        let text = program_text(&program, log);
        assert_eq!(
            text,
            "target alloc_ops\nalloc size=8 align=16\nalloc size=8 align=8    # <-- op #1 fails here\n"
        );
        assert_eq!(program_text(&program, "no violation"), program.to_string());
        assert_eq!(sequence_text(std::slice::from_ref(&program), log), text);
        let two = sequence_text(&[program.clone(), program], log);
        assert!(
            two.starts_with("# input 1 of 2: history/000000\ntarget alloc_ops\nalloc size=8 align=16\nalloc size=8 align=8\n\n# input 2 of 2: the crash input\n")
                && two.ends_with(&text),
            "{two}"
        );
    }
}
