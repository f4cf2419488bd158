//! A crash group's page, `crashes/<id>/REPORT.md`: what it is, how to
//! reproduce it, where it fails and the programs, written from the store
//! and the group's folder (by intake when it files a crash, and by
//! `triage verify` when a status changes). An `rss-drift` group's page is
//! its own ([`drift_page`]): the fit its finding kept in `drift.toml`
//! ([`DriftFile`]), its chart and its culprits.

use std::fmt::Write;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use crate::foundation::state::{self, StateDir};
use crate::foundation::store::{utc, GroupRow, SlotRow, Store};
use crate::pipeline::record::GroupFile;

/// What the finding's fit said, kept in `drift.toml`.
#[derive(Serialize, Deserialize)]
pub struct DriftFile {
    /// `fit`, or `rss-limit` for a process that went over its limit.
    pub why: String,
    pub slope_bytes_per_kop: f64,
    pub lower: f64,
    pub upper: f64,
    pub mk_p: f64,
    pub points: usize,
    pub ops: u64,
    /// KiB of growth within one process the interval vouches for
    /// (`drift::Trend::growth`); absent in findings filed before it was.
    #[serde(default)]
    pub growth_kib: f64,
    pub threshold: f64,
    pub rss_limit_mb: u64,
    /// What narrowing did (`967 programs to 2 in 81 s (23 replays)`).
    pub narrowed: String,
}

/// Writes `crashes/<id>/REPORT.md` from the store and the folder.
pub fn write_report(state: &StateDir, store: &Store, g: &GroupRow) -> Result<()> {
    let dir = state.crash_group(&g.id);
    let slot = store.slot_by_id(g.slot_id)?;
    if g.kind == "rss-drift" {
        let series = format!("{}/{}", slot.target, slot.allocator);
        let text = drift_page(state, g, &series)?;
        return state::write_atomic(&dir.join("REPORT.md"), text.as_bytes());
    }
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap_or_default();
    let log = read("replay.log");
    let stack = where_failed(g, &slot.engine, &log);
    let variants = variants_table(store, &g.id)?;
    let program = read("program.txt");
    let inputs = crate::foundation::state::count_files(&dir.join("inputs"))?;
    let record = toml::from_str::<GroupFile>(&read("group.toml")).ok();
    let history = record.as_ref().map_or(0, |g| g.history);
    let page = Page {
        g,
        slot: &slot,
        what: what_failed(&log, &g.title),
        stack,
        variants,
        which: program_heading(history, g.minimized.is_some()),
        program,
        inputs,
        raised_by: raised_by(g),
        bisected: bisected_rows(store, &g.id)?,
        recorded: recorded_rows(record.as_ref()),
    };
    state::write_atomic(&dir.join("REPORT.md"), page.text().as_bytes())
}

/// A crash group's page, each part as it is printed.
struct Page<'a> {
    g: &'a GroupRow,
    slot: &'a SlotRow,
    /// The replay's line that says what failed.
    what: &'a str,
    /// Where it failed (`## Where`).
    stack: String,
    /// The `## Variants` section, empty when none was recorded.
    variants: String,
    /// The program's heading, and its text.
    which: String,
    program: String,
    /// The raw inputs with this signature beside the original.
    inputs: usize,
    /// The table's rows that are there only for some groups, each a line
    /// or empty: who raised it, what bisect found, what `group.toml` says.
    raised_by: String,
    bisected: String,
    recorded: String,
}

impl Page<'_> {
    /// The page's Markdown.
    fn text(&self) -> String {
        let (g, slot) = (self.g, self.slot);
        format!(
            "# {title}\n\n\
             | | |\n| --- | --- |\n\
             | kind | `{kind}` |\n\
             | signature | `{sig}` |\n\
             | group | `{id}` |\n\
             | slot | {target} / {allocator} / {engine} |\n\
             {raised_by}\
             | first seen | {first} |\n\
             | last seen | {last} |\n\
             | count | {count} |\n\
             | status | {status} |\n\
             {bisected}{recorded}\n\
             ## Reproduce\n\n```sh\n{repro}\n```\n\n\
             ## What\n\n```text\n{what}\n```\n\n\
             ## Where\n\n```text\n{stack}\n```\n\n\
             {variants}\
             ## {which}\n\n```text\n{program}```\n\n\
             ## Files\n\n\
             - `original`: the input the fuzzer wrote; `minimized`: the minimized program as text (when a smaller program fails the same way)\n\
             - `program.txt`, `stack.txt`, `replay.log` (the replay the above is read from; Miri's output for a Miri group), `engine.log`\n\
             - `history/`: the inputs replayed before `original`, in order, in one process (only for a crash that needs them)\n\
             - `inputs/`: {inputs} more raw inputs with this signature\n",
            title = g.title,
            kind = g.kind,
            sig = g.signature.replace('\n', " · "),
            id = g.id,
            target = slot.target,
            allocator = slot.allocator,
            engine = slot.engine,
            raised_by = self.raised_by,
            first = utc(g.first_seen),
            last = utc(g.last_seen),
            count = g.count,
            status = g.status,
            bisected = self.bisected,
            recorded = self.recorded,
            repro = g.repro,
            what = self.what,
            stack = self.stack,
            variants = self.variants,
            which = self.which,
            program = self.program,
            inputs = self.inputs,
        )
    }
}

