//! The gate's result for people and for CI: a console summary, markdown
//! (a GitHub job summary), and JUnit XML (a test report CI systems show).
//! Each finding carries its signature, its minimized input and the
//! command that reproduces it.

use std::fmt::Write;

use anyhow::Result;
use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};

use super::{Finding, Outcome, SlotRun, Verdict};

fn headline(o: &Outcome) -> String {
    let failing = o.findings.iter().filter(|f| f.verdict.fails()).count();
    let budget = match o.runs {
        Some(n) => format!("{} s or {n} inputs per slot", o.secs_per_slot),
        None => format!("{} s per slot", o.secs_per_slot),
    };
    let verdict = if o.interrupted() {
        "INTERRUPTED".to_string()
    } else if failing == 0 {
        "passed".to_string()
    } else {
        format!(
            "FAILED, {failing} new finding{}",
            if failing == 1 { "" } else { "s" }
        )
    };
    format!(
        "allocsoak quick {verdict}: {} of {} slots ran, {budget}, {} inputs in {:.0} s",
        o.slots.len(),
        o.planned,
        o.slots.iter().map(|s| s.stats.execs).sum::<u64>(),
        o.elapsed.as_secs_f64()
    )
}

fn label(verdict: Verdict) -> &'static str {
    match verdict {
        Verdict::New => "new",
        Verdict::Regressed => "regressed (was fixed)",
        Verdict::Known { seen: true } => "known, hit in this pass",
        Verdict::Known { seen: false } => "known, still reproduces",
        Verdict::Fixed => "fixed: no longer reproduces",
        Verdict::StillFixed => "fixed, still fixed",
    }
}

fn slot_name(f: &Finding) -> String {
    format!(
        "{}/{} ({})",
        f.group.slot.target, f.group.slot.allocator, f.group.slot.engine
    )
}

/// What the console shows at the end.
pub fn text(o: &Outcome) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", headline(o));
    for f in &o.findings {
        let _ = writeln!(
            out,
            "  {} [{}] {} on {}: {}",
            f.group.row.id,
            label(f.verdict),
            f.group.row.kind,
            slot_name(f),
            f.group.row.title
        );
        if f.verdict.fails() {
            let _ = writeln!(out, "    signature: {}", one_line(&f.group.row.signature));
            let _ = writeln!(out, "    input:     {}", f.group.input().display());
            let _ = writeln!(
                out,
                "    report:    {}",
                f.group.dir.join("REPORT.md").display()
            );
            let _ = writeln!(out, "    Reproduce with: {}", f.group.row.repro);
        }
    }
    if o.findings.iter().any(|f| f.verdict == Verdict::Fixed) {
        let _ = writeln!(
            out,
            "  Groups marked fixed no longer reproduce on this build: drop them from the known groups."
        );
    }
    if o.saved_inputs > 0 {
        let _ = writeln!(out, "  {} new corpus inputs saved back", o.saved_inputs);
    }
    let _ = writeln!(out, "  run folder: {}", o.dir.display());
    out
}

/// A markdown summary (GitHub renders it as the job's summary).
pub fn markdown(o: &Outcome) -> String {
    let mut md = String::new();
    let icon = if o.passed() { "✅" } else { "❌" };
    let _ = writeln!(md, "## {icon} {}\n", headline(o));
    let failing: Vec<&Finding> = o.findings.iter().filter(|f| f.verdict.fails()).collect();
    if !failing.is_empty() {
        let _ = writeln!(md, "### New findings\n");
        for f in failing {
            let _ = writeln!(
                md,
                "#### `{}` {} on {} ({})\n",
                f.group.row.id,
                f.group.row.kind,
                slot_name(f),
                label(f.verdict)
            );
            let _ = writeln!(md, "{}\n", escape(&f.group.row.title));
            let _ = writeln!(
                md,
                "- signature: `{}`",
                one_line(&f.group.row.signature).replace('`', "'")
            );
            let _ = writeln!(md, "- minimized input: `{}`", f.group.input().display());
            let _ = writeln!(
                md,
                "- report: `{}`",
                f.group.dir.join("REPORT.md").display()
            );
            let _ = writeln!(
                md,
                "\nReproduce with:\n\n```sh\n{}\n```\n",
                f.group.row.repro
            );
            if let Some(program) = f.program() {
                let _ = writeln!(
                    md,
                    "<details><summary>program</summary>\n\n```text\n{}\n```\n\n</details>\n",
                    program.trim_end()
                );
            }
        }
    }
    let others: Vec<&Finding> = o.findings.iter().filter(|f| !f.verdict.fails()).collect();
    if !others.is_empty() {
        let _ = writeln!(md, "### Known groups\n");
        let _ = writeln!(md, "| group | kind | slot | now |\n|---|---|---|---|");
        for f in others {
            let _ = writeln!(
                md,
                "| `{}` | {} | {} | {} |",
                f.group.row.id,
                f.group.row.kind,
                slot_name(f),
                label(f.verdict)
            );
        }
        let _ = writeln!(md);
    }
    let _ = writeln!(md, "### Slots\n");
    let _ = writeln!(
        md,
        "| target | allocator | engine | inputs | exec/s | cov | ended by |\n|---|---|---|--:|--:|--:|---|"
    );
    for s in &o.slots {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {:.0} | {} | {} |",
            s.slot.target,
            s.slot.allocator,
            s.slot.engine,
            s.stats.execs,
            exec_rate(s),
            s.stats.cov,
            s.stats.outcome
        );
    }
    let _ = writeln!(md, "\nRun folder: `{}`", o.dir.display());
    md
}

