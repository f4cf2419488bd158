//! A C allocator loaded from a shared library with dlopen:
//! `dylib:/path/lib.so` (symbols `malloc`, `free`, ...) or
//! `dylib:/path/lib.so:mi_` (symbols `mi_malloc`, `mi_free`, ...); or the
//! same family linked into the binary ([`CFunctions`], from a config's C
//! sources).

use std::ffi::c_void;
use std::path::Path;
use std::ptr;

use libloading::Library;

use super::{malloc_serves, Allocator, Extras, Heaps, ReallocToZero, ZeroedFrom};

mod check;
mod extras;
mod glibc;
mod heaps;

pub use check::{HeapCheckFn, HeapCheckReturns, InUseFn, WalkFn};
pub use glibc::open as open_glibc;
pub use heaps::CHeapApi;

pub type Malloc = unsafe extern "C" fn(usize) -> *mut c_void;
pub type Free = unsafe extern "C" fn(*mut c_void);
pub type Calloc = unsafe extern "C" fn(usize, usize) -> *mut c_void;
pub type Realloc = unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void;
pub type Usable = unsafe extern "C" fn(*mut c_void) -> usize;
pub type PosixMemalign = unsafe extern "C" fn(*mut *mut c_void, usize, usize) -> i32;
pub type AlignSize = unsafe extern "C" fn(usize, usize) -> *mut c_void;
pub type ReallocAligned = unsafe extern "C" fn(*mut c_void, usize, usize) -> *mut c_void;
pub type FreeSize = unsafe extern "C" fn(*mut c_void, usize);
pub type FreeSizeAligned = unsafe extern "C" fn(*mut c_void, usize, usize);
pub type GoodSizeFn = unsafe extern "C" fn(usize) -> usize;

/// How the library allocates with alignment, best first.
enum AlignedApi {
    /// `posix_memalign(&p, align, size)`: any size.
    PosixMemalign(PosixMemalign),
    /// `memalign(align, size)`: any size.
    Memalign(AlignSize),
    /// C11 `aligned_alloc(align, size)`: `size` must be a multiple of
    /// `align`, so the adapter rounds it up (the block is then larger than
    /// asked, which a usable size may say).
    AlignedAlloc(AlignSize),
    /// mimalloc's `mi_malloc_aligned(size, align)`: any size.
    SizeFirst(AlignSize),
    None,
}

pub struct Dylib {
    name: String,
    malloc: Malloc,
    free: Free,
    calloc: Option<Calloc>,
    realloc: Option<Realloc>,
    usable: Option<Usable>,
    aligned: AlignedApi,
    more: CExtras,
    /// What a config declared of it (`with_*`); a library has none.
    properties: Properties,
    /// The loaded library and its file; `None` when the functions are
    /// linked in.
    library: Option<(Library, std::path::PathBuf)>,
    /// What a declaration named that the library lacks (`with_heap_check`):
    /// [`Dylib::declared`] says so.
    missing: Option<String>,
    /// Set up by a malloc and a free before its heap is first checked.
    set_up: std::sync::Once,
}

/// A linked C allocator's declared properties, as a `GlobalAlloc`'s are.
#[derive(Clone, Copy, Default)]
struct Properties {
    size_classes: Option<&'static str>,
    arena_size: Option<usize>,
    max_align: Option<usize>,
    single_threaded: bool,
    /// Whether a child forked from a busy process can allocate
    /// ([`Allocator::fork_safe`]).
    fork_safe: bool,
    /// The heap corruptions it stops ([`Allocator::stops`]).
    stops: &'static [super::Attack],
    /// The largest request whose usable size `good_size` gives exactly
    /// (0: none; above it, at least the request).
    good_size_exact_up_to: usize,
    heap_check_returns: HeapCheckReturns,
    /// Where its zeroed realloc's zeroing starts, if it declares less
    /// than [`ZeroedFrom::Written`].
    zeroed_from: Option<ZeroedFrom>,
}

