//! The inlined functions a counter's code came from, read from the
//! executable's DWARF (`addr2line`), as a symbolizer names a stack's
//! inlined frames. A helper the compiler inlined into several entry points
//! (`t_malloc` into `t_calloc` and `t_realloc`) then names its counters
//! in each of them alike, so one bug in it is one path inside the others.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use gimli::{EndianSlice, RunTimeEndian};

type Context = addr2line::Context<EndianSlice<'static, RunTimeEndian>>;

/// The executable's DWARF, parsed on first use (a replay that keys a
/// violation), with the names found so far by PC.
struct Frames {
    context: Context,
    names: HashMap<usize, Vec<String>>,
}

fn frames() -> Option<&'static Mutex<Frames>> {
    static FRAMES: OnceLock<Option<Mutex<Frames>>> = OnceLock::new();
    FRAMES
        .get_or_init(|| {
            use object::{Object, ObjectSection};
            let file = object::File::parse(&**super::exe()?).ok()?;
            let dwarf = gimli::Dwarf::load(|id| -> Result<_, gimli::Error> {
                let data = file
                    .section_by_name(id.name())
                    .and_then(|s| s.data().ok())
                    .unwrap_or(&[]);
                Ok(EndianSlice::new(data, RunTimeEndian::Little))
            })
            .ok()?;
            let context = Context::from_dwarf(dwarf).ok()?;
            Some(Mutex::new(Frames {
                context,
                names: HashMap::new(),
            }))
        })
        .as_ref()
}

/// The functions inlined at link-time address `pc` that are the
/// allocator's code ([`super::is_allocator_code`]), innermost first: empty
/// when the counter is the containing function's own code, or the
/// executable has no DWARF for it. All of them, not the innermost alone:
/// after optimization a block of an inlined helper may be attributed to
/// its caller, so only the whole chain names every helper a call ran.
pub fn names_at(pc: usize) -> Vec<String> {
    let Some(frames) = frames() else {
        return Vec::new();
    };
    let mut frames = frames.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(names) = frames.names.get(&pc) {
        return names.clone();
    }
    let names = lookup(&frames.context, pc);
    frames.names.insert(pc, names.clone());
    names
}

fn lookup(context: &Context, pc: usize) -> Vec<String> {
    let Ok(mut iter) = context.find_frames(pc as u64).skip_all_loads() else {
        return Vec::new();
    };
    let mut names: Vec<Option<String>> = Vec::new();
    while let Ok(Some(frame)) = iter.next() {
        names.push(frame.function.as_ref().and_then(|f| {
            let raw = f.raw_name().ok()?;
            let name = format!("{:#}", rustc_demangle::demangle(&raw));
            // A Rust name without its path cannot be told from a C one:
            // only C's plain names are taken as they are.
            let c = matches!(
                f.language,
                Some(
                    gimli::DW_LANG_C89 | gimli::DW_LANG_C99 | gimli::DW_LANG_C11 | gimli::DW_LANG_C
                )
            );
            (c || name.contains("::")).then_some(name)
        }));
    }
    // The last is the containing function, which its symbol names.
    names.pop();
    names
        .into_iter()
        .flatten()
        .filter(|name| super::is_allocator_code(name))
        .collect()
}
