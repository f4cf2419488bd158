//! Cargo's side of the fuzz builds the foundation needs to know: the
//! platform they are made for, and a manifest's resolved dependency graph
//! for it (which the declared allocators' native-library check, the
//! provenance of a build and coverage all read).

use std::path::Path;

use anyhow::{Context, Result};

/// The target triple the fuzz builds are made for (cargo-fuzz passes it).
pub(crate) const TRIPLE: &str = "x86_64-unknown-linux-gnu";

/// The resolved dependency graph of a manifest for the fuzz builds'
/// platform, with `features` (its defaults off) or its defaults.
pub(crate) fn resolve(manifest: &Path, features: Option<&str>) -> Result<cargo_metadata::Metadata> {
    use cargo_metadata::{CargoOpt, MetadataCommand};
    let mut cmd = MetadataCommand::new();
    cmd.manifest_path(manifest)
        .other_options(vec!["--filter-platform".into(), TRIPLE.into()]);
    if let Some(f) = features {
        cmd.features(CargoOpt::NoDefaultFeatures)
            .features(CargoOpt::SomeFeatures(
                f.split(',').map(String::from).collect(),
            ));
    }
    cmd.exec().with_context(|| {
        format!(
            "failed to resolve the dependencies of {}",
            manifest.display()
        )
    })
}

/// Whether any of `starts` depends on package `target`, directly or not
/// (or is it), in a resolved graph.
pub(crate) fn reaches<'a>(
    graph: &'a cargo_metadata::Metadata,
    starts: impl IntoIterator<Item = &'a cargo_metadata::PackageId>,
    target: &cargo_metadata::PackageId,
) -> bool {
    let Some(resolve) = &graph.resolve else {
        return false;
    };
    let mut stack: Vec<&cargo_metadata::PackageId> = starts.into_iter().collect();
    let mut seen = std::collections::BTreeSet::new();
    while let Some(id) = stack.pop() {
        if id == target {
            return true;
        }
        if seen.insert(id) {
            if let Some(node) = resolve.nodes.iter().find(|n| n.id == *id) {
                stack.extend(node.deps.iter().map(|d| &d.pkg));
            }
        }
    }
    false
}