/// A C allocator's functions, linked into the binary: what the glue crate
/// of a config's C allocator passes to [`super::linked_c`] (a C shim fills
/// it from the allocator's symbols, so C and Rust agree on this layout).
/// `None` is a function the allocator does not have; the aligned calls are
/// tried in this order, as for a library.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CFunctions {
    pub malloc: Malloc,
    pub free: Free,
    pub calloc: Option<Calloc>,
    pub realloc: Option<Realloc>,
    /// `malloc_usable_size` or `usable_size`.
    pub usable_size: Option<Usable>,
    pub posix_memalign: Option<PosixMemalign>,
    pub memalign: Option<AlignSize>,
    pub aligned_alloc: Option<AlignSize>,
    /// `malloc_aligned(size, align)`, size first (mimalloc's order).
    pub malloc_aligned: Option<AlignSize>,
    /// The calls beyond the malloc family, mimalloc's names and argument
    /// orders: each runs the allocator's own code for its op where the
    /// adapter would otherwise emulate it or skip the op.
    pub more: CExtras,
}

/// A C allocator's own calls beyond the malloc family (`None`: it has
/// none of that name).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct CExtras {
    /// `realloc_aligned(p, newsize, align)`: a realloc that keeps an
    /// over-aligned block's alignment (else alloc, copy and free here).
    pub realloc_aligned: Option<ReallocAligned>,
    /// `rezalloc(p, newsize)`: the bytes past the old usable size read 0.
    pub rezalloc: Option<Realloc>,
    /// `rezalloc_aligned(p, newsize, align)`.
    pub rezalloc_aligned: Option<ReallocAligned>,
    /// `expand(p, newsize)`: `p` when the block holds `newsize` in place,
    /// else null.
    pub expand: Option<Realloc>,
    /// `free_size(p, size)`: a free told the size asked for.
    pub free_size: Option<FreeSize>,
    /// `free_size_aligned(p, size, align)`.
    pub free_size_aligned: Option<FreeSizeAligned>,
    /// `good_size(size)`: the usable size a request of `size` gets.
    pub good_size: Option<GoodSizeFn>,
    /// mimalloc's heap API (`heap_new`, `heap_malloc`, ...).
    pub heap: CHeapApi,
    /// `heap_check()`: the allocator's own check of its whole heap
    /// ([`Allocator::heap_check`]).
    pub heap_check: Option<HeapCheckFn>,
    /// `in_use()`: its own count of bytes in blocks handed out and not
    /// had back ([`Allocator::bytes_in_use`]).
    pub in_use: Option<InUseFn>,
    /// `walk(visit, arg)`: its own walk of the blocks it holds in use
    /// ([`Allocator::blocks_in_use`]).
    pub walk: Option<WalkFn>,
}

/// What a library without an aligned API can still serve.
const MALLOC_ALIGN: usize = 8;

/// The symbol `prefix` + `name` as the library itself defines it. A dlsym
/// on a library handle also finds its dependencies' symbols (libc's
/// `malloc`), which must never stand in for the allocator under test.
unsafe fn own_symbol<T: Copy>(lib: &Library, own: &Path, prefix: &str, name: &str) -> Option<T> {
    // SAFETY: `T` is the symbol's own `unsafe extern "C" fn` type (as the caller promises).
    let f: T = *unsafe { lib.get::<T>(format!("{prefix}{name}\0").as_bytes()) }.ok()?;
    // SAFETY: `Dl_info` is plain C data (pointers and ints), valid all zero.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: `T` is a fn pointer, pointer-sized (as the caller promises); `dladdr`
    // only reads the address and writes `info`.
    let found =
        unsafe { libc::dladdr(std::mem::transmute_copy::<T, *const c_void>(&f), &mut info) };
    if found == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: a non-null `dli_fname` of a successful `dladdr` is a NUL-terminated path.
    let file = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) }
        .to_str()
        .ok()?;
    (std::fs::canonicalize(file).ok()? == own).then_some(f)
}

