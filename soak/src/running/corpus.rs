//! Persistent corpora: a slice fuzzes into a fresh folder; its new inputs
//! merge into the target's corpus, which is swapped in whole.
//!
//! `corpus/<target>` is a symlink to a generation `.<target>.g<N>`. A merge
//! has libFuzzer's `-merge=1` pick, into an empty generation N+1, the
//! slice's inputs that cover all the slice found, hard-links generation N
//! beside them, and renames a new symlink over the old one. The corpus
//! itself is not re-run: each of the slice's inputs was new against it
//! when the engine kept it (inputs two slices both found are dropped by
//! the next prune). A prune (`-set_cover_merge=1`) builds N+1 from scratch the
//! same way. A kill at any moment leaves the symlink on a complete
//! generation; [`Corpus::recover`] removes half-built ones.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use shadow::Target;
use triage::budget::Budget;

use crate::foundation::state::{count_files, StateDir};

/// The longest a merge or prune may run before it is killed (and the
/// corpus stays as it was): a merge that hangs must not hold up the soak.
const MERGE_LIMIT: Duration = Duration::from_secs(30 * 60);

pub struct Corpus<'a> {
    state: &'a StateDir,
    target: Target,
}

/// How a merge or prune runs its inputs.
pub struct MergeRun<'a> {
    /// The target's fuzz binary.
    pub binary: &'a Path,
    /// The environment its slices ran with.
    pub env: &'a [(String, String)],
    /// libFuzzer `-timeout`: an input that hangs fails alone, as in a slice.
    pub timeout_secs: u64,
    /// libFuzzer `-rss_limit_mb`.
    pub rss_limit_mb: u64,
    /// When to give up (the corpus stays as it was).
    pub budget: Budget<'a>,
}

/// What a merge or prune did.
pub struct Merged {
    pub before: usize,
    pub after: usize,
    pub secs: f64,
}

impl<'a> Corpus<'a> {
    pub fn new(state: &'a StateDir, target: Target) -> Corpus<'a> {
        Corpus { state, target }
    }

    /// The corpus folder engines read (the current generation).
    pub fn path(&self) -> PathBuf {
        self.state.corpus(self.target)
    }

    /// The current generation number, creating generation 0 on first use.
    fn generation(&self) -> Result<u64> {
        let link = self.path();
        match std::fs::read_link(&link) {
            Ok(dest) => dest
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.rsplit_once(".g"))
                .and_then(|(_, g)| g.parse().ok())
                .with_context(|| {
                    format!(
                        "{} points to {}, not a corpus generation",
                        link.display(),
                        dest.display()
                    )
                }),
            Err(_) if link.exists() => bail!(
                "{} is not a symlink to a corpus generation; move it aside and restart",
                link.display()
            ),
            Err(_) => {
                let g0 = self.state.corpus_generation(self.target, 0);
                std::fs::create_dir_all(&g0)
                    .with_context(|| format!("failed to create {}", g0.display()))?;
                self.point_to(0)?;
                Ok(0)
            }
        }
    }

    fn point_to(&self, n: u64) -> Result<()> {
        let link = self.path();
        let name = self
            .state
            .corpus_generation(self.target, n)
            .file_name()
            .expect("generation has a name")
            .to_owned();
        crate::foundation::state::symlink_atomic(&name, &link)?;
        sync_dir(link.parent().expect("corpus has a parent"));
        Ok(())
    }

