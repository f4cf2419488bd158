//! The rooms of `soak/src` keep their order: every `.rs` file under it
//! (but `main.rs` and the binary's `cmd/`) belongs to the room that is
//! the first folder under `soak/src`, and a room takes (`crate::…`, a
//! doc link included, or a `super::` that leaves it) only from rooms on
//! floors below its own. So the rooms' import graph has no circle and no
//! arrow back up; the parts of a room (the modules right below it) take
//! from each other in no circle either; nor do the modules of the
//! `shadow` crate. (How long a file or a function may be: `sizes.rs`.)

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use common::rust_files;

/// THE CONTRACT: the rooms of `soak/src`, bottom → top, with their floor.
/// A room may import only rooms on a lower floor; rooms on one floor do
/// not import each other. A new room is added here, on the floor it
/// stands on; moving a room up or down is a change of the design.
const FLOORS: &[(&str, u32)] = &[
    // The state dir, the store, the config, declared allocators, systemd.
    ("foundation", 1),
    // libFuzzer, honggfuzz, the project layout, instrumentation.
    ("engines", 2),
    // engine outcome → intake → group → page; minimization, repro, import.
    ("pipeline", 3),
    // RSS drift workers and their findings (filed through the pipeline).
    ("rss", 4),
    // The soak: daemon, slices, scheduler, corpora, pending, status, verify.
    ("running", 5),
    // What the corpora ran of an allocator's own code.
    ("coverage", 6),
    // zoo, bench, pass, bisect.
    ("tools", 6),
    // The CI gate.
    ("quick", 7),
    // The dashboard.
    ("dash", 7),
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The library's files the rooms hold: all but `lib.rs`, `main.rs` and
/// the binary's `cmd/`.
fn room_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    files
        .into_iter()
        .filter(|f| {
            let rel = f.strip_prefix(src()).unwrap();
            !(rel == Path::new("main.rs") || rel == Path::new("lib.rs") || rel.starts_with("cmd"))
        })
        .collect()
}

/// The module path of a file under `soak/src`: `pipeline/intake/mod.rs`
/// is `[pipeline, intake]`, `rss/series.rs` is `[rss, series]`.
fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap();
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" {
        parts.push(stem.to_string());
    }
    parts
}