/// A `dylib:` spec's library path and symbol prefix: `path[:prefix]`,
/// the prefix after the last colon past the path's last slash.
pub fn split_spec(spec: &str) -> (&str, &str) {
    let slash = spec.rfind('/').unwrap_or(0);
    match spec[slash..].rfind(':') {
        Some(i) => (&spec[..slash + i], &spec[slash + i + 1..]),
        None => (spec, ""),
    }
}

/// Why the library at `path` did not load (`e`, dlopen's error), with a
/// hint at what to do about it.
fn load_error(path: &str, e: libloading::Error) -> String {
    let e = e.to_string();
    let undefined = e.split_once("undefined symbol: ").map(|(_, s)| s);
    let sanitized = undefined.is_some_and(|s| {
        ["__asan_", "__sancov_", "__sanitizer_"]
            .iter()
            .any(|p| s.starts_with(p))
    });
    // Initial-exec thread-locals (jemalloc's default) need room
    // only a library linked at start-up has.
    let static_tls = e.contains("static TLS block");
    let hint = match (sanitized, undefined) {
        _ if static_tls => "its thread-locals use the initial-exec TLS model, which a library loaded with dlopen has no room for: build it with -ftls-model=global-dynamic (jemalloc: configure --disable-initial-exec-tls)",
        // Only binaries that export their sanitizer runtime can
        // resolve it (the fuzz builds: fuzz_targets/build.rs).
        (true, _) => "a library built with -fsanitize loads only in the fuzz binaries, which export the sanitizer runtime (`allocsoak build` rebuilds them); build it plain for anything else",
        // A symbol its firmware or build would define (umm_malloc's
        // `UMM_MALLOC_CFG_HEAP_SIZE`).
        (false, Some(_)) => "it needs a symbol that nothing loaded defines: link the library with everything it uses (`-Wl,--no-undefined` lists what is missing)",
        (false, None) => "give an absolute path to a .so",
    };
    format!("cannot load allocator library `{path}`: {e}; {hint}")
}

/// The malloc family and its extra calls as `lib` (the file `own`,
/// loaded from `path`) itself defines them, each `prefix` + its name
/// ([`own_symbol`]); an error when it has no `malloc` or `free`.
fn own_functions(
    lib: &Library,
    own: &Path,
    path: &str,
    prefix: &str,
) -> Result<CFunctions, String> {
    let need = |name: &str| {
        format!("`{path}` has no `{prefix}{name}`; pass the symbol prefix as dylib:{path}:<prefix>")
    };
    // A macro, not a closure: each symbol has its own type.
    macro_rules! symbol {
        ($name:literal) => {
            // SAFETY: `T` is the field's `unsafe extern "C" fn` type, pointer-sized as
            // `own_symbol` needs; assumes the symbol has that C signature (not checkable).
            unsafe { own_symbol(lib, own, prefix, $name) }
        };
    }
    Ok(CFunctions {
        malloc: symbol!("malloc").ok_or_else(|| need("malloc"))?,
        free: symbol!("free").ok_or_else(|| need("free"))?,
        calloc: symbol!("calloc"),
        realloc: symbol!("realloc"),
        usable_size: symbol!("malloc_usable_size").or_else(|| symbol!("usable_size")),
        posix_memalign: symbol!("posix_memalign"),
        memalign: symbol!("memalign"),
        aligned_alloc: symbol!("aligned_alloc"),
        malloc_aligned: symbol!("malloc_aligned"),
        more: CExtras {
            realloc_aligned: symbol!("realloc_aligned"),
            rezalloc: symbol!("rezalloc"),
            rezalloc_aligned: symbol!("rezalloc_aligned"),
            expand: symbol!("expand"),
            free_size: symbol!("free_size"),
            free_size_aligned: symbol!("free_size_aligned"),
            good_size: symbol!("good_size"),
            heap: CHeapApi {
                new: symbol!("heap_new"),
                delete: symbol!("heap_delete"),
                destroy: symbol!("heap_destroy"),
                malloc: symbol!("heap_malloc"),
                zalloc: symbol!("heap_zalloc"),
                malloc_aligned: symbol!("heap_malloc_aligned"),
                zalloc_aligned: symbol!("heap_zalloc_aligned"),
                realloc: symbol!("heap_realloc"),
                realloc_aligned: symbol!("heap_realloc_aligned"),
                collect: symbol!("heap_collect"),
                contains: symbol!("heap_contains")
                    .or_else(|| symbol!("heap_check_owned"))
                    .or_else(|| symbol!("heap_contains_block")),
                visit_blocks: symbol!("heap_visit_blocks"),
                rezalloc: symbol!("heap_rezalloc"),
                rezalloc_aligned: symbol!("heap_rezalloc_aligned"),
            },
            heap_check: symbol!("heap_check"),
            in_use: symbol!("in_use"),
            walk: symbol!("walk"),
        },
    })
}

