//! What `llvm-cov export` says of an allocator's sources, typed: the
//! totals, each file's, and the functions never run, by file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Covered of all, for one measure.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct Count {
    pub count: u64,
    pub covered: u64,
}

impl Count {
    pub fn percent(self) -> f64 {
        match self.count {
            0 => 100.0,
            n => 100.0 * self.covered as f64 / n as f64,
        }
    }
}

impl std::fmt::Display for Count {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.count == 0 {
            // A file without branches, or a build that does not count them.
            return write!(f, "none");
        }
        write!(
            f,
            "{} of {} ({:.1} %)",
            self.covered,
            self.count,
            self.percent()
        )
    }
}

/// llvm-cov's four measures, as its `report` prints them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct Measures {
    pub functions: Count,
    pub lines: Count,
    pub regions: Count,
    pub branches: Count,
}

/// One source file's measures, its path as the build mapped it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FileCoverage {
    pub path: String,
    pub measures: Measures,
}

/// An allocator's coverage: over its files, each file's, and, by file,
/// the functions no input ran (demangled, one line each).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Coverage {
    pub totals: Measures,
    pub files: Vec<FileCoverage>,
    pub never_run: BTreeMap<String, Vec<String>>,
}

#[derive(Deserialize)]
struct Export {
    data: Vec<Data>,
}

#[derive(Deserialize)]
struct Data {
    files: Vec<File>,
    #[serde(default)]
    functions: Vec<Function>,
    totals: Measures,
}

#[derive(Deserialize)]
struct File {
    filename: String,
    summary: Measures,
}

#[derive(Deserialize)]
struct Function {
    name: String,
    count: u64,
    filenames: Vec<String>,
    /// `[line, column, end line, end column, count, file id, expanded
    /// file id, kind]` each; the first is the function's own body.
    #[serde(default)]
    regions: Vec<Vec<u64>>,
}

impl Function {
    /// Where the function's body starts: its first region's file, line
    /// and column. llvm-cov counts one function per place, its instances
    /// (a generic's, a header's `static inline` one in each file that
    /// includes it) together.
    fn place(&self) -> Option<(&String, u64, u64)> {
        let first = self.regions.first()?;
        let file = self.filenames.get(*first.get(5)? as usize)?;
        Some((file, *first.first()?, *first.get(1)?))
    }
}

impl Coverage {
    /// Reads `llvm-cov export -format=text`'s JSON of the allocator's
    /// files. A function counts as run when any of its instances ran.
    pub fn from_export(json: &[u8]) -> Result<Coverage, serde_json::Error> {
        let export: Export = serde_json::from_slice(json)?;
        let mut files = Vec::new();
        let mut totals = Measures::default();
        // Per place: the function's name and whether any instance ran.
        let mut ran: BTreeMap<(String, u64, u64), (String, bool)> = BTreeMap::new();
        for data in export.data {
            totals = data.totals;
            for f in data.files {
                files.push(FileCoverage {
                    path: f.filename,
                    measures: f.summary,
                });
            }
            for f in data.functions {
                let Some((file, line, column)) = f.place() else {
                    continue;
                };
                if !files.iter().any(|c| &c.path == file) {
                    continue;
                }
                ran.entry((file.clone(), line, column))
                    .or_insert_with(|| (demangled(&f.name), false))
                    .1 |= f.count > 0;
            }
        }
        files.sort_by(|a, b| a.path.cmp(&b.path));
        let mut never_run: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for ((file, ..), (name, ran)) in ran {
            if !ran {
                never_run.entry(file).or_default().push(name);
            }
        }
        for names in never_run.values_mut() {
            names.sort();
        }
        Ok(Coverage {
            totals,
            files,
            never_run,
        })
    }

    /// The functions never run, all files together.
    pub fn never_run_count(&self) -> usize {
        self.never_run.values().map(Vec::len).sum()
    }

    /// The deepest folder every file is in, unless that is the root.
    pub fn common_folder(&self) -> Option<PathBuf> {
        let mut files = self.files.iter().map(|f| Path::new(&f.path));
        let mut common = files.next()?.parent()?.to_path_buf();
        for file in files {
            while !file.starts_with(&common) {
                common = common.parent()?.to_path_buf();
            }
        }
        (common.parent().is_some()).then_some(common)
    }
}

