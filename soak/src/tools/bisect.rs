//! `allocsoak bisect`: the commit of a declared allocator's repository
//! that made a crash group reproduce (its cause), or that stopped it (its
//! fix), as syzbot's cause and fix bisection, on the author's machine.
//!
//! The repository is never touched: each revision is checked out in a
//! worktree of its own under `target/allocsoak/bisect/`, and the declared
//! allocator is built from there (its `path`, or its C sources, remapped
//! into the worktree) through a glue crate of its own, one fuzz binary
//! only, incrementally. The group's inputs (its history first) replay
//! [`groups::TRIES`] times at each revision. A revision that does not
//! build, whose replays disagree, or that fails another way is skipped, as
//! `git bisect skip` does. The search walks the first-parent history
//! between the two revisions, which are taken as the caller says they are
//! (not replayed).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::engines::project::{Build, Part, Project};
use crate::foundation::config::Config;
use crate::foundation::state::StateDir;
use crate::foundation::store::{self, BisectionRow, Store};
use crate::pipeline::groups::{self, Group};
use crate::pipeline::repro::{self, Case};

/// What to bisect.
pub struct Request<'a> {
    /// A group id or unique prefix.
    pub group: &'a str,
    pub state: &'a Path,
    /// The allocator's git repository, where the declaration's paths lie.
    pub repo: &'a Path,
    /// A revision where the group does not reproduce.
    pub good: &'a str,
    /// A revision where it does.
    pub bad: &'a str,
    /// Bisect for the fix: `bad` is the older revision, `good` the newer.
    pub fixed: bool,
}

/// What one revision showed.
#[derive(Clone, Debug, PartialEq)]
pub enum Seen {
    /// Every replay showed the group's bug.
    Reproduces,
    /// No replay failed.
    Clean,
    /// Neither: why.
    Skipped(String),
}

/// One revision tested.
pub struct Tested {
    pub commit: String,
    pub subject: String,
    pub seen: Seen,
}

/// The bisection's answer.
pub enum Outcome {
    /// The first commit that reproduces (cause) or does not (fix).
    Found(BisectionRow),
    /// Skipped revisions hide it: it is one of these.
    OneOf(Vec<String>),
}

/// Bisects; prints each revision as it is tested (`report`) and stores a
/// found commit on the group.
pub fn bisect(
    project: &Project,
    config: &Config,
    req: &Request,
    report: &mut dyn FnMut(&Tested),
) -> Result<Outcome> {
    let state = StateDir::open_to_read(req.state)?;
    let store = Store::open(&state.store())?;
    let group = Group::find(&state, &store, req.group)?;
    if group.row.kind == "rss-drift" {
        bail!(
            "group {} is an rss-drift finding: bisect replays crash groups only",
            group.row.id
        );
    }
    let repo = std::fs::canonicalize(req.repo)
        .with_context(|| format!("no repository at {}", req.repo.display()))?;
    git(&repo, &["rev-parse", "--git-dir"])
        .with_context(|| format!("{} is not a git repository", repo.display()))?;
    let span = Span::between(&repo, req)?;

    let work = project.work_dir("bisect").join(&group.row.id);
    let tree = Worktree::add(&repo, &work.join("tree"), &span.new)?;
    let bisect_config = remapped(config, &group.slot.allocator, &repo, &tree.dir, &work)?;
    let bisect_project = project.plain().with_config(&bisect_config);
    let case = Case::find(
        std::slice::from_ref(&group.row.id),
        req.state,
        None,
        &group.slot.allocator,
        config,
    )?;
    let revisions = Revisions {
        repo: &repo,
        tree: &tree,
        project: &bisect_project,
        config,
        case: &case,
        group: &group,
        work: &work,
        fixed: req.fixed,
    };
    let searched = revisions.search(&span.commits, report)?;
    if let Some(one_of) = searched.one_of(&span.commits) {
        return Ok(Outcome::OneOf(one_of));
    }
    let found = &span.commits[searched.hi as usize];
    let row = BisectionRow {
        group_id: group.row.id.clone(),
        direction: if req.fixed { "fix" } else { "cause" }.into(),
        commit: found.clone(),
        subject: subject(&repo, found)?,
        builds: searched.builds,
        skipped: searched.skipped.len() as i64,
        at: store::now(),
    };
    store.set_bisection(&row)?;
    if let Some(g) = store.group(&group.row.id)? {
        crate::pipeline::page::write_report(&state, &store, &g)?;
    }
    Ok(Outcome::Found(row))
}

/// The revisions the search walks: the first-parent history from `old`
/// (where it starts) to `new` (where the state it looks for holds).
struct Span {
    /// The full id of `new`.
    new: String,
    /// The commits after `old` up to `new`, oldest first.
    commits: Vec<String>,
}