impl Dylib {
    /// Zeroes block `p` (of `size` bytes, aligned to `align`) up to its
    /// usable size, as a calloc would have, but never where ASan poisons
    /// (an oversized answer is the executor's finding, not a write here).
    ///
    /// # Safety
    /// `p` is a live block of this allocator, just allocated with `size`
    /// and `align`, not yet handed out.
    pub(super) unsafe fn zero_whole(&self, p: *mut u8, size: usize, align: usize) {
        // SAFETY: as the caller says; the usable size is the block's own
        // answer, cut where ASan's poison starts, and never less than
        // `size`, the bytes the block was asked for.
        unsafe {
            let usable = self.usable_size(p, size, align).max(size);
            let reach = crate::poison::poisoned_from(p, size, usable).unwrap_or(usable);
            ptr::write_bytes(p, 0, reach);
        }
    }
    /// Opens `path[:prefix]` and resolves the malloc family, under the name
    /// `dylib:<spec>`.
    pub fn open(spec: &str) -> Result<Dylib, String> {
        Dylib::open_as(&format!("dylib:{spec}"), spec)
    }

    /// [`Dylib::open`], under `name` (a config's declared library).
    pub fn open_as(name: &str, spec: &str) -> Result<Dylib, String> {
        let (path, prefix) = split_spec(spec);
        // SAFETY: assumes the library the user named is a well-behaved C allocator: loading runs
        // its initializers (and unloading its finalizers), which nothing here can check.
        let lib = unsafe { Library::new(path) }.map_err(|e| load_error(path, e))?;
        let own =
            std::fs::canonicalize(path).map_err(|e| format!("cannot resolve `{path}`: {e}"))?;
        let fns = own_functions(&lib, &own, path, prefix)?;
        Ok(Dylib {
            library: Some((lib, own)),
            ..Dylib::linked(name, fns)
        })
    }

    /// The functions `fns`, linked into the binary, under `name`.
    pub fn linked(name: &str, fns: CFunctions) -> Dylib {
        let aligned = if let Some(f) = fns.posix_memalign {
            AlignedApi::PosixMemalign(f)
        } else if let Some(f) = fns.memalign {
            AlignedApi::Memalign(f)
        } else if let Some(f) = fns.aligned_alloc {
            AlignedApi::AlignedAlloc(f)
        } else if let Some(f) = fns.malloc_aligned {
            AlignedApi::SizeFirst(f)
        } else {
            AlignedApi::None
        };
        Dylib {
            name: name.to_string(),
            malloc: fns.malloc,
            free: fns.free,
            calloc: fns.calloc,
            realloc: fns.realloc,
            usable: fns.usable_size,
            aligned,
            more: fns.more,
            properties: Properties::default(),
            library: None,
            missing: None,
            set_up: std::sync::Once::new(),
        }
    }

    /// Itself, or what its declaration named that the library lacks.
    pub fn declared(self) -> Result<Dylib, String> {
        match self.missing {
            Some(missing) => Err(missing),
            None => Ok(self),
        }
    }