/// The text with plain `//` and `/* */` comments blanked; doc comments
/// (`///`, `//!`) stay, as their links are arrows too.
fn code(text: &str) -> String {
    text.lines()
        .map(|line| match line.find("//") {
            Some(at) if !line[at..].starts_with("///") && !line[at..].starts_with("//!") => {
                // A `//` inside a string (a URL, say) is not a comment;
                // an odd number of quotes before it means it is in one.
                if line[..at].matches('"').count() % 2 == 1 {
                    line.to_string()
                } else {
                    line[..at].to_string()
                }
            }
            _ => line.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The leading identifier of `s`.
fn ident(s: &str) -> &str {
    let end = s.find(|c: char| !is_ident(c)).unwrap_or(s.len());
    &s[..end]
}

/// The first segments of the paths a brace group `{a, b::c, d::{e}}`
/// starts (`s` starts just after its `{`).
fn group_heads(s: &str) -> Vec<String> {
    let mut heads = Vec::new();
    let mut depth = 0;
    let mut item_start = true;
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => item_start = true,
            c if item_start && depth == 0 && is_ident(c) => {
                heads.push(ident(&s[i..]).to_string());
                item_start = false;
            }
            c if c.is_whitespace() => {}
            _ if depth == 0 => item_start = false,
            _ => {}
        }
    }
    heads
}

/// One arrow out of a file: the room it goes to and the text behind it.
struct Use {
    room: String,
    file: String,
    line: usize,
    text: String,
}

/// The rooms a file takes from, through `crate::…` and through a
/// `super::` chain that climbs out of its room.
fn uses(rel: &Path, text: &str) -> Vec<Use> {
    let module = module_path(rel);
    let code = code(text);
    let mut found = Vec::new();
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    let snippet = |at: usize| {
        let line = code[..at].rfind('\n').map_or(0, |n| n + 1);
        let end = code[at..].find('\n').map_or(code.len(), |n| at + n);
        code[line..end].trim().to_string()
    };
    let mut push = |rooms: Vec<String>, at: usize| {
        for room in rooms {
            found.push(Use {
                room,
                file: rel.display().to_string(),
                line: line_of(at),
                text: snippet(at),
            });
        }
    };
    for (at, _) in code.match_indices("crate::") {
        if at > 0 && code[..at].ends_with(|c: char| is_ident(c) || c == ':') {
            continue; // `$crate::` or `other_crate::`
        }
        let rest = &code[at + "crate::".len()..];
        let heads = match rest.strip_prefix('{') {
            Some(group) => group_heads(group),
            None => vec![ident(rest).to_string()],
        };
        push(heads.into_iter().filter(|h| !h.is_empty()).collect(), at);
    }
    for (at, _) in code.match_indices("super::") {
        if at > 0 && code[..at].ends_with(|c: char| is_ident(c) || c == ':') {
            continue; // the second `super::` of a chain
        }
        let mut rest = &code[at..];
        let mut base = module.clone();
        while let Some(r) = rest.strip_prefix("super::") {
            base.pop();
            rest = r;
        }
        // Still inside its room: the arrow stays home (an inline `mod
        // tests`' `super::` is its own file, at worst read a level high).
        if !base.is_empty() {
            continue;
        }
        let heads = match rest.strip_prefix('{') {
            Some(group) => group_heads(group),
            None => vec![ident(rest).to_string()],
        };
        push(
            heads
                .into_iter()
                .filter(|h| !h.is_empty() && h != "self")
                .collect(),
            at,
        );
    }
    found
}

/// The room of a file: the first folder under `soak/src`, or the file's
/// own stem for a file right in it.
fn room_of(rel: &Path) -> String {
    module_path(rel)[0].clone()
}

/// Every arrow between two rooms, with the uses behind it.
fn arrows() -> BTreeMap<(String, String), Vec<Use>> {
    let mut arrows: BTreeMap<(String, String), Vec<Use>> = BTreeMap::new();
    for file in room_files() {
        let rel = file.strip_prefix(src()).unwrap();
        let from = room_of(rel);
        let text = std::fs::read_to_string(&file).unwrap();
        for u in uses(rel, &text) {
            if u.room != from {
                arrows
                    .entry((from.clone(), u.room.clone()))
                    .or_default()
                    .push(u);
            }
        }
    }
    arrows
}

fn behind(uses: &[Use]) -> String {
    let u = &uses[0];
    let more = match uses.len() {
        1 => String::new(),
        n => format!(" (and {} more)", n - 1),
    };
    format!("{}:{}: `{}`{more}", u.file, u.line, u.text)
}

/// A circle of the rooms' graph, if there is one: the rooms in order.
fn circle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        room: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|r| r == room) {
            return Some(path[at..].to_vec());
        }
        if done.contains(room) {
            return None;
        }
        path.push(room.to_string());
        for next in edges.get(room).into_iter().flatten() {
            if let Some(c) = visit(next, edges, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(room.to_string());
        None
    }
    let mut done = BTreeSet::new();
    for room in edges.keys() {
        if let Some(c) = visit(room, edges, &mut Vec::new(), &mut done) {
            return Some(c);
        }
    }
    None
}

#[test]
fn rooms_import_only_downward_and_in_no_circle() {
    let floors: BTreeMap<&str, u32> = FLOORS.iter().copied().collect();
    let arrows = arrows();
    let mut problems = Vec::new();
    let mut rooms: BTreeSet<String> = room_files()
        .iter()
        .map(|f| room_of(f.strip_prefix(src()).unwrap()))
        .collect();
    rooms.extend(arrows.keys().map(|(_, to)| to.clone()));
    for room in &rooms {
        if !floors.contains_key(room.as_str()) {
            problems.push(format!(
                "room `{room}` stands on no floor: add it to FLOORS in soak/tests/rooms.rs"
            ));
        }
    }
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for ((from, to), uses) in &arrows {
        edges.entry(from.clone()).or_default().insert(to.clone());
        if let (Some(f), Some(t)) = (floors.get(from.as_str()), floors.get(to.as_str())) {
            if t >= f {
                let how = if t == f { "beside it" } else { "above it" };
                problems.push(format!(
                    "`{from}` (floor {f}) imports `{to}` (floor {t}, {how}): {}",
                    behind(uses)
                ));
            }
        }
    }
    if let Some(c) = circle(&edges) {
        let mut line = format!("circle: {} -> {}", c.join(" -> "), c[0]);
        for (i, from) in c.iter().enumerate() {
            let to = &c[(i + 1) % c.len()];
            let uses = &arrows[&(from.clone(), to.clone())];
            line.push_str(&format!("; {from} -> {to}: {}", behind(uses)));
        }
        problems.push(line);
    }
    assert!(
        problems.is_empty(),
        "soak/src's rooms break their order:\n{}",
        problems.join("\n")
    );
}

/// The part of its room a module is in: the room and the module right
/// below it (`pipeline/intake/source.rs` is `pipeline::intake`).
fn part_of(module: &[String]) -> String {
    module[..module.len().min(2)].join("::")
}

