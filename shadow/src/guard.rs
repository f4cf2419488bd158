//! Allocator calls under guard: a panic inside the allocator comes back as
//! a value ([`Panicked`]) instead of ending the process, so the executor
//! can turn it into a keyed, tolerable finding
//! ([`crate::violation::Violation::Panic`]).
//!
//! Engines install a panic hook that aborts (libFuzzer's, honggfuzz's), and
//! the hook runs before any unwinding reaches a `catch_unwind`. [`call`]
//! therefore wraps whatever hook is installed when it first runs: inside a
//! guarded call the hook only notes the message and the panicking frame;
//! anywhere else it hands over to the hook it wrapped.

use std::cell::{Cell, RefCell};
use std::panic::{self, AssertUnwindSafe, PanicHookInfo};
use std::sync::Once;

/// A panic caught inside an allocator call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Panicked {
    pub message: String,
    /// The panicking frame as `file:line` (for a dependency, the path from
    /// its crate folder on), or `unknown`.
    pub location: String,
}

thread_local! {
    static INSIDE: Cell<bool> = const { Cell::new(false) };
    static CAUGHT: RefCell<Option<Panicked>> = const { RefCell::new(None) };
}

/// Wraps the current panic hook once per process.
fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if INSIDE.with(Cell::get) {
                // `try_with`: a call in a thread's last destructors
                // (`exit-alloc`) may come after CAUGHT's own.
                let _ = CAUGHT.try_with(|c| *c.borrow_mut() = Some(caught(info)));
            } else {
                previous(info)
            }
        }));
    });
}

fn caught(info: &PanicHookInfo<'_>) -> Panicked {
    let payload = info.payload();
    let message = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into());
    let location = info.location().map_or_else(
        || "unknown".to_string(),
        |l| format!("{}:{}", crate_path(l.file()), l.line()),
    );
    Panicked { message, location }
}

/// A source path from its crate's folder on, the same on every machine:
/// `/home/me/.cargo/registry/src/index.crates.io-…/rlsf-0.2.1/src/tlsf.rs`
/// is `rlsf-0.2.1/src/tlsf.rs`, `/work/allocsoak/shadow/src/zoo.rs` is
/// `shadow/src/zoo.rs`.
fn crate_path(file: &str) -> &str {
    let Some(src) = file.rfind("/src/") else {
        return file;
    };
    match file[..src].rfind('/') {
        Some(start) => &file[start + 1..],
        None => file,
    }
}

/// Runs `f`, an allocator call; `Err` when it panicked. Nested calls are
/// guarded by the outermost one.
pub fn call<R>(f: impl FnOnce() -> R) -> Result<R, Panicked> {
    install();
    if INSIDE.with(Cell::get) {
        return Ok(f());
    }
    INSIDE.with(|i| i.set(true));
    let result = panic::catch_unwind(AssertUnwindSafe(f));
    INSIDE.with(|i| i.set(false));
    result.map_err(|payload| {
        CAUGHT
            .try_with(|c| c.borrow_mut().take())
            .ok()
            .flatten()
            .unwrap_or_else(|| Panicked {
                // The hook did not see it: a hook installed after ours.
                message: payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a panic without a message".into()),
                location: "unknown".into(),
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_comes_back_with_its_frame_and_the_hook_stays_quiet() {
        let r = call(|| -> usize {
            let v: Vec<usize> = Vec::new();
            v[std::hint::black_box(3)]
        });
        let p = r.unwrap_err();
        assert!(p.message.contains("index out of bounds"), "{p:?}");
        assert!(p.location.starts_with("shadow/src/guard.rs:"), "{p:?}");
        assert_eq!(call(|| 5), Ok(5));
    }

    #[test]
    fn registry_paths_lose_the_machine_prefix() {
        assert_eq!(
            crate_path(
                "/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/rlsf-0.2.1/src/tlsf.rs"
            ),
            "rlsf-0.2.1/src/tlsf.rs"
        );
        assert_eq!(crate_path("shadow/src/x.rs"), "shadow/src/x.rs");
        assert_eq!(crate_path("/work/main/shadow/src/x.rs"), "shadow/src/x.rs");
    }
}
