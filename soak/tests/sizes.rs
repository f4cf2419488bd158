//! How long the project's code may be: no `.rs` file of its crates over
//! [`MAX_LINES`], and no function of their `src/` over [`MAX_FN_LINES`]
//! (from its `fn` line to its closing brace). A long file is two rooms in
//! one; a long function is stages that a reader holds in their head, and
//! a long match is a table that wants its arms grouped.

mod common;

use std::path::{Path, PathBuf};

use common::rust_files;

/// The longest a `.rs` file of the project's crates may be.
const MAX_LINES: usize = 600;

/// The longest a function of the crates' `src/` may be.
const MAX_FN_LINES: usize = 80;

/// The crates whose `src/` and `tests/` [`MAX_LINES`] holds for: the
/// workspace's members and the fuzz targets.
const CRATES: [&str; 8] = [
    "declared-c",
    "drift",
    "fuzz_targets",
    "report",
    "shadow",
    "soak",
    "triage",
    "zoo",
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The `.rs` files of every crate's folders named `folders`.
fn files_of(folders: &[&str]) -> Vec<PathBuf> {
    let mut all = Vec::new();
    for crate_dir in CRATES.iter().map(|c| root().join(c)) {
        for dir in folders.iter().map(|f| crate_dir.join(f)) {
            if dir.is_dir() {
                rust_files(&dir, &mut all);
            }
        }
    }
    assert!(
        all.len() > 150,
        "only {} files read under {CRATES:?}",
        all.len()
    );
    all
}

#[test]
fn no_file_is_over_the_limit() {
    let long: Vec<String> = files_of(&["src", "tests"])
        .iter()
        .filter_map(|f| {
            let lines = std::fs::read_to_string(f).unwrap().lines().count();
            (lines > MAX_LINES).then(|| {
                format!(
                    "{}: {lines} lines (at most {MAX_LINES})",
                    f.strip_prefix(root()).unwrap().display()
                )
            })
        })
        .collect();
    assert!(
        long.is_empty(),
        "files over the limit:\n{}",
        long.join("\n")
    );
}

/// The name of the function a line opens (`pub(crate) unsafe fn name(`),
/// if it opens one.
fn opens_fn(line: &str) -> Option<&str> {
    let mut rest = line.trim_start();
    let qualifiers = [
        "pub(crate) ",
        "pub(super) ",
        "pub ",
        "const ",
        "async ",
        "unsafe ",
        "extern \"C\" ",
    ];
    while let Some(q) = qualifiers.iter().find(|q| rest.starts_with(**q)) {
        rest = &rest[q.len()..];
    }
    let name = rest.strip_prefix("fn ")?;
    let end = name.find(|c: char| !(c.is_alphanumeric() || c == '_'))?;
    Some(&name[..end])
}

/// Each function of `text` with its length in lines: `(name, first line,
/// lines)`. A function ends at the first `}` on its own line at its
/// `fn`'s indentation; a declaration without a body (`;`) is none.
fn functions(text: &str) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (at, line) in lines.iter().enumerate() {
        let Some(name) = opens_fn(line) else { continue };
        let indent = line.len() - line.trim_start().len();
        let Some(open) = (at..lines.len()).find(|&i| {
            let l = lines[i].trim_end();
            l.ends_with('{') || l.ends_with(';') || l.ends_with('}')
        }) else {
            continue;
        };
        let opened = lines[open].trim_end();
        if opened.ends_with(';') || opened.ends_with('}') {
            continue; // a declaration, or a body on one line
        }
        let close = format!("{}}}", " ".repeat(indent));
        if let Some(end) = (open + 1..lines.len()).find(|&i| lines[i].trim_end() == close) {
            found.push((name.to_string(), at + 1, end - at + 1));
        }
    }
    found
}

#[test]
fn no_function_is_over_the_limit() {
    let long: Vec<String> = files_of(&["src"])
        .iter()
        .flat_map(|f| {
            let rel = f.strip_prefix(root()).unwrap().display().to_string();
            functions(&std::fs::read_to_string(f).unwrap())
                .into_iter()
                .filter(|(_, _, lines)| *lines > MAX_FN_LINES)
                .map(move |(name, at, lines)| format!("{rel}:{at}: `{name}`, {lines} lines"))
        })
        .collect();
    assert!(
        long.is_empty(),
        "functions over {MAX_FN_LINES} lines (split each into stages, or a \
         long match into a function per family of arms):\n{}",
        long.join("\n")
    );
}

#[test]
fn the_reader_finds_every_function() {
    let text = "fn a() {\n    x();\n}\n\
                pub(crate) unsafe fn b(\n    y: u8,\n) -> u8 {\n    y\n}\n\
                    fn declared(&self);\n\
                    fn short() -> u8 { 1 }\n\
                impl X {\n    pub const fn c() {\n        if z {\n        }\n    }\n}\n";
    let found: Vec<(String, usize, usize)> = functions(text);
    assert_eq!(
        found,
        [
            ("a".to_string(), 1, 3),
            ("b".to_string(), 4, 5),
            ("c".to_string(), 12, 4)
        ]
    );
}