/// A signature key (kind, message, frames: a line each) on one line.
fn one_line(signature: &str) -> String {
    signature.lines().collect::<Vec<_>>().join(" | ")
}

fn exec_rate(s: &SlotRun) -> f64 {
    s.stats.execs as f64 / s.stats.fuzz_secs.max(1e-3)
}

/// Markdown text without HTML: a title is a fuzz finding's words.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// JUnit XML: a test case per slot, failed by the new findings filed on
/// it; a known group's verdict (fixed, regressed) as a case of its own.
pub fn junit(o: &Outcome) -> Result<String> {
    let mut suite = TestSuite::new("allocsoak quick");
    for s in &o.slots {
        let failing: Vec<&Finding> = o
            .findings
            .iter()
            .filter(|f| f.group.slot.id == s.slot.id && f.verdict == Verdict::New)
            .collect();
        let status = if failing.is_empty() {
            TestCaseStatus::success()
        } else {
            let mut st = TestCaseStatus::non_success(NonSuccessKind::Failure);
            st.set_message(format!(
                "{} new finding{}: {}",
                failing.len(),
                if failing.len() == 1 { "" } else { "s" },
                failing
                    .iter()
                    .map(|f| f.group.row.kind.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
            .set_type(failing[0].group.row.kind.clone())
            .set_description(failing.iter().map(|f| details(f)).collect::<String>());
            st
        };
        let mut case = TestCase::new(format!("{}/{}", s.slot.target, s.slot.allocator), status);
        case.set_classname(format!("allocsoak.{}", s.slot.engine))
            .set_time(std::time::Duration::from_secs_f64(
                s.stats.fuzz_secs.max(0.0),
            ))
            .set_system_out(format!(
                "{} inputs, {:.0} exec/s, cov {}, ended by {}",
                s.stats.execs,
                exec_rate(s),
                s.stats.cov,
                s.stats.outcome
            ));
        suite.add_test_case(case);
    }
    for f in o.findings.iter().filter(|f| f.verdict != Verdict::New) {
        let status = if f.verdict.fails() {
            let mut st = TestCaseStatus::non_success(NonSuccessKind::Failure);
            st.set_message(format!("{}: {}", label(f.verdict), f.group.row.title))
                .set_type(f.group.row.kind.clone())
                .set_description(details(f));
            st
        } else {
            TestCaseStatus::success()
        };
        let mut case = TestCase::new(format!("known group {}", f.group.row.id), status);
        case.set_classname("allocsoak.known")
            .set_system_out(format!(
                "{} on {}: {}",
                label(f.verdict),
                slot_name(f),
                f.group.row.title
            ));
        suite.add_test_case(case);
    }
    let mut report = Report::new("allocsoak");
    report.add_test_suite(suite);
    Ok(report.to_string()?)
}

/// A finding's signature, input, repro command and program, as text.
fn details(f: &Finding) -> String {
    format!(
        "{} [{}] {}\nsignature: {}\nminimized input: {}\nReproduce with: {}\n{}\n",
        f.group.row.id,
        f.group.row.kind,
        f.group.row.title,
        one_line(&f.group.row.signature),
        f.group.input().display(),
        f.group.row.repro,
        f.program().unwrap_or_default()
    )
}