    /// Declares it a port of another allocator's size classes
    /// (`"mimalloc"`): `diff_mimalloc` then requires equal usable sizes.
    pub fn with_size_classes(mut self, of: &'static str) -> Self {
        self.properties.size_classes = Some(of);
        self
    }

    /// Declares that it serves every block from one region of `size` bytes
    /// (see [`Allocator::arena`]).
    pub fn with_arena(mut self, size: usize) -> Self {
        self.properties.arena_size = Some(size);
        self
    }

    /// Caps the alignments programs ask of it.
    pub fn with_max_align(mut self, align: usize) -> Self {
        self.properties.max_align = Some(align);
        self
    }

    /// Declares that `good_size` gives the usable size exactly for
    /// requests up to `size` bytes (see [`GoodSize`](super::GoodSize)).
    pub fn with_good_size_exact_up_to(mut self, size: usize) -> Self {
        self.properties.good_size_exact_up_to = size;
        self
    }

    /// Declares where its zeroed realloc's zero bytes start (see
    /// [`ZeroedFrom`]).
    pub fn with_zeroed_from(mut self, from: ZeroedFrom) -> Self {
        self.properties.zeroed_from = Some(from);
        self
    }

    /// Declares that a child forked while other threads are in it can
    /// allocate (see [`Allocator::fork_safe`]).
    pub fn with_fork_safe(mut self) -> Self {
        self.properties.fork_safe = true;
        self
    }

    /// Declares the heap corruptions it stops (see [`Allocator::stops`]).
    pub fn with_stops(mut self, stops: &'static [super::Attack]) -> Self {
        self.properties.stops = stops;
        self
    }

    /// Declares it single-threaded (see [`Allocator::single_threaded`]).
    pub fn with_single_thread(mut self) -> Self {
        self.properties.single_threaded = true;
        self
    }

    unsafe fn aligned(&self, size: usize, align: usize) -> *mut u8 {
        // SAFETY: each call takes sizes and the caller's power-of-two `align`, and
        // `posix_memalign` writes only `p`, a local.
        unsafe {
            match self.aligned {
                AlignedApi::PosixMemalign(f) => {
                    let mut p = ptr::null_mut();
                    match f(&mut p, align.max(std::mem::size_of::<usize>()), size) {
                        0 => p.cast(),
                        _ => ptr::null_mut(),
                    }
                }
                AlignedApi::Memalign(f) => f(align, size).cast(),
                AlignedApi::AlignedAlloc(f) => match size.checked_next_multiple_of(align) {
                    Some(rounded) => f(align, rounded).cast(),
                    None => ptr::null_mut(),
                },
                AlignedApi::SizeFirst(f) => f(size, align).cast(),
                AlignedApi::None => ptr::null_mut(),
            }
        }
    }
}

impl Allocator for Dylib {
    fn name(&self) -> &str {
        &self.name
    }

    /// A zeroed request malloc's alignment serves is the library's own
    /// `calloc`, so a calloc that fails to zero is caught. C has no aligned
    /// calloc: an over-aligned zeroed request (or any, when the library has
    /// no `calloc`) is zeroed here, after its aligned allocation, and the
    /// library's zeroing goes unchecked there. Zeroed here, it is zeroed
    /// whole, as a calloc zeroes it: a later zeroed realloc is held to the
    /// block's slack reading zero ([`ZeroedFrom::Written`]).
    unsafe fn alloc(&self, size: usize, align: usize, zeroed: bool) -> *mut u8 {
        let plain = malloc_serves(size, align);
        if let (true, true, Some(calloc)) = (zeroed, plain, self.calloc) {
            // SAFETY: C `calloc` takes only sizes.
            return unsafe { calloc(1, size) }.cast();
        }
        let p = if plain {
            // SAFETY: C `malloc` takes only a size.
            unsafe { (self.malloc)(size) }.cast()
        } else {
            // SAFETY: `align` is a power of two the allocator serves (this fn's contract).
            unsafe { self.aligned(size, align) }
        };
        if zeroed && !p.is_null() {
            // SAFETY: `p` was just allocated with `size` and `align`, not yet handed out.
            unsafe { self.zero_whole(p, size, align) };
        }
        p
    }

