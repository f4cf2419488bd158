//! jemalloc's OS layer, made to refuse on demand ([`Extras::fail_os`]):
//! extent hooks on every arena that forward each call to jemalloc's own
//! hooks and, while [`REFUSING`] is set, fail the two that get memory
//! from the OS, `alloc` (mmap) and `commit`, as the hooks of jemalloc's
//! own tests can (`test/include/test/extent_hooks.h`). Not `split` or
//! `merge`, which are bookkeeping on Linux: jemalloc abandons the address
//! space of an extent it could not split, and its retained growth then
//! doubled up to 64 TiB mappings within a minute of fuzzing. They are
//! installed at the first refusal and stay (a forward costs a call per
//! extent operation, not per block). The heaps' arenas (`arenas.create`)
//! keep jemalloc's own hooks.
//!
//! [`Extras::fail_os`]: crate::allocator::Extras::fail_os

use std::ffi::{c_uint, c_void};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use std::sync::OnceLock;

use tikv_jemalloc_sys as je;
use tikv_jemalloc_sys::extent_hooks_t as Hooks;

use super::ctl;

/// Set: the calls that get memory fail.
static REFUSING: AtomicBool = AtomicBool::new(false);
/// jemalloc's own hooks (arena 0's before ours), which ours forward to.
static USUAL: AtomicPtr<Hooks> = AtomicPtr::new(null_mut());

static OURS: Hooks = Hooks {
    alloc: Some(alloc),
    dalloc: Some(dalloc),
    destroy: Some(destroy),
    commit: Some(commit),
    decommit: Some(decommit),
    purge_lazy: Some(purge_lazy),
    purge_forced: Some(purge_forced),
    split: Some(split),
    merge: Some(merge),
};

/// Refuses (`true`) or serves again; `false` where jemalloc's hooks
/// could not be read. Each refusal puts ours on every arena that has
/// jemalloc's (the heaps' made since, the huge arena once made).
pub(super) fn refuse(refuse: bool) -> bool {
    static READ: OnceLock<bool> = OnceLock::new();
    let read = *READ.get_or_init(|| {
        let Some(usual) = ctl::hooks(0) else {
            return false;
        };
        // Before any arena has ours: making an arena with them calls them.
        USUAL.store(usual, Ordering::Release);
        make_huge_arena();
        true
    });
    if !read {
        return false;
    }
    if refuse {
        // An automatic arena not made yet reads as jemalloc's, and is made
        // with ours.
        for arena in 0..ctl::read::<u32>("arenas.narenas").unwrap_or(0) {
            if ctl::hooks(arena) == Some(usual()) {
                ctl::set_hooks(arena, &OURS);
            }
        }
    }
    REFUSING.store(refuse, Ordering::Release);
    true
}

/// jemalloc makes the arena for requests past `opt.oversize_threshold`
/// at the first such request, with its own hooks, and its metadata comes
/// from arena 0's: made in a window, it would fail for want of them.
fn make_huge_arena() {
    let Some(threshold) = ctl::read::<usize>("opt.oversize_threshold") else {
        return;
    };
    // SAFETY: a fresh request of a nonzero size, freed at once with the size it was made with.
    unsafe {
        let p = je::mallocx(threshold.max(1), 0);
        if !p.is_null() {
            je::sdallocx(p, threshold.max(1), 0);
        }
    }
}

fn refusing() -> bool {
    REFUSING.load(Ordering::Acquire)
}

/// jemalloc's hooks: set before ours are installed, and never freed.
fn usual() -> *mut Hooks {
    USUAL.load(Ordering::Acquire)
}

// SAFETY (every forward below): `usual()` is jemalloc's own hook table,
// read from `arena.0.extent_hooks` before ours were installed anywhere,
// so it is set whenever jemalloc calls ours, and static in jemalloc. Each
// forward passes jemalloc's arguments on unchanged to the same hook of
// that table, with the table's own pointer as the hooks argument; a hook
// the table lacks answers as jemalloc does for a missing one (opt out,
// or fail).

unsafe extern "C" fn alloc(
    _: *mut Hooks,
    addr: *mut c_void,
    size: usize,
    align: usize,
    zero: *mut bool,
    commit: *mut bool,
    arena: c_uint,
) -> *mut c_void {
    match ((*usual()).alloc, refusing()) {
        (Some(f), false) => f(usual(), addr, size, align, zero, commit, arena),
        _ => null_mut(),
    }
}

unsafe extern "C" fn dalloc(
    _: *mut Hooks,
    addr: *mut c_void,
    size: usize,
    committed: bool,
    arena: c_uint,
) -> bool {
    (*usual())
        .dalloc
        .is_none_or(|f| f(usual(), addr, size, committed, arena))
}

unsafe extern "C" fn destroy(
    _: *mut Hooks,
    addr: *mut c_void,
    size: usize,
    committed: bool,
    arena: c_uint,
) {
    if let Some(f) = (*usual()).destroy {
        f(usual(), addr, size, committed, arena)
    }
}

/// The shape of commit, decommit and both purges.
type Range = unsafe extern "C" fn(*mut Hooks, *mut c_void, usize, usize, usize, c_uint) -> bool;

/// Forwards a range hook; `true` (failed) when missing or `refused`.
unsafe fn range(
    hook: Option<Range>,
    refused: bool,
    (addr, size, offset, length, arena): (*mut c_void, usize, usize, usize, c_uint),
) -> bool {
    match (hook, refused) {
        (Some(f), false) => f(usual(), addr, size, offset, length, arena),
        _ => true,
    }
}

unsafe extern "C" fn commit(
    _: *mut Hooks,
    addr: *mut c_void,
    size: usize,
    offset: usize,
    length: usize,
    arena: c_uint,
) -> bool {
    let args = (addr, size, offset, length, arena);
    range((*usual()).commit, refusing(), args)
}

unsafe extern "C" fn decommit(
    _: *mut Hooks,
    addr: *mut c_void,
    size: usize,
    offset: usize,
    length: usize,
    arena: c_uint,
) -> bool {
    let args = (addr, size, offset, length, arena);
    range((*usual()).decommit, false, args)
}

unsafe extern "C" fn purge_lazy(
    _: *mut Hooks,
    addr: *mut c_void,
    size: usize,
    offset: usize,
    length: usize,
    arena: c_uint,
) -> bool {
    let args = (addr, size, offset, length, arena);
    range((*usual()).purge_lazy, false, args)
}

unsafe extern "C" fn purge_forced(
    _: *mut Hooks,
    addr: *mut c_void,
    size: usize,
    offset: usize,
    length: usize,
    arena: c_uint,
) -> bool {
    let args = (addr, size, offset, length, arena);
    range((*usual()).purge_forced, false, args)
}

unsafe extern "C" fn split(
    _: *mut Hooks,
    addr: *mut c_void,
    size: usize,
    size_a: usize,
    size_b: usize,
    committed: bool,
    arena: c_uint,
) -> bool {
    (*usual())
        .split
        .is_none_or(|f| f(usual(), addr, size, size_a, size_b, committed, arena))
}

unsafe extern "C" fn merge(
    _: *mut Hooks,
    addr_a: *mut c_void,
    size_a: usize,
    addr_b: *mut c_void,
    size_b: usize,
    committed: bool,
    arena: c_uint,
) -> bool {
    (*usual())
        .merge
        .is_none_or(|f| f(usual(), addr_a, size_a, addr_b, size_b, committed, arena))
}
