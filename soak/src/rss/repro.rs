//! `allocsoak repro <group>` for an `rss-drift` group: its culprit
//! programs replayed in a loop in a fresh process, the growth measured.

use anyhow::Result;
use drift::Verdict;

use super::narrow::measure;
use crate::engines::project::Project;
use crate::foundation::config::Config;
use crate::pipeline::groups::Group;

/// The replay of the group's `culprits/`.
fn command(project: &Project, config: &Config, group: &Group) -> std::process::Command {
    let slot = &group.slot;
    let mut cmd = std::process::Command::new(project.drift_binary());
    cmd.args(["--allocator", &slot.allocator]);
    // A trace series' slot is `trace:<file>`, and its culprit the trace.
    match slot
        .target
        .starts_with(crate::foundation::config::TRACE_SLOT)
    {
        true => cmd.arg("--trace"),
        false => cmd.args(["--target", &slot.target]),
    };
    cmd.arg(format!("--rss-limit-mb={}", config.drift.rss_limit_mb))
        .arg(group.dir.join("culprits"));
    cmd
}

/// Whether the group's culprits still drift, measured as narrowing did.
pub fn drifts(project: &Project, config: &Config, group: &Group) -> Result<bool> {
    let cmd = command(project, config, group);
    let ops = config.drift.replay_ops(&group.slot.target);
    Ok(measure(cmd, ops, config.drift.threshold, None)?.drifts)
}

/// Replays the group's `culprits/` for `ops` ops; prints the readings'
/// ends and the growth. True while memory still drifts.
pub fn replay(project: &Project, config: &Config, group: &Group, ops: u64) -> Result<bool> {
    let culprits = group.dir.join("culprits");
    let slot = &group.slot;
    let cmd = command(project, config, group);
    println!(
        "replaying {} on {} ({}) for {ops} ops: {}",
        culprits.display(),
        slot.allocator,
        slot.target,
        project.drift_binary().display()
    );
    let m = measure(cmd, ops, config.drift.threshold, None)?;
    if let (Some(first), Some(last)) = (m.readings.first(), m.readings.last()) {
        println!(
            "readings: {} over {} ops; resident {:.1} MiB -> {:.1} MiB",
            m.readings.len(),
            last.ops,
            first.rss as f64 / (1 << 20) as f64,
            last.rss as f64 / (1 << 20) as f64
        );
    }
    let t = &m.trend;
    if t.points > 0 {
        println!(
            "growth: {:.1} bytes per 1,000 ops (95% interval {:.1} to {:.1}; line {}) over {} points",
            t.slope_bytes_per_kop, t.lower, t.upper, config.drift.threshold, t.points
        );
    } else {
        println!("growth: no fit (too few readings past the warm-up)");
    }
    if m.over_limit {
        println!(
            "the replay went over {} MiB resident",
            config.drift.rss_limit_mb
        );
    }
    println!(
        "verdict: {}",
        match (m.drifts, &t.verdict) {
            (true, _) => "drifts (reproduced)",
            (false, Verdict::TooFewSamples) => "too few readings (not reproduced)",
            (false, _) => "flat (not reproduced)",
        }
    );
    Ok(m.drifts)
}
