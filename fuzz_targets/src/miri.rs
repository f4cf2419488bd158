//! The Miri replay: the `miri` binary, run by `cargo miri run` (`allocsoak
//! miri`), replays each input's program once against one allocator under
//! Miri, which checks every access the allocator makes: provenance,
//! aliasing (Stacked Borrows), bounds, alignment and uninitialized
//! reads that a native run (ASan's included) cannot see.
//!
//! Before each input it prints `allocsoak miri: input <path>` to stderr,
//! after it `allocsoak miri: clean <path>`: Miri stops the process at the
//! first undefined behaviour, and the last input line names the program
//! that reached it. Arguments: `<allocator> <target> <input>...`.

use report::miri::{CLEAN, INPUT};
use shadow::{Mode, Program, Target};

/// The `miri` binary's `main`; `register` declares a glue crate's
/// allocators first, as in [`crate::target!`].
pub fn main(register: fn()) {
    let exit = |msg: String| -> ! {
        eprintln!("allocsoak miri: {msg}");
        std::process::exit(2)
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [allocator, target, inputs @ ..] = args.as_slice() else {
        exit("usage: miri <allocator> <target> <input>...".into())
    };
    let target: Target = target.parse().unwrap_or_else(|e| exit(e));
    register();
    zoo::register();
    for path in inputs {
        let data = std::fs::read(path).unwrap_or_else(|e| exit(format!("{path}: {e}")));
        let program =
            Program::from_input(target, &data).unwrap_or_else(|e| exit(format!("{path}: {e}")));
        eprintln!("{INPUT}{path}");
        // Made in the first input (and kept): undefined behaviour in the
        // allocator's own setup is then that input's finding.
        let alloc = shadow::allocator::by_name(allocator).unwrap_or_else(|e| exit(e));
        shadow::harness::run_program(&program, alloc, Mode::Checked);
        eprintln!("{CLEAN}{path}");
    }
}
