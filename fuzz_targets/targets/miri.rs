//! The Miri replay over the bundled allocators (see `allocsoak_fuzz::miri`).
fn main() {
    allocsoak_fuzz::miri::main(allocsoak_fuzz::no_declarations)
}