    /// Removes generations other than the current one: half-built ones a
    /// kill left behind (their inputs are hard links of the current one's,
    /// plus at most one slice's merge, which the slice's scratch still has)
    /// and old ones a swap left.
    pub fn recover(&self) -> Result<()> {
        let current = self.generation()?;
        let prefix = format!(".{}.g", self.target.name());
        let dir = self.state.root().join("corpus");
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let stale = name
                .strip_prefix(&prefix)
                .and_then(|g| g.parse::<u64>().ok())
                .is_some_and(|g| g != current);
            if stale {
                crate::foundation::state::remove_scratch(&entry.path())?;
            }
        }
        Ok(())
    }

    pub fn count(&self) -> Result<usize> {
        self.generation()?;
        count_files(&self.path())
    }

    /// Merges the inputs in `new` that add coverage, running them with
    /// `how`; `control` is the merge control file, so a merge that crashes
    /// on an input picks up where it was.
    pub fn merge(&self, how: &MergeRun, new: &Path, control: &Path) -> Result<Merged> {
        self.rebuild(how, "-merge=1", &[new], control, true)
    }

    /// Rebuilds the corpus as a minimal set covering the same features.
    pub fn prune(&self, how: &MergeRun, control: &Path) -> Result<Merged> {
        let current = self.path();
        self.rebuild(how, "-set_cover_merge=1", &[&current], control, false)
    }

    fn rebuild(
        &self,
        how: &MergeRun,
        mode: &str,
        from: &[&Path],
        control: &Path,
        keep_current: bool,
    ) -> Result<Merged> {
        let start = Instant::now();
        let current = self.generation()?;
        let before = self.count()?;
        let next = self.state.corpus_generation(self.target, current + 1);
        if next.exists() {
            crate::foundation::state::remove_scratch(&next)?;
        }
        std::fs::create_dir_all(&next)
            .with_context(|| format!("failed to create {}", next.display()))?;
        let mut cmd = merge_command(how, mode, &next, from, control);
        self.run_merge(how, &mut cmd)?;
        let _ = std::fs::remove_file(control);
        if keep_current {
            self.link_current(&next)?;
        }
        sync_dir(&next);
        let after = count_files(&next)?;
        if after < before && keep_current {
            bail!(
                "merge into {} lost inputs ({before} -> {after}); kept the old corpus",
                self.path().display()
            );
        }
        self.point_to(current + 1)?;
        crate::foundation::state::remove_scratch(
            &self.state.corpus_generation(self.target, current),
        )?;
        Ok(Merged {
            before,
            after,
            secs: start.elapsed().as_secs_f64(),
        })
    }

    /// Runs the merge `cmd` (made by [`merge_command`]) within
    /// [`MERGE_LIMIT`] and `how`'s budget; an error when it was stopped,
    /// did not run or failed (with the last lines of its log).
    fn run_merge(&self, how: &MergeRun, cmd: &mut Command) -> Result<()> {
        let out = match triage::replay::output_within(cmd, MERGE_LIMIT, &how.budget) {
            Ok(out) => out,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => bail!(
                "merge into {} stopped, as the soak is ending; the next start merges again",
                self.path().display()
            ),
            Err(e) => return Err(crate::engines::libfuzzer::replay_error(e, how.binary)),
        };
        if !out.status.success() {
            let log = String::from_utf8_lossy(&out.stderr);
            let tail: Vec<&str> = log.lines().rev().take(5).collect();
            bail!(
                "merge into {} failed ({}): {}",
                self.path().display(),
                out.status,
                tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
            );
        }
        Ok(())
    }

    /// Hard-links the current generation's inputs into `next`, but those
    /// it already has. Inputs are named by their content's hash: a name
    /// both have is the same input.
    fn link_current(&self, next: &Path) -> Result<()> {
        for entry in std::fs::read_dir(self.path())? {
            let entry = entry?;
            let to = next.join(entry.file_name());
            if !to.exists() {
                std::fs::hard_link(entry.path(), &to).with_context(|| {
                    format!(
                        "failed to link {} into {}",
                        entry.path().display(),
                        next.display()
                    )
                })?;
            }
        }
        Ok(())
    }
}

/// The libFuzzer command that merges `from` into the empty generation
/// `next` in `mode` (`-merge=1`, `-set_cover_merge=1`), run as `how`
/// says, with `control` as its merge control file.
fn merge_command(
    how: &MergeRun,
    mode: &str,
    next: &Path,
    from: &[&Path],
    control: &Path,
) -> Command {
    // An input that crashes the merge's inner process is left out of
    // the corpus; libFuzzer writes it as `crash-<sha1>` under
    // `-artifact_prefix`, by default the soak's working directory
    // (seen: 80 files in one test's). Beside the control file, in the
    // slice's scratch, it goes with it: the slice's engine ran the
    // input before, and filed what it found then.
    let scratch = control.parent().unwrap_or(Path::new("."));
    let mut cmd = triage::replay::engine_command(how.binary);
    cmd.envs(how.env.iter().map(|(k, v)| (k, v)))
        .arg(mode)
        .arg(format!("-timeout={}", how.timeout_secs))
        .arg(format!("-rss_limit_mb={}", how.rss_limit_mb))
        .arg(format!("-artifact_prefix={}/merge-", scratch.display()))
        .arg(format!("-merge_control_file={}", control.display()))
        .arg(next)
        .args(from);
    cmd
}

/// Makes renames in `dir` durable; best effort.
fn sync_dir(dir: &Path) {
    if let Ok(f) = std::fs::File::open(dir) {
        let _ = f.sync_all();
    }
}
