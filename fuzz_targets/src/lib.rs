//! One macro that turns a [`shadow::Target`] into a fuzz entry point for
//! libFuzzer (the default feature) or honggfuzz (`--features honggfuzz`),
//! so both engines run the same code.

#[doc(hidden)]
pub use shadow;

#[cfg(feature = "libfuzzer")]
#[doc(hidden)]
pub use libfuzzer_sys;

#[cfg(feature = "honggfuzz")]
#[doc(hidden)]
pub use honggfuzz;

/// Sanitizer defaults every target bakes in, so a bare `cargo fuzz run`
/// behaves like the `allocsoak` runs: an impossible size must come back null
/// (ASan would abort instead); a report returns to the harness, which
/// aborts unless the report is tolerated (`halt_on_error=0`, and every
/// report, not only the first at each place: `suppress_equal_pcs=0`; see
/// `shadow::sanitizer`). `ASAN_OPTIONS` set by the caller still wins.
#[macro_export]
macro_rules! asan_defaults {
    ($extra:literal) => {
        concat!(
            "allocator_may_return_null=1:detect_leaks=1:halt_on_error=0:suppress_equal_pcs=0",
            $extra,
            "\0"
        )
    };
}

#[cfg(all(feature = "libfuzzer", not(feature = "honggfuzz")))]
extern "C" {
    /// ASan's hook for a report's text, called after it is printed.
    fn __asan_set_error_report_callback(callback: unsafe extern "C" fn(*const std::ffi::c_char));
}

#[cfg(all(feature = "libfuzzer", not(feature = "honggfuzz")))]
unsafe extern "C" fn on_asan_report(text: *const std::ffi::c_char) {
    let text = std::ffi::CStr::from_ptr(text).to_string_lossy();
    shadow::sanitizer::on_report(&text);
}

/// Hands ASan's reports to `shadow::sanitizer` (libFuzzer builds are
/// ASan builds; honggfuzz builds have no sanitizer).
#[doc(hidden)]
pub fn init() {
    #[cfg(all(feature = "libfuzzer", not(feature = "honggfuzz")))]
    unsafe {
        __asan_set_error_report_callback(on_asan_report)
    };
}

/// Defines the entry point for a target; `$asan` adds sanitizer options.
#[macro_export]
macro_rules! target {
    ($target:ident) => {
        $crate::target!($target, "");
    };
    ($target:ident, $asan:literal) => {
        // Defined in the binary itself: the linker drops it from a library.
        #[no_mangle]
        pub extern "C" fn __asan_default_options() -> *const std::ffi::c_char {
            $crate::asan_defaults!($asan).as_ptr().cast()
        }

        #[cfg(all(feature = "libfuzzer", not(feature = "honggfuzz")))]
        $crate::libfuzzer_sys::fuzz_target!(init: $crate::init(), |data: &[u8]| {
            $crate::shadow::harness::fuzz($crate::shadow::Target::$target, data)
        });

        #[cfg(feature = "honggfuzz")]
        fn main() {
            loop {
                $crate::honggfuzz::fuzz!(|data: &[u8]| {
                    $crate::shadow::harness::fuzz($crate::shadow::Target::$target, data)
                });
            }
        }
    };
}