    unsafe fn calloc(&self, count: usize, size: usize) -> *mut u8 {
        match self.calloc {
            // SAFETY: C `calloc` takes only sizes (and checks their product).
            Some(f) => unsafe { f(count, size) }.cast(),
            None => count
                .checked_mul(size)
                // SAFETY: alignment 1 is a power of two every allocator serves.
                .map_or(ptr::null_mut(), |n| unsafe { self.alloc(n, 1, true) }),
        }
    }

    unsafe fn realloc(&self, p: *mut u8, old: usize, align: usize, new_size: usize) -> *mut u8 {
        if let (Some(f), true) = (self.realloc, malloc_serves(new_size, align)) {
            // SAFETY: `p` is a live block of this allocator (this fn's contract).
            return unsafe { f(p.cast(), new_size) }.cast();
        }
        if let Some(f) = self.more.realloc_aligned {
            // SAFETY: `p` is a live block of this allocator, with `align` (this fn's contract).
            return unsafe { f(p.cast(), new_size, align) }.cast();
        }
        // SAFETY: `align` is the live block's, so one the allocator serves (this fn's contract).
        let q = unsafe { self.alloc(new_size, align, false) };
        if !q.is_null() {
            // SAFETY: `p` holds `old` bytes and `q`, a new block, `new_size`; `p` is
            // live until this free (this fn's contract).
            unsafe {
                ptr::copy_nonoverlapping(p, q, old.min(new_size));
                (self.free)(p.cast());
            }
        }
        q
    }

    fn realloc_to_zero(&self) -> ReallocToZero {
        match self.realloc {
            Some(_) => ReallocToZero::Frees,
            None => ReallocToZero::Undefined,
        }
    }

    unsafe fn free(&self, p: *mut u8, _size: usize, _align: usize) {
        // SAFETY: `p` is a live block of this allocator (this fn's contract).
        unsafe { (self.free)(p.cast()) }
    }

    unsafe fn usable_size(&self, p: *mut u8, size: usize, _align: usize) -> usize {
        // SAFETY: `p` is a live block of this allocator (this fn's contract).
        self.usable.map_or(size, |f| unsafe { f(p.cast()) })
    }

    fn max_align(&self) -> usize {
        let api = match self.aligned {
            AlignedApi::None => MALLOC_ALIGN,
            _ => crate::edges::MAX_ALIGN,
        };
        self.properties.max_align.map_or(api, |cap| cap.min(api))
    }

    fn single_threaded(&self) -> bool {
        self.properties.single_threaded
    }

    fn fork_safe(&self) -> bool {
        self.properties.fork_safe
    }

    fn stops(&self) -> &'static [super::Attack] {
        self.properties.stops
    }

    fn size_classes(&self) -> Option<&'static str> {
        self.properties.size_classes
    }

    fn arena(&self) -> Option<super::Arena> {
        self.properties
            .arena_size
            .map(|size| super::Arena { size, free: None })
    }

    fn extras(&self) -> Option<&dyn Extras> {
        Some(self)
    }

    fn has_heap_check(&self) -> bool {
        self.more.heap_check.is_some()
    }

    /// Its `heap_check()`, read as declared ([`HeapCheckReturns`]).
    fn heap_check(&self) -> Result<(), String> {
        self.check_heap()
    }

    /// Its `in_use()`, where it has one.
    fn bytes_in_use(&self) -> Option<super::InUse> {
        self.count_in_use()
    }

    /// Its `walk()`, where it has one.
    fn blocks_in_use(&self) -> Option<Vec<(usize, usize)>> {
        self.walk_in_use()
    }

    /// Its own heap API when it has the whole of it ([`CHeapApi::whole`]).
    fn heaps(&self) -> Option<&dyn Heaps> {
        self.more.heap.whole().then_some(self as &dyn Heaps)
    }
}