impl Span {
    /// The span of `req`'s revisions in `repo`, in git's terms: for a
    /// cause, `--good` is `old` and `--bad` is `new`; for a fix, the other
    /// way round. A one-line error when `old` is not an ancestor of `new`.
    fn between(repo: &Path, req: &Request) -> Result<Span> {
        let (old, new) = match req.fixed {
            false => (
                commit(repo, req.good, "--good")?,
                commit(repo, req.bad, "--bad")?,
            ),
            true => (
                commit(repo, req.bad, "--bad")?,
                commit(repo, req.good, "--good")?,
            ),
        };
        let range = format!("{old}..{new}");
        let commits: Vec<String> = git(
            repo,
            &[
                "rev-list",
                "--reverse",
                "--first-parent",
                "--ancestry-path",
                &range,
            ],
        )?
        .lines()
        .map(String::from)
        .collect();
        if commits.is_empty() {
            let (first, second) = if req.fixed {
                ("--bad", "--good")
            } else {
                ("--good", "--bad")
            };
            bail!(
                "{first} {} is not an ancestor of {second} {}; give the older revision as {first}",
                &old[..12],
                &new[..12]
            );
        }
        Ok(Span { new, commits })
    }
}

/// What testing a revision takes: the repository and its worktree, the
/// project and config that build the allocator from the worktree, the
/// group's case and its scratch folder, and which way the search goes.
struct Revisions<'a> {
    repo: &'a Path,
    tree: &'a Worktree,
    project: &'a Project,
    config: &'a Config,
    case: &'a Case,
    group: &'a Group,
    work: &'a Path,
    fixed: bool,
}

/// Where a search ended, as indices into its commits: `lo` the last known
/// old one (-1: `old` itself), `hi` the first known new one; the skipped
/// ones, and the revisions built.
struct Searched {
    lo: i64,
    hi: i64,
    skipped: Vec<usize>,
    builds: i64,
}

impl Revisions<'_> {
    /// Bisects `commits` (the last is `new`): tests the untested commit
    /// nearest the middle of what is left until none is, and reports each.
    fn search(&self, commits: &[String], report: &mut dyn FnMut(&Tested)) -> Result<Searched> {
        // `new` itself is the first known new one at first.
        let (mut lo, mut hi) = (-1i64, commits.len() as i64 - 1);
        let mut skipped: Vec<usize> = Vec::new();
        let mut builds = 0;
        loop {
            let untested: Vec<usize> = ((lo + 1)..hi)
                .map(|i| i as usize)
                .filter(|i| !skipped.contains(i))
                .collect();
            let mid = (lo + hi) / 2;
            let Some(&at) = untested.iter().min_by_key(|&&i| (i as i64 - mid).abs()) else {
                break;
            };
            builds += 1;
            let new_state = match (self.test_revision(&commits[at], report)?, self.fixed) {
                (Seen::Skipped(_), _) => {
                    skipped.push(at);
                    continue;
                }
                (Seen::Reproduces, fixed) => !fixed,
                (Seen::Clean, fixed) => fixed,
            };
            match new_state {
                true => hi = at as i64,
                false => lo = at as i64,
            }
        }
        Ok(Searched {
            lo,
            hi,
            skipped,
            builds,
        })
    }

    /// Checks `sha` out in the worktree, builds and replays the group
    /// there, and reports what it showed.
    fn test_revision(&self, sha: &str, report: &mut dyn FnMut(&Tested)) -> Result<Seen> {
        self.tree.checkout(sha)?;
        let seen = test(self.project, self.config, self.case, self.group, self.work)?;
        report(&Tested {
            commit: sha.to_string(),
            subject: subject(self.repo, sha)?,
            seen: seen.clone(),
        });
        Ok(seen)
    }
}

impl Searched {
    /// The commits the answer is one of, when skipped ones between `lo`
    /// and `hi` hide it: those, then `hi`'s.
    fn one_of(&self, commits: &[String]) -> Option<Vec<String>> {
        let mut left: Vec<String> = self
            .skipped
            .iter()
            .filter(|&&i| (i as i64) > self.lo && (i as i64) < self.hi)
            .map(|&i| commits[i].clone())
            .collect();
        if left.is_empty() {
            return None;
        }
        left.push(commits[self.hi as usize].clone());
        Some(left)
    }
}

/// Builds the group's target at the worktree's revision and replays the
/// group there.
fn test(
    project: &Project,
    config: &Config,
    case: &Case,
    group: &Group,
    work: &Path,
) -> Result<Seen> {
    let build = Build::for_allocator(&group.slot.allocator);
    let log = work.join("build.log");
    match project.build_part(Part::Fuzz(build, case.target), Some(&log)) {
        Ok(true) => {}
        Ok(false) => {
            return Ok(Seen::Skipped(format!(
                "does not build (see {})",
                log.display()
            )))
        }
        Err(e) => return Ok(Seen::Skipped(format!("does not build: {e:#}"))),
    }
    let binary = project.binary(build, case.target);
    let (mut hits, mut other) = (0, None);
    for _ in 0..groups::TRIES {
        let shown = repro::replay(case, &binary, config)?;
        match shown.signature {
            Some(sig) if group.row.shown_by(&sig) => hits += 1,
            Some(sig) => other = Some(sig.title()),
            None => {}
        }
    }
    Ok(match (hits, other) {
        (_, Some(title)) => Seen::Skipped(format!("fails another way: {title}")),
        (0, None) => Seen::Clean,
        (n, None) if n == groups::TRIES => Seen::Reproduces,
        (n, None) => Seen::Skipped(format!("reproduced in {n} of {} replays", groups::TRIES)),
    })
}

