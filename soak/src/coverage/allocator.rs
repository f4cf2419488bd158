//! One allocator's coverage: its targets' inputs run once in the coverage
//! build, their profiles merged, and `llvm-cov`'s export and HTML of its
//! sources, in the report being made.

use std::collections::hash_map::{Entry, HashMap};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use shadow::Target;

use super::sources::Sources;
use super::{safe_name, Coverage, Covered, Replay, Tools};
use crate::engines::project::{Build, Project};
use crate::foundation::state::StateDir;
use crate::foundation::store::Store;

/// What every allocator's coverage is made with: the project, the state
/// dir whose corpora run and its store, the LLVM tools, the report's
/// folders, and the builds made so far.
pub(super) struct Covering<'a> {
    pub(super) project: &'a Project,
    pub(super) state: &'a StateDir,
    pub(super) store: &'a Store,
    pub(super) tools: &'a Tools,
    /// The report being made, and where it is renamed to.
    pub(super) work: &'a Path,
    pub(super) out: &'a Path,
    /// Profiles, findings and known keys of the runs: gone once reported.
    pub(super) scratch: PathBuf,
    /// jemalloc is built in only when covered (a zoo on it too).
    pub(super) jemalloc: bool,
    /// Each build an allocator runs in (a mimalloc flavor's is its own),
    /// made once, with its dependency graph.
    pub(super) graphs: HashMap<Build, cargo_metadata::Metadata>,
}

/// One allocator's runs: its targets and their coverage binaries, the
/// allocator they run as and the objects whose mapping is reported on,
/// and its files in the scratch.
struct Runs {
    targets: Vec<Target>,
    binaries: Vec<PathBuf>,
    runs_as: String,
    objects: Vec<PathBuf>,
    /// The allocator's name as a file name.
    name: String,
    profiles: PathBuf,
    tolerate: PathBuf,
}

impl Covering<'_> {
    /// The files of `allocator`'s own code in its coverage build (made
    /// first when it was not yet), or why they cannot be reported on.
    pub(super) fn sources(&mut self, allocator: &str) -> Result<Result<Sources, String>> {
        let project = self.project;
        Ok(project.sources(self.graph(Build::for_allocator(allocator))?, allocator))
    }

    /// Covers `allocator` with the inputs of `targets`: its profile, and
    /// the HTML of its `sources`, in the report being made.
    pub(super) fn cover(
        &self,
        allocator: String,
        targets: Vec<Target>,
        sources: &Sources,
    ) -> Result<Covered> {
        let build = Build::for_allocator(&allocator);
        let runs = self.runs(&allocator, build, targets, sources)?;
        let (inputs, failed) = self.replay(&allocator, &runs)?;
        let name = &runs.name;
        let profdata = self.work.join(format!("{name}.profdata"));
        self.tools.merge(&runs.profiles, &profdata)?;
        let json = self
            .tools
            .export(&profdata, &runs.objects, &sources.paths)?;
        let coverage = Coverage::from_export(&json)
            .context("llvm-cov export printed JSON allocsoak cannot read")?;
        // A library's files, named by the folder they share.
        let roots = match sources.library {
            Some(_) => coverage.common_folder().into_iter().collect(),
            None => sources.paths.clone(),
        };
        let html = self.work.join("html").join(name);
        self.tools
            .html(&profdata, &runs.objects, &sources.paths, &html)?;
        Ok(Covered {
            allocator,
            coverage,
            roots,
            inputs,
            failed,
            html: self.out.join("html").join(name).join("index.html"),
            profdata: self.out.join(format!("{name}.profdata")),
            objects: runs.objects,
        })
    }

    /// The dependency graph of `build`'s coverage build, which is made
    /// first when it was not yet.
    fn graph(&mut self, build: Build) -> Result<&cargo_metadata::Metadata> {
        Ok(match self.graphs.entry(build) {
            Entry::Occupied(graph) => graph.into_mut(),
            Entry::Vacant(slot) => {
                self.project.build_coverage(build, self.jemalloc)?;
                slot.insert(crate::foundation::cargo::resolve(
                    &self.project.fuzz_dir().join("Cargo.toml"),
                    Some(build.coverage_features(self.jemalloc)),
                )?)
            }
        })
    }

    /// `allocator`'s runs of `targets` in `build`, with its profiles
    /// folder made and its known bugs' keys written in the scratch.
    fn runs(
        &self,
        allocator: &str,
        build: Build,
        targets: Vec<Target>,
        sources: &Sources,
    ) -> Result<Runs> {
        let binaries: Vec<PathBuf> = targets
            .iter()
            .map(|t| self.project.coverage_binary(build, *t))
            .collect();
        // A library's coverage build runs in the soak's library's place,
        // and its mapping is the one reported on.
        let (runs_as, objects) = match &sources.library {
            Some(library) => (library.runs_as.clone(), vec![library.object.clone()]),
            None => (allocator.to_string(), binaries.clone()),
        };
        let name = safe_name(allocator);
        let profiles = self.scratch.join("profiles").join(&name);
        std::fs::create_dir_all(&profiles)?;
        let tolerate = self.scratch.join(format!("{name}.tolerate"));
        let keys: String = self
            .store
            .tolerated_keys(allocator)?
            .into_iter()
            .map(|(_, k)| format!("{k}\n"))
            .collect();
        crate::foundation::state::write_atomic(&tolerate, keys.as_bytes())?;
        Ok(Runs {
            targets,
            binaries,
            runs_as,
            objects,
            name,
            profiles,
            tolerate,
        })
    }

    /// Runs each target's persistent corpus and its seeds once on
    /// `allocator`: the inputs run, and those that failed. An error when
    /// every one failed.
    fn replay(&self, allocator: &str, runs: &Runs) -> Result<(usize, usize)> {
        let (name, runs_as) = (&runs.name, &runs.runs_as);
        let (mut inputs, mut failed) = (0, 0);
        for (target, binary) in runs.targets.iter().zip(&runs.binaries) {
            let dirs: Vec<PathBuf> = [self.state.corpus(*target), self.project.seeds(*target)]
                .into_iter()
                .filter_map(|d| d.canonicalize().ok())
                .collect();
            let run = Replay {
                binary,
                allocator: runs_as,
                profiles: &runs.profiles,
                tolerate: &runs.tolerate,
                findings: &self
                    .scratch
                    .join("findings")
                    .join(format!("{name}-{}", target.name())),
                prefix: target.name(),
            };
            let (n, f) = run.all(&dirs)?;
            inputs += n;
            failed += f;
        }
        if inputs > 0 && failed == inputs {
            bail!(
                "every input failed on {allocator} in the coverage build; see why with `ALLOCSOAK_ALLOCATOR={runs_as} {} <an input>`",
                runs.binaries[0].display()
            );
        }
        Ok((inputs, failed))
    }
}
