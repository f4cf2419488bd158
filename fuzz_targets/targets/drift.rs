//! The RSS drift replay loop over the bundled allocators (see `allocsoak_fuzz::drift`).
fn main() {
    allocsoak_fuzz::drift::main(allocsoak_fuzz::no_declarations)
}
