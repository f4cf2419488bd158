//! `glibc`: the C library's own malloc, called past any interposer.
//!
//! In the fuzz builds ASan replaces `malloc` for the whole process, so
//! `system` there is ASan's allocator and glibc's arenas stay empty.
//! `glibc` is libc.so.6 opened as a `dylib:` is: its malloc family is
//! resolved in the library itself, so glibc's code is what the fuzzer
//! runs. Outside ASan it is the code `system` runs.

use std::ffi::{c_void, CStr};
use std::sync::OnceLock;

use super::{own_symbol, Dylib};
use crate::allocator::Attack;

/// glibc's `mallinfo2`, as libc.so.6 defines it (ASan's interposer
/// would answer for its own heap).
type Mallinfo2 = unsafe extern "C" fn() -> libc::mallinfo2;

static MALLINFO2: OnceLock<Mallinfo2> = OnceLock::new();

/// What glibc's malloc stops: a double free (its tcache's key, 2.29 on;
/// its fastbin's and bins' checks past a full tcache), a free of memory
/// it never handed out whose header reads zero (`free(): invalid
/// pointer`), and a freed block's link overwritten (safe-linking, 2.32
/// on, turns the written pointer into another, often misaligned one,
/// `malloc(): unaligned tcache chunk detected`), and a free of a pointer
/// inside a block whose bytes before it read zero (`free(): invalid
/// pointer`). Not an overflow into the next chunk's size, nor a write of
/// a chunk's own size: its tcache takes the grown chunk unchecked and
/// hands it out over the next block, as the overlapping-chunks technique
/// does.
const STOPS: [Attack; 4] = [
    Attack::DoubleFree,
    Attack::ForeignFree,
    Attack::FreedWrite,
    Attack::InteriorFree,
];

/// libc.so.6 as glibc's malloc, with its arena walk as the heap check.
pub fn open() -> Result<Dylib, String> {
    let path = libc_path()?;
    let glibc = Dylib::open_as("glibc", &path)?;
    let (lib, own) = glibc.library.as_ref().expect("opened from a file");
    // SAFETY: `mallinfo2` takes no arguments and returns its struct by
    // value, the type `Mallinfo2` gives it (glibc ≥ 2.33).
    let walk = unsafe { own_symbol::<Mallinfo2>(lib, own, "", "mallinfo2") }
        .ok_or_else(|| format!("`{path}` has no mallinfo2 (glibc 2.33 or later has)"))?;
    MALLINFO2.get_or_init(|| walk);
    let mut glibc = glibc.with_fork_safe().with_stops(&STOPS);
    glibc.more.heap_check = Some(walk_arenas);
    serves_from_its_arenas(&glibc, walk)?;
    Ok(glibc)
}

/// Whether a block of the malloc resolved is in glibc's arenas: were it
/// an interposer's (ASan's), they would count no byte in use.
fn serves_from_its_arenas(glibc: &Dylib, walk: Mallinfo2) -> Result<(), String> {
    // SAFETY: one block from the resolved malloc, given back to its free
    // (null is a valid argument); `walk` is libc's `mallinfo2`.
    let in_use = unsafe {
        let p = (glibc.malloc)(4096);
        let info = walk();
        (glibc.free)(p);
        info.uordblks + info.hblkhd
    };
    match in_use >= 4096 {
        true => Ok(()),
        false => Err(format!(
            "allocator `glibc`: a 4096-byte block of the malloc resolved in libc is not in glibc's arenas ({in_use} bytes in use): something interposes it; use `system`"
        )),
    }
}

/// The file libc was loaded from: where `gnu_get_libc_version`, which
/// no sanitizer interposes, is defined.
fn libc_path() -> Result<String, String> {
    let f = libc::gnu_get_libc_version as *const c_void;
    // SAFETY: `dladdr` only reads the loader's tables for `f`, a function
    // of this process, and fills `info`; the name it gives is the loader's
    // own string, alive while the library stays loaded (libc always is).
    unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        if libc::dladdr(f, &mut info) == 0 || info.dli_fname.is_null() {
            return Err(
                "allocator `glibc`: the loader does not say which file libc is; use `system`"
                    .into(),
            );
        }
        CStr::from_ptr(info.dli_fname)
            .to_str()
            .map(String::from)
            .map_err(|e| format!("allocator `glibc`: libc's path is not UTF-8: {e}"))
    }
}

/// The heap check of `glibc`: `mallinfo2` walks every free chunk of every
/// arena's fast and regular bins, and glibc ends the process
/// (`malloc_printerr`, SIGABRT) at a fast chunk that is misaligned; a free
/// list broken another way faults in the walk. Either is a deadly signal
/// right after the op that broke it. A walk that comes back is 0.
unsafe extern "C" fn walk_arenas() -> i32 {
    let walk = MALLINFO2.get().expect("set before the check is");
    // SAFETY: libc's own `mallinfo2`, which takes each arena's lock.
    let info = unsafe { walk() };
    std::hint::black_box(info);
    0
}
