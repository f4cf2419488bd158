//! An input file as the op program it decodes to, for the target it was
//! found on.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use shadow::Target;

/// The op program an input file decodes to. A recorded trace (a
/// `workload` input a trace's drift series files) is none: it has no ops
/// to show, minimize or race.
pub fn read_program(target: Target, input: &Path) -> Result<shadow::Program> {
    let data =
        std::fs::read(input).with_context(|| format!("failed to read {}", input.display()))?;
    if shadow::op::trace::is_trace(&data) {
        return Ok(shadow::Program {
            target,
            ops: Vec::new(),
        });
    }
    shadow::Program::from_input(target, &data)
        .map_err(|e| anyhow::anyhow!("{}: {e}", input.display()))
}

/// The programs input files decode to, in replay order.
pub fn read_programs(target: Target, inputs: &[PathBuf]) -> Result<Vec<shadow::Program>> {
    inputs.iter().map(|i| read_program(target, i)).collect()
}
