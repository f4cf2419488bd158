//! The inlined functions a counter's code came from, read from its
//! object's DWARF (`addr2line`), as a symbolizer names a stack's
//! inlined frames. A helper the compiler inlined into several entry points
//! (`t_malloc` into `t_calloc` and `t_realloc`) then names its counters
//! in each of them alike, so one bug in it is one path inside the others.
//!
//! A fuzz build's limited debug info names an inlined Rust function by
//! its bare name (`block`, no path, no linkage name). A path leaves such
//! a frame out; the instruction that computed a value is named by it, by
//! its crate, from the source file its code is in ([`innermost_at`]):
//! rustc names each compile unit `<crate root file>/@/<crate>.<hash>-cgu.<n>`,
//! so a file under a crate's root is that crate's (`planted::block`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use gimli::{EndianSlice, RunTimeEndian};

use super::objects::{objects, Object};

type Slice = EndianSlice<'static, RunTimeEndian>;
type Context = addr2line::Context<Slice>;

/// An object's DWARF, parsed on first use (a replay that keys a
/// violation), with the frames found so far by PC.
struct Frames {
    context: Context,
    /// (the directory of a crate's root file, that crate), longest first.
    crates: Vec<(PathBuf, String)>,
    frames: HashMap<usize, Vec<Frame>>,
}

/// An inlined frame that is the allocator's code.
#[derive(Clone)]
struct Frame {
    name: String,
    /// Its name is its bare one with its crate's, from its file.
    by_file: bool,
}

/// `object`'s [`Frames`], parsed on its first use (one cell per loaded
/// object, in the order of [`objects`]).
fn frames(object: &'static Object) -> Option<&'static Mutex<Frames>> {
    static FRAMES: OnceLock<Vec<OnceLock<Option<Mutex<Frames>>>>> = OnceLock::new();
    let all = objects();
    let cells = FRAMES.get_or_init(|| all.iter().map(|_| OnceLock::new()).collect());
    let at = all.iter().position(|o| std::ptr::eq(o, object))?;
    cells[at]
        .get_or_init(|| {
            use object::{Object as _, ObjectSection};
            let file = object::File::parse(object.bytes).ok()?;
            let dwarf = gimli::Dwarf::load(|id| -> Result<_, gimli::Error> {
                let data = file
                    .section_by_name(id.name())
                    .and_then(|s| s.data().ok())
                    .unwrap_or(&[]);
                Ok(EndianSlice::new(data, RunTimeEndian::Little))
            })
            .ok()?;
            let crates = crate_roots(&dwarf);
            let context = Context::from_dwarf(dwarf).ok()?;
            Some(Mutex::new(Frames {
                context,
                crates,
                frames: HashMap::new(),
            }))
        })
        .as_ref()
}

/// The functions inlined at link-time address `pc` that are the
/// allocator's code ([`super::is_allocator_code`]) and have a path in the
/// DWARF of `object`, innermost first: empty when the counter is the
/// containing function's own code, or the object has no DWARF for it. All of
/// them, not the innermost alone: after optimization a block of an
/// inlined helper may be attributed to its caller, so only the whole
/// chain names every helper a call ran.
pub(super) fn names_at(object: &'static Object, pc: usize) -> Vec<String> {
    frames_at(object, pc)
        .into_iter()
        .filter(|f| !f.by_file)
        .map(|f| f.name)
        .collect()
}

/// The innermost function inlined at link-time address `pc` that is the
/// allocator's code, a bare-named one too (named by its crate): what a
/// symbolizer names the frame of the instruction that computed a value.
pub(super) fn innermost_at(object: &'static Object, pc: usize) -> Option<String> {
    frames_at(object, pc).into_iter().next().map(|f| f.name)
}

fn frames_at(object: &'static Object, pc: usize) -> Vec<Frame> {
    let Some(frames) = frames(object) else {
        return Vec::new();
    };
    let mut frames = frames.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(found) = frames.frames.get(&pc) {
        return found.clone();
    }
    let found = lookup(&frames.context, &frames.crates, pc);
    frames.frames.insert(pc, found.clone());
    found
}

fn lookup(context: &Context, crates: &[(PathBuf, String)], pc: usize) -> Vec<Frame> {
    let Ok(mut iter) = context.find_frames(pc as u64).skip_all_loads() else {
        return Vec::new();
    };
    let mut found: Vec<Option<Frame>> = Vec::new();
    while let Ok(Some(frame)) = iter.next() {
        found.push(frame.function.as_ref().and_then(|f| {
            let raw = f.raw_name().ok()?;
            let name = format!("{:#}", rustc_demangle::demangle(&raw));
            // A Rust name without its path cannot be told from a C one:
            // C's plain names are taken as they are, a bare Rust one is
            // named by its file's crate.
            let c = matches!(
                f.language,
                Some(
                    gimli::DW_LANG_C89 | gimli::DW_LANG_C99 | gimli::DW_LANG_C11 | gimli::DW_LANG_C
                )
            );
            if c || name.contains("::") {
                return Some(Frame {
                    name,
                    by_file: false,
                });
            }
            let file = frame.location.as_ref()?.file?;
            let (_, owner) = crates
                .iter()
                .find(|(root, _)| Path::new(file).starts_with(root))?;
            Some(Frame {
                name: format!("{owner}::{name}"),
                by_file: true,
            })
        }));
    }
    // The last is the containing function, which its symbol names.
    found.pop();
    found
        .into_iter()
        .flatten()
        .filter(|f| super::is_allocator_code(&f.name))
        .collect()
}

/// Each Rust crate's root directory (its root file's, or that one's
/// parent when it is `src`) and name, from the compile units' names;
/// longest first, so a crate inside another's directory is found first.
fn crate_roots(dwarf: &gimli::Dwarf<Slice>) -> Vec<(PathBuf, String)> {
    let mut crates = Vec::new();
    let mut units = dwarf.units();
    while let Ok(Some(header)) = units.next() {
        let Ok(unit) = dwarf.unit(header) else {
            continue;
        };
        let Some(name) = unit.name.and_then(|n| n.to_string().ok()) else {
            continue;
        };
        let Some((root_file, cgu)) = name.split_once("/@/") else {
            continue;
        };
        let owner = cgu.split('.').next().unwrap_or(cgu).to_string();
        let comp_dir = unit.comp_dir.and_then(|d| d.to_string().ok()).unwrap_or("");
        let root_file = Path::new(comp_dir).join(root_file);
        let Some(mut dir) = root_file.parent().map(Path::to_path_buf) else {
            continue;
        };
        if dir.file_name().is_some_and(|n| n == "src") {
            dir.pop();
        }
        crates.push((dir, owner));
    }
    crates.sort_by_key(|(dir, _)| std::cmp::Reverse(dir.as_os_str().len()));
    crates.dedup();
    crates
}