/// The line of the replay's log that says what failed, else the group's
/// title; trimmed.
fn what_failed<'a>(log: &'a str, title: &'a str) -> &'a str {
    log.lines()
        .find(|l| {
            l.contains("allocsoak violation:")
                || l.contains("ERROR: ")
                || l.starts_with("error: ")
                || l.contains("Assertion")
                || l.contains("assertion")
        })
        .unwrap_or(title)
        .trim()
}

/// Where the group's bug is, from the replay's `log` of a slot of
/// `engine`. A code path's group: the allocator functions the failing op
/// ran, or the one whose store broke a byte, or that computed a value it
/// answered wrong (`shadow::writer`). Else the frames inside the harness
/// and the allocator; stack.txt has all.
fn where_failed(g: &GroupRow, engine: &str, log: &str) -> String {
    let signature = g.signature();
    match signature.as_ref().filter(|s| s.path) {
        // Miri's report: its error, the span and the backtrace it printed.
        _ if engine == "miri" => miri_report(log),
        Some(s) => format!(
            "the allocator's functions the failing op ran, or for a byte it broke the one whose \
             store broke it, or for a value it answered wrong the one that computed it (its \
             path, which the group keys on):\n{}",
            s.frames.join("\n")
        ),
        None => report::stack(log)
            .iter()
            .filter(|f| !f.is_noise())
            .take(12)
            .map(|f| f.to_string())
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

/// The rows `group.toml` adds to the table, each a line when it says so:
/// how often a racing program reproduces, the history the crash needs,
/// what minimizing did.
fn recorded_rows(record: Option<&GroupFile>) -> String {
    let race = record
        .and_then(|g| g.race_rate.as_ref())
        .map_or_else(String::new, |rate| {
            format!(
                "| reproduces | {rate} (its program races threads: replay it several times; `ALLOCSOAK_SERIAL_RACES=1` before the command runs its sections one worker at a time) |\n"
            )
        });
    let history = record.map_or(0, |g| g.history);
    let needs = if history > 0 {
        let shrunk = record
            .and_then(|g| g.history_shrunk.as_ref())
            .map_or_else(String::new, |s| format!("; shrunk from {s}"));
        format!("| needs its history | the {history} input(s) in `history/`, replayed before it in one process (alone it does not crash){shrunk} |\n")
    } else {
        String::new()
    };
    let minimized = record
        .and_then(|g| g.minimized_ops.as_ref())
        .map_or_else(String::new, |m| format!("| minimized | {m} |\n"));
    format!("{race}{needs}{minimized}")
}

/// The `raised by` row, for a violation the reference side of
/// diff_mimalloc raised: the reference's bug, found on this slot. Empty
/// otherwise.
fn raised_by(g: &GroupRow) -> String {
    report::key::reference_of(&g.signature).map_or_else(String::new, |r| {
        format!("| raised by | the reference allocator `{r}`, not the allocator under test |\n")
    })
}

/// A row per commit `allocsoak bisect` found in the allocator's
/// repository for group `id`: the one that caused it, or fixed it.
fn bisected_rows(store: &Store, id: &str) -> Result<String> {
    Ok(store
        .bisections(id)?
        .iter()
        .map(|b| {
            format!(
                "| {} | `{}` {} ({} builds, {} skipped; `allocsoak bisect`) |\n",
                if b.direction == "fix" {
                    "fixed by"
                } else {
                    "caused by"
                },
                b.commit,
                b.subject,
                b.builds,
                b.skipped
            )
        })
        .collect())
}

/// The program section's heading: a minimized program, the original
/// input, or `history` inputs before the crash input.
fn program_heading(history: usize, minimized: bool) -> String {
    match (history, minimized) {
        (0, true) => "Program (minimized)".to_string(),
        (0, false) => "Program (original input)".to_string(),
        (n, _) => format!("Programs ({n} from history/, then the crash input, in one process)"),
    }
}

/// Miri's report in `log`: from its first `error:` line, at most 40 lines.
fn miri_report(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    let from = lines
        .iter()
        .position(|l| l.starts_with("error"))
        .unwrap_or(0);
    lines[from..]
        .iter()
        .take(40)
        .copied()
        .collect::<Vec<_>>()
        .join("\n")
}

/// The ways the group's bug was reached, as a Markdown section (empty
/// when none was recorded): the allocator call with the block's size and
/// alignment tiers, the target, how often, and the first input.
fn variants_table(store: &Store, id: &str) -> Result<String> {
    let rows = store.variants(id)?;
    if rows.is_empty() {
        return Ok(String::new());
    }
    let mut text = format!(
        "## Variants\n\n{} way(s) to this bug: one group, whichever call, size tier or target reached it.\n\n\
         | call and tiers | target | count | first input |\n| --- | --- | ---: | --- |\n",
        rows.len()
    );
    for v in rows {
        text.push_str(&format!(
            "| `{}` | {} | {} | `{}` |\n",
            v.site, v.target, v.count, v.first_input
        ));
    }
    text.push('\n');
    Ok(text)
}

/// `crashes/<id>/REPORT.md` of an `rss-drift` group.
pub fn drift_page(state: &StateDir, g: &GroupRow, series: &str) -> Result<String> {
    let dir = state.crash_group(&g.id);
    let fit: Option<DriftFile> = std::fs::read_to_string(dir.join("drift.toml"))
        .ok()
        .and_then(|t| toml::from_str(&t).ok());
    let culprits = state::count_files(&dir.join("culprits"))?;
    let mut out = String::new();
    writeln!(out, "# {}\n", g.title)?;
    writeln!(out, "| | |\n|---|---|")?;
    writeln!(
        out,
        "| kind | rss-drift: retained memory (anonymous resident bytes minus live bytes) grows with ops |"
    )?;
    writeln!(
        out,
        "| series | `{series}` (workload / allocator), a plain replay build |"
    )?;
    writeln!(out, "| status | {} |", g.status)?;
    writeln!(out, "| first seen | {} |", utc(g.first_seen))?;
    writeln!(
        out,
        "| last seen | {} ({} times) |",
        utc(g.last_seen),
        g.count
    )?;
    if let Some(f) = &fit {
        if f.why == "fit" {
            writeln!(
                out,
                "| growth | {:.0} bytes per 1,000 ops (95% interval {:.0} to {:.0}; line {:.0}), Mann–Kendall p = {:.2e}, over {} points and {} ops after warm-up; at least {:.0} KiB within one process |",
                f.slope_bytes_per_kop, f.lower, f.upper, f.threshold, f.mk_p, f.points, f.ops, f.growth_kib
            )?;
        } else {
            writeln!(
                out,
                "| growth | the replay went over {} MiB resident (`rss_limit_mb`) |",
                f.rss_limit_mb
            )?;
        }
        writeln!(
            out,
            "| culprits | {culprits} programs in `culprits/` ({}) |",
            f.narrowed
        )?;
    }
    writeln!(out, "\n## Reproduce\n\n```sh\n{}\n```\n", g.repro)?;
    writeln!(
        out,
        "It replays `culprits/` in a loop in a fresh process, prints the growth it measures and exits 1 while memory drifts.\n"
    )?;
    writeln!(
        out,
        "## Retained memory\n\n![retained memory against time](chart.svg)\n"
    )?;
    writeln!(
        out,
        "Every reading is in `series.csv` (older ones thinned to minute and hour buckets)."
    )?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bug_of_the_reference_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::open_for_soak(&dir.path().join("state")).unwrap();
        let store = Store::open(&state.store()).unwrap();
        let slot = store
            .slot("diff_mimalloc", "zoo:x", "libfuzzer", 1.0)
            .unwrap();
        let key = "overlap in alloc size 0..64 align ..16: block N+N overlaps live block N+N";
        let page = |id: &str, signature: String| {
            let g = GroupRow {
                id: id.into(),
                signature,
                kind: "overlap".into(),
                title: key.into(),
                tolerance_key: Some(key.into()),
                slot_id: slot.id,
                first_seen: 0,
                last_seen: 0,
                count: 1,
                status: "new".into(),
                minimized: None,
                repro: String::new(),
                path: false,
                alt_titles: Vec::new(),
            };
            std::fs::create_dir_all(state.crash_group(id)).unwrap();
            write_report(&state, &store, &g).unwrap();
            std::fs::read_to_string(state.crash_group(id).join("REPORT.md")).unwrap()
        };
        let reference = page(
            "a",
            format!("overlap\n{key} [reference allocator mimalloc]"),
        );
        assert!(
            reference.contains(
                "| raised by | the reference allocator `mimalloc`, not the allocator under test |"
            ),
            "{reference}"
        );
        let own = page("b", format!("overlap\n{key}"));
        assert!(!own.contains("raised by"), "{own}");
    }
}
