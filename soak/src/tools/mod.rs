//! The tools built on the rest, each one of `allocsoak`'s commands: the
//! planted-bug proof ([`zoo`]), the speed table ([`bench`](mod@bench)), a short fuzz
//! pass ([`pass`]), which commit of a declared allocator made a group
//! ([`bisect`]), and a program's own allocations recorded and replayed
//! ([`trace`]). Nothing below imports them.

pub mod bench;
pub mod bisect;
pub mod pass;
pub mod trace;
pub mod zoo;
