//! One macro that turns a [`shadow::Target`] into a fuzz entry point for
//! libFuzzer (the default feature) or honggfuzz (`--features honggfuzz`),
//! so both engines run the same code.

// The ASan hooks are compiled where ASan is: fuzzing builds, not honggfuzz's
// nor OSS-Fuzz's coverage builds, which have no ASan to link against.
#![feature(cfg_sanitize)]

#[doc(hidden)]
pub use shadow;

#[cfg(feature = "drift")]
pub mod drift;

#[cfg(feature = "miri")]
pub mod miri;

#[cfg(feature = "libfuzzer")]
#[doc(hidden)]
pub use libfuzzer_sys;

#[cfg(feature = "honggfuzz")]
#[doc(hidden)]
pub use honggfuzz;

/// The target's ASan defaults ([`shadow::sanitizer::asan_defaults`]),
/// for `__asan_default_options`.
#[doc(hidden)]
pub fn asan_defaults(target: shadow::Target) -> *const std::ffi::c_char {
    shadow::sanitizer::asan_defaults(target).as_ptr()
}

#[cfg(sanitize = "address")]
extern "C" {
    /// ASan's hook for a report's text, called after it is printed.
    fn __asan_set_error_report_callback(callback: unsafe extern "C" fn(*const std::ffi::c_char));
    /// The first poisoned byte of a region, or null.
    fn __asan_region_is_poisoned(beg: *mut std::ffi::c_void, size: usize) -> *mut std::ffi::c_void;
    /// The shadow's scale and offset.
    fn __asan_get_shadow_mapping(scale: *mut usize, offset: *mut usize);
    /// Tells LeakSanitizer a heap block is not a leak.
    fn __lsan_ignore_object(p: *const std::ffi::c_void);
    /// Where the sanitizer prints its reports.
    fn __sanitizer_set_report_fd(fd: *mut std::ffi::c_void);
    /// LeakSanitizer's check, now: nonzero when it finds leaks.
    fn __lsan_do_recoverable_leak_check() -> std::ffi::c_int;
    /// Whether the sanitizer's allocator has this block out, not freed.
    fn __sanitizer_get_ownership(p: *const std::ffi::c_void) -> std::ffi::c_int;
}

/// Called by ASan as a report starts (`__asan_on_error`, defined in each
/// target): the report is printed to /dev/null, and the callback prints
/// it to stderr unless the harness tolerates it, so a log holds the
/// reports that end runs and not thousands that were got past.
#[doc(hidden)]
pub fn on_error() {
    #[cfg(sanitize = "address")]
    {
        static DEV_NULL: std::sync::OnceLock<Option<std::fs::File>> = std::sync::OnceLock::new();
        let dev_null = DEV_NULL.get_or_init(|| std::fs::File::create("/dev/null").ok());
        if let Some(f) = dev_null {
            use std::os::fd::AsRawFd;
            // SAFETY: the fd is `/dev/null`'s, held open for the process's life by a `static`;
            // the sanitizer takes an fd cast to a pointer, as passed.
            unsafe { __sanitizer_set_report_fd(f.as_raw_fd() as usize as *mut std::ffi::c_void) };
        }
    }
}

#[cfg(sanitize = "address")]
unsafe extern "C" fn on_asan_report(text: *const std::ffi::c_char) {
    __sanitizer_set_report_fd(2usize as *mut std::ffi::c_void);
    let text = std::ffi::CStr::from_ptr(text).to_string_lossy();
    shadow::sanitizer::on_report(&text);
}

/// Hands ASan's reports to `shadow::sanitizer`, and lets it ask ASan
/// before touching memory (in ASan builds); then loads the allocator, before libFuzzer
/// lists the modules whose coverage it counts (see
/// `shadow::harness::load`).
#[doc(hidden)]
pub fn init() {
    zoo::register();
    #[cfg(sanitize = "address")]
    // SAFETY: `on_asan_report` has the `void (*)(const char *)` type ASan calls, and only
    // reads the NUL-terminated report text ASan passes it.
    unsafe {
        __asan_set_error_report_callback(on_asan_report);
        shadow::sanitizer::install(
            __asan_region_is_poisoned,
            __asan_get_shadow_mapping,
            __lsan_ignore_object,
            __lsan_do_recoverable_leak_check,
            __sanitizer_get_ownership,
        );
    }
    shadow::harness::load();
}

/// Prints a panic's message before honggfuzz-rs' hook aborts. That hook
/// (installed at the first input) aborts without a word, so a violation's
/// `allocsoak violation: ...` line would never reach the engine's log, as
/// it does under libFuzzer, whose hook prints it first. Called inside each
/// input, after honggfuzz-rs installed its hook; wraps it once.
#[cfg(feature = "honggfuzz")]
#[doc(hidden)]
pub fn print_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let abort = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            eprintln!("{info}");
            abort(info)
        }));
    });
}

/// Defines the entry point for a target: `target!(AllocOps)`, or
/// `target!(AllocOps, my_glue::register)` to call `register()` (which
/// declares allocators with `shadow::allocator::declare`) before the first
/// input, as the glue crate of a config's `[[allocator]]` entries does.
#[macro_export]
macro_rules! target {
    ($target:ident) => {
        $crate::target!($target, $crate::no_declarations);
    };
    ($target:ident, $register:path) => {
        // Defined in the binary itself: the linker drops it from a library.
        #[no_mangle]
        pub extern "C" fn __asan_default_options() -> *const std::ffi::c_char {
            $crate::asan_defaults($crate::shadow::Target::$target)
        }

        #[no_mangle]
        pub extern "C" fn __asan_on_error() {
            $crate::on_error()
        }

        #[cfg(all(feature = "libfuzzer", not(feature = "honggfuzz")))]
        $crate::libfuzzer_sys::fuzz_target!(init: { $register(); $crate::init() }, |data: &[u8]| {
            $crate::shadow::harness::fuzz($crate::shadow::Target::$target, data)
        });

        #[cfg(feature = "honggfuzz")]
        fn main() {
            $register();
            $crate::init();
            loop {
                $crate::honggfuzz::fuzz!(|data: &[u8]| {
                    $crate::print_panics();
                    $crate::shadow::harness::fuzz($crate::shadow::Target::$target, data)
                });
            }
        }
    };
}

/// The register step of a target that declares no allocators.
#[doc(hidden)]
pub fn no_declarations() {}
