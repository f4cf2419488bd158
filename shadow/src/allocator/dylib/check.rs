//! A C allocator's own checks of itself, each declared or found by name:
//! its check of its whole heap (`heap_check`), and how its answer reads;
//! its count of bytes in use (`in_use`); its walk of the blocks it holds
//! in use (`walk`).

use super::{own_symbol, Dylib};

/// `heap_check()`, read as [`HeapCheckReturns`] says.
pub type HeapCheckFn = unsafe extern "C" fn() -> i32;

/// `size_t in_use(void)`: the bytes in blocks the allocator handed out
/// and has not had back, blocks in a thread's cache not counted.
pub type InUseFn = unsafe extern "C" fn() -> usize;

/// `void walk(void (*visit)(void *start, size_t size, void *arg), void
/// *arg)`: calls `visit` once for each block the allocator holds in use
/// (a start may be its header's), from any thread's heap.
pub type WalkFn = unsafe extern "C" fn(visit: VisitFn, arg: *mut std::ffi::c_void);

/// The visitor a [`WalkFn`] calls.
pub type VisitFn =
    unsafe extern "C" fn(start: *mut std::ffi::c_void, size: usize, arg: *mut std::ffi::c_void);

/// What a C allocator's `heap_check()` returns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HeapCheckReturns {
    /// An `int`: 0 when the heap is sound, else what is wrong (a count of
    /// errors, as TLSF's `tlsf_check`).
    #[default]
    Errors,
    /// A C `bool`: true when the heap is sound (umm_malloc's
    /// `umm_integrity_check`).
    Bool,
}

impl Dylib {
    /// Declares the library's heap check: its function `symbol` (else
    /// `<prefix>heap_check` is, where the library has one).
    pub fn with_heap_check(mut self, symbol: &str) -> Self {
        // SAFETY: `HeapCheckFn` is the C signature a heap check is declared with.
        if let Some(f) = unsafe { self.declared_symbol::<HeapCheckFn>(symbol, "heap_check") } {
            self.more.heap_check = Some(f);
        }
        self
    }

    /// Declares the library's count of bytes in use: its function `symbol`
    /// (else `<prefix>in_use` is, where the library has one).
    pub fn with_in_use(mut self, symbol: &str) -> Self {
        // SAFETY: `InUseFn` is the C signature a count is declared with.
        if let Some(f) = unsafe { self.declared_symbol::<InUseFn>(symbol, "in_use") } {
            self.more.in_use = Some(f);
        }
        self
    }

    /// Declares the library's walk of its blocks in use: its function
    /// `symbol` (else `<prefix>walk` is, where the library has one).
    pub fn with_walk(mut self, symbol: &str) -> Self {
        // SAFETY: `WalkFn` is the C signature a walk is declared with.
        if let Some(f) = unsafe { self.declared_symbol::<WalkFn>(symbol, "walk") } {
            self.more.walk = Some(f);
        }
        self
    }

    /// The library's own function `symbol`, which its declaration names as
    /// its `what`; one it lacks is what [`Dylib::declared`] reports
    /// missing. `None` for linked functions, which have no library.
    ///
    /// # Safety
    /// `T` is the function's `unsafe extern "C" fn` type, as for every
    /// symbol `open_as` resolves: pointer-sized, and assumed to have the C
    /// signature the declaration gives.
    unsafe fn declared_symbol<T: Copy>(&mut self, symbol: &str, what: &str) -> Option<T> {
        let (lib, own) = self.library.as_ref()?;
        // SAFETY: `T` is the symbol's fn type (this fn's contract).
        let f = unsafe { own_symbol::<T>(lib, own, "", symbol) };
        if f.is_none() {
            self.missing = Some(format!(
                "`{}` defines no `{symbol}`, its declared {what}",
                own.display()
            ));
        }
        f
    }

    /// Its `in_use()` (none: `None`), kept by no thread: a count the
    /// allocator's threads add to is its author's to declare otherwise.
    pub(super) fn count_in_use(&self) -> Option<crate::allocator::InUse> {
        let f = self.more.in_use?;
        // SAFETY: the allocator's own count, declared as `size_t f(void)`;
        // called between programs, when no other thread is in the
        // allocator.
        let bytes = unsafe { f() };
        Some(crate::allocator::InUse { bytes, threads: 0 })
    }

    /// Its `walk()` (none: `None`): the blocks it lists, in the order it
    /// lists them.
    pub(super) fn walk_in_use(&self) -> Option<Vec<(usize, usize)>> {
        let f = self.more.walk?;
        let mut blocks: Vec<(usize, usize)> = Vec::new();
        // SAFETY: the allocator's own walk, declared as `WalkFn`; called
        // between ops, when no other thread is in the allocator. `visit`
        // is given `arg`, the address of `blocks`, which outlives the call.
        unsafe { f(visit, (&mut blocks as *mut Vec<(usize, usize)>).cast()) };
        Some(blocks)
    }

    /// Declares what its heap check returns (default
    /// [`HeapCheckReturns::Errors`]).
    pub fn with_heap_check_returns(mut self, returns: HeapCheckReturns) -> Self {
        self.properties.heap_check_returns = returns;
        self
    }

    /// Runs its `heap_check()` (none: `Ok`), read as declared.
    pub(super) fn check_heap(&self) -> Result<(), String> {
        let Some(f) = self.more.heap_check else {
            return Ok(());
        };
        // A heap its first malloc sets up (a firmware shim's lazy init)
        // has nothing to check before it.
        self.set_up.call_once(|| {
            // SAFETY: one byte from the allocator's own malloc, given back
            // to its free (null is a valid argument to free).
            unsafe { (self.free)((self.malloc)(1)) }
        });
        match self.properties.heap_check_returns {
            HeapCheckReturns::Errors => {
                // SAFETY: the allocator's own check, declared as `int
                // f(void)`; called between ops, when no other thread is in
                // the allocator.
                match unsafe { f() } {
                    0 => Ok(()),
                    n => Err(format!("its heap check returned {n}")),
                }
            }
            HeapCheckReturns::Bool => {
                // SAFETY: the same pointer with the return type declared,
                // `bool f(void)`; both are pointer-sized `extern "C" fn`s.
                let f: unsafe extern "C" fn() -> bool = unsafe { std::mem::transmute(f) };
                // SAFETY: as above; C's `_Bool` is 0 or 1, as Rust's
                // `bool` needs.
                match unsafe { f() } {
                    true => Ok(()),
                    false => Err("its heap check returned false".into()),
                }
            }
        }
    }
}

/// A [`WalkFn`]'s visitor: adds the block to the list at `arg`.
///
/// # Safety
/// `arg` is the `Vec` [`Dylib::walk_in_use`] gave the walk, not otherwise
/// borrowed during it.
unsafe extern "C" fn visit(start: *mut std::ffi::c_void, size: usize, arg: *mut std::ffi::c_void) {
    // SAFETY: as the caller promises, `arg` is `walk_in_use`'s list.
    let blocks = unsafe { &mut *arg.cast::<Vec<(usize, usize)>>() };
    blocks.push((start as usize, size));
}