/// The parts of its own room a file takes from: `crate::<room>::<part>`,
/// and a `super::` chain that climbs to the room.
fn parts_used(rel: &Path, text: &str) -> BTreeSet<String> {
    let module = module_path(rel);
    let room = module[0].clone();
    let code = code(text);
    let mut parts = BTreeSet::new();
    let mut add = |rest: &str| {
        let heads = match rest.strip_prefix('{') {
            Some(group) => group_heads(group),
            None => vec![ident(rest).to_string()],
        };
        for head in heads.into_iter().filter(|h| !h.is_empty() && h != "self") {
            parts.insert(format!("{room}::{head}"));
        }
    };
    let chained = |at: usize| at > 0 && code[..at].ends_with(|c: char| is_ident(c) || c == ':');
    let prefix = format!("crate::{room}::");
    for (at, _) in code.match_indices(&prefix) {
        if !chained(at) {
            add(&code[at + prefix.len()..]);
        }
    }
    for (at, _) in code.match_indices("super::") {
        if chained(at) {
            continue;
        }
        let mut rest = &code[at..];
        let mut base = module.clone();
        while let Some(r) = rest.strip_prefix("super::") {
            base.pop();
            rest = r;
        }
        if base.len() == 1 {
            add(rest);
        }
    }
    parts
}

#[test]
fn the_parts_of_a_room_import_in_no_circle() {
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in room_files() {
        let rel = file.strip_prefix(src()).unwrap();
        let from = part_of(&module_path(rel));
        let text = std::fs::read_to_string(&file).unwrap();
        for to in parts_used(rel, &text) {
            if to != from {
                edges.entry(from.clone()).or_default().insert(to);
            }
        }
    }
    if let Some(c) = circle(&edges) {
        panic!(
            "a circle inside a room: {} -> {}; move what both take down",
            c.join(" -> "),
            c[0]
        );
    }
}

#[test]
fn the_reader_sees_every_form_of_import() {
    let rel = Path::new("pipeline/intake/texts.rs");
    let text = "use crate::{foundation::state, engines::{self, project}};\n\
                use crate::rss; // crate::running in a comment\n\
                /// See [`crate::dash`].\n\
                use super::super::super::tools::zoo;\n\
                use super::Source;\n";
    let rooms: Vec<String> = uses(rel, text).into_iter().map(|u| u.room).collect();
    assert_eq!(rooms, ["foundation", "engines", "rss", "dash", "tools"]);
    let top = Path::new("foundation/mod.rs");
    let rooms: Vec<String> = uses(top, "use super::running::Soak;")
        .into_iter()
        .map(|u| u.room)
        .collect();
    assert_eq!(rooms, ["running"]);
}

/// One rule for a poisoned lock (`foundation::lock`): every lock of
/// `soak/src`, the binary's included, goes through it, so no panic of a
/// worker takes the soak down with it at the next lock.
#[test]
fn every_lock_takes_a_poisoned_value_as_it_is() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let own = src().join("foundation").join("lock.rs");
    let raw: Vec<String> = files
        .iter()
        .filter(|f| **f != own)
        .flat_map(|f| {
            let text = code(&std::fs::read_to_string(f).unwrap());
            let rel = f.strip_prefix(src()).unwrap().display().to_string();
            text.lines()
                .enumerate()
                .filter(|(_, l)| l.contains(".lock()"))
                .map(|(i, l)| format!("{rel}:{}: {}", i + 1, l.trim()))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        raw.is_empty(),
        "locks outside `foundation::lock::lock`:\n{}",
        raw.join("\n")
    );
}

/// The modules of the `shadow` crate import in no circle either: a file
/// stands for its module's part (`executor/race.rs` is
/// `executor::race`), an import of another top-level module is an arrow
/// to that module's own file, and a name the crate's `lib.rs` hands on
/// (`crate::Target`) is an arrow to `lib.rs`. Doc links aside: a module
/// of settings names the modules that read each setting.
#[test]
fn the_oracles_modules_import_in_no_circle() {
    let shadow = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shadow/src");
    let mut files = Vec::new();
    rust_files(&shadow, &mut files);
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let rel = file.strip_prefix(&shadow).unwrap();
        let module = module_path(rel);
        let text: String = std::fs::read_to_string(file)
            .unwrap()
            .lines()
            .filter(|l| !l.trim_start().starts_with("///") && !l.trim_start().starts_with("//!"))
            .map(|l| format!("{l}\n"))
            .collect();
        let from = part_of(&module);
        let mut to = parts_used(rel, &text);
        for u in uses(rel, &text) {
            match u.room.starts_with(|c: char| c.is_ascii_uppercase()) {
                true => to.insert("lib".to_string()),
                false => to.insert(u.room),
            };
        }
        to.remove(&from);
        to.remove(&module[0]);
        edges.entry(from).or_default().extend(to);
    }
    assert!(edges.len() > 40, "only {} modules read", edges.len());
    if let Some(c) = circle(&edges) {
        panic!(
            "a circle of shadow's modules: {} -> {}; move what both take down",
            c.join(" -> "),
            c[0]
        );
    }
}