/// A coverage function name as a reader knows it: a C `static` one
/// without the file llvm puts before it, a Rust one demangled.
pub fn demangled(name: &str) -> String {
    let name = name.rsplit_once(';').map_or(name, |(_, n)| n);
    let rust = name.starts_with("_R") || name.starts_with("_ZN");
    let name = match name.rsplit_once(':') {
        Some((file, n)) if !rust && (file.ends_with(".c") || file.ends_with(".h")) => n,
        _ => name,
    };
    format!("{:#}", rustc_demangle::demangle(name))
}

/// `path` shown from the allocator's source folder it is under (its own
/// name when the root is the file), else whole.
pub fn shown(path: &str, roots: &[&Path]) -> String {
    let path = Path::new(path);
    let shown = match roots.iter().find_map(|r| path.strip_prefix(r).ok()) {
        Some(rel) if rel.as_os_str().is_empty() => path.file_name().map_or(path, Path::new),
        Some(rel) => rel,
        None => path,
    };
    shown.display().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_library_is_named_by_the_folder_its_files_share() {
        let files = |paths: &[&str]| Coverage {
            totals: Measures::default(),
            files: paths
                .iter()
                .map(|p| FileCoverage {
                    path: p.to_string(),
                    measures: Measures::default(),
                })
                .collect(),
            never_run: BTreeMap::new(),
        };
        let folder = |paths: &[&str]| files(paths).common_folder();
        assert_eq!(folder(&["/src/a/x.c"]), Some(PathBuf::from("/src/a")));
        assert_eq!(
            folder(&["/src/a/x.c", "/src/a/b/y.c", "/src/a/z.h"]),
            Some(PathBuf::from("/src/a"))
        );
        assert_eq!(folder(&["/src/a/x.c", "/usr/include/y.h"]), None);
        assert_eq!(folder(&[]), None);
    }

    #[test]
    fn names_read_as_their_authors_write_them() {
        assert_eq!(demangled("src/os.c;mi_os_reset"), "mi_os_reset");
        assert_eq!(
            demangled("alloc.c:mi_heap_malloc_small"),
            "mi_heap_malloc_small"
        );
        assert_eq!(demangled("je_malloc"), "je_malloc");
        assert_eq!(
            demangled("_ZN7planted5Slack5block17h0123456789abcdefE"),
            "planted::Slack::block"
        );
    }

    #[test]
    fn files_are_shown_from_their_allocators_folder() {
        let roots = [Path::new("/r/mimalloc/v2"), Path::new("/a/threads.c")];
        assert_eq!(shown("/r/mimalloc/v2/src/os.c", &roots), "src/os.c");
        assert_eq!(shown("/a/threads.c", &roots), "threads.c");
        assert_eq!(shown("/elsewhere/x.c", &roots), "/elsewhere/x.c");
    }

    #[test]
    fn a_function_counts_as_run_when_any_instance_ran() {
        let json = br#"{"data":[{"files":[{"filename":"/a/x.c","summary":{
            "functions":{"count":3,"covered":1},"lines":{"count":10,"covered":4},
            "regions":{"count":8,"covered":3},"branches":{"count":2,"covered":1}}}],
          "functions":[
            {"name":"x.c:rare","count":0,"filenames":["/a/x.c"],"regions":[[3,1,4,2,0,0,0,0]]},
            {"name":"common","count":7,"filenames":["/a/x.c"],"regions":[[5,1,6,2,7,0,0,0]]},
            {"name":"_ZN1g4pick17h0123456789abcdefE","count":0,"filenames":["/a/x.c"],
             "regions":[[9,1,9,9,0,0,0,0]]},
            {"name":"_ZN1g4pick17h0123456789abcdefE","count":2,"filenames":["/a/x.c"],
             "regions":[[9,1,9,9,2,0,0,0]]},
            {"name":"harness","count":0,"filenames":["/h/y.rs"],"regions":[[1,1,1,2,0,0,0,0]]},
            {"name":"y.c:inlined","count":0,"filenames":["/a/y.c","/a/x.c"],
             "regions":[[1,1,2,2,0,1,0,0]]}],
          "totals":{"functions":{"count":3,"covered":1},"lines":{"count":10,"covered":4},
            "regions":{"count":8,"covered":3},"branches":{"count":2,"covered":1}}}]}"#;
        let c = Coverage::from_export(json).unwrap();
        assert_eq!(c.never_run["/a/x.c"], vec!["inlined", "rare"]);
        assert_eq!(c.never_run_count(), 2);
        assert_eq!(
            c.totals.regions,
            Count {
                count: 8,
                covered: 3
            }
        );
        assert_eq!(c.files.len(), 1);
    }
}
