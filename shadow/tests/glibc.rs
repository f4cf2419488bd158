//! `glibc`: the C library's own malloc family, resolved in libc.so.6 (past
//! ASan's interposer in the fuzz builds), with glibc's walk of its arenas
//! as the heap check after every op.

use std::os::unix::process::ExitStatusExt;
use std::process::Command;

use shadow::allocator::by_name;

#[test]
fn glibc_is_the_c_librarys_own_malloc() {
    let glibc = by_name("glibc").unwrap();
    assert_eq!(glibc.name(), "glibc");
    assert!(glibc.has_heap_check());
    // SAFETY: a block of glibc's, asked for its usable size and freed once.
    let usable = unsafe {
        let p = glibc.alloc(100, 8, false);
        let usable = glibc.usable_size(p, 100, 8);
        glibc.free(p, 100, 8);
        usable
    };
    // glibc's chunk rule: 100 bytes take a 112-byte chunk, 8 of them its
    // size word (ASan's malloc would answer 100).
    assert_eq!(usable, 104);
    assert_eq!(glibc.heap_check(), Ok(()));
}

/// The heap check can fail: a fast bin whose next link is broken ends the
/// walk, and the process, with glibc's own message.
#[test]
fn a_broken_free_list_ends_the_walk() {
    if std::env::var_os("ALLOCSOAK_TEST_BREAK_FAST_BIN").is_some() {
        break_a_fast_bin();
        return;
    }
    let child = Command::new(std::env::current_exe().unwrap())
        .args(["a_broken_free_list_ends_the_walk", "--exact", "--nocapture"])
        .env("ALLOCSOAK_TEST_BREAK_FAST_BIN", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&child.stderr);
    assert_eq!(child.status.signal(), Some(libc::SIGABRT), "{stderr}");
    assert!(
        stderr.contains("unaligned fastbin chunk detected"),
        "{stderr}"
    );
}

fn break_a_fast_bin() {
    let glibc = by_name("glibc").unwrap();
    // SAFETY: none, on purpose: this child process writes a freed block to
    // break glibc's free list, then walks it, and is meant to die.
    unsafe {
        let blocks: Vec<*mut u8> = (0..9).map(|_| glibc.alloc(24, 8, false)).collect();
        // Seven 32-byte chunks fill the thread's tcache bin; the last two
        // go to fast bin 0, the last freed at its head.
        for &p in &blocks {
            glibc.free(p, 24, 8);
        }
        // The head's first word is its next link, safe-linked (stored
        // xor its own address >> 12): this one reads back as 0x8.
        let head = blocks[8];
        *(head as *mut usize) = (head as usize >> 12) ^ 0x8;
        let _ = glibc.heap_check();
    }
    eprintln!("the walk came back");
}