/// The config with `allocator` alone declared, its paths moved from the
/// repository into the worktree `tree`, and a path of its own under
/// `work` (so its glue crate is its own).
fn remapped(
    config: &Config,
    allocator: &str,
    repo: &Path,
    tree: &Path,
    work: &Path,
) -> Result<Config> {
    let Some(declared) = config.declared.iter().find(|d| d.name == allocator) else {
        bail!(
            "`{allocator}` is not declared in {}: bisect builds a declared allocator ([[allocator]] with a `path` or C sources) at each revision",
            config.path.display()
        );
    };
    let base = config.base();
    let into_tree = |p: &Path| -> Result<PathBuf> {
        let abs = std::fs::canonicalize(base.join(p))
            .with_context(|| format!("{} does not exist", base.join(p).display()))?;
        match abs.strip_prefix(repo) {
            Ok(rel) => Ok(tree.join(rel)),
            Err(_) => bail!(
                "`{allocator}`'s {} is not inside {}; bisect builds what the repository holds",
                abs.display(),
                repo.display()
            ),
        }
    };
    if declared.path.is_none() && declared.c.is_none() {
        bail!(
            "`{allocator}` comes from a registry or git, not a path: bisect builds it from {} (declare it with `path`)",
            repo.display()
        );
    }
    let mut d = declared.clone();
    if let Some(path) = &d.path {
        d.path = Some(into_tree(path)?);
    }
    if let Some(c) = &mut d.c {
        c.sources = c
            .sources
            .iter()
            .map(|s| into_tree(s))
            .collect::<Result<_>>()?;
        c.include = c
            .include
            .iter()
            .map(|s| into_tree(s))
            .collect::<Result<_>>()?;
    }
    let mut out = config.clone();
    out.declared = vec![d];
    out.path = work.join("allocsoak.toml");
    let lock = crate::foundation::declared::lock_file_of(&config.path);
    if lock.is_file() {
        std::fs::create_dir_all(work)?;
        std::fs::copy(&lock, crate::foundation::declared::lock_file_of(&out.path))?;
    }
    Ok(out)
}

/// A detached worktree of the repository, removed when dropped.
struct Worktree {
    repo: PathBuf,
    dir: PathBuf,
}

impl Worktree {
    fn add(repo: &Path, dir: &Path, at: &str) -> Result<Worktree> {
        // One left by a bisection that was killed.
        let _ = git(
            repo,
            &["worktree", "remove", "--force", &dir.to_string_lossy()],
        );
        let _ = std::fs::remove_dir_all(dir);
        let _ = git(repo, &["worktree", "prune"]);
        if let Some(parent) = dir.parent() {
            std::fs::create_dir_all(parent)?;
        }
        git(
            repo,
            &[
                "worktree",
                "add",
                "--detach",
                "--force",
                &dir.to_string_lossy(),
                at,
            ],
        )?;
        Ok(Worktree {
            repo: repo.to_path_buf(),
            dir: std::fs::canonicalize(dir)?,
        })
    }

    fn checkout(&self, sha: &str) -> Result<()> {
        git(
            &self.dir,
            &["checkout", "--detach", "--force", "--quiet", sha],
        )
        .map(drop)
    }
}

impl Drop for Worktree {
    fn drop(&mut self) {
        let _ = git(
            &self.repo,
            &["worktree", "remove", "--force", &self.dir.to_string_lossy()],
        );
    }
}

/// The full id of commit `rev`; a one-line error naming `flag` when there is none.
fn commit(repo: &Path, rev: &str, flag: &str) -> Result<String> {
    git(
        repo,
        &[
            "rev-parse",
            "--verify",
            "--quiet",
            &format!("{rev}^{{commit}}"),
        ],
    )
    .ok()
    .filter(|s| !s.is_empty())
    .with_context(|| format!("{flag} {rev} is not a commit of {}", repo.display()))
}

fn subject(repo: &Path, sha: &str) -> Result<String> {
    git(repo, &["log", "-1", "--format=%s", sha])
}

/// Runs git in `dir`; its trimmed output, or its last error line.
fn git(dir: &Path, args: &[&str]) -> Result<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .context("failed to run git; install it")?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        bail!(
            "git {}: {}",
            args.join(" "),
            err.lines().last().unwrap_or("failed")
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}
