//! umm_malloc from the registry, as `real_allocators`' fixed-heap tests
//! declare it.

use std::path::{Path, PathBuf};

use crate::common::registry_crate;

/// umm_malloc 2.x from umm-malloc-sys 0.3.2 behind a firmware-style init
/// shim over a static 128 KiB arena (`uh_malloc`, `uh_free`, ...), its
/// own integrity check compiled in, its count of bytes in use
/// (`uh_in_use`: the arena less the free bytes its walk counts) and its
/// walk of the blocks in use (`uh_walk`, as `umm_info` walks them), both
/// found by name. The shim includes `umm_malloc.c` (which includes umm's
/// other three files) to reach its block macros.
pub struct Umm {
    pub sources: Vec<PathBuf>,
    pub include: Vec<PathBuf>,
    /// The registry's `umm_malloc.c`.
    pub umm_malloc: PathBuf,
}

/// What the shim around umm does besides umm's own work.
#[derive(Clone, Copy, PartialEq)]
pub enum Shim {
    /// Nothing.
    Plain,
    /// Tells umm when a plain free is of the last block of 77 to 96 bytes
    /// it handed out (`planted_free`).
    PlantedFree,
    /// Serves a zeroed request of 2049 to 4096 bytes from a side buffer
    /// of its own when that is free, which its walk does not list: an
    /// author's fast path the walk forgot (only the walk after an op sees
    /// it: umm's heap, count and capacity are untouched).
    SidePool,
}

impl Umm {
    /// Its blocks are 8 bytes with a 4-byte header; it has no locks of its
    /// own (a critical section the firmware supplies).
    pub const LIMITS: &'static str = "threads = 1\narena = 131072\nmax_align = 4\n";
    /// umm's own check of its free list and block chain.
    pub const HEAP_CHECK: &'static str =
        "heap_check = \"umm_integrity_check\"\nheap_check_returns = \"bool\"\n";
    /// Its integrity check, and its heap walk (`umm_info`), which the
    /// shim's `uh_in_use` reads.
    pub const DEFINES: [&'static str; 2] = ["UMM_INTEGRITY_CHECK", "UMM_INFO"];

    /// The registry's sources and the shim, written into `dir` as
    /// `shim-<n>.c` (`n` the shim's number, so two can sit side by side).
    pub fn fetch(dir: &Path, shim: Shim) -> Umm {
        let umm = registry_crate("umm-malloc-sys", "0.3.2");
        let src = umm.join("umm_malloc/src");
        let (malloc, free, calloc) = match shim {
            Shim::Plain => (
                "void *uh_malloc(size_t n) { init(); return umm_malloc(n); }\n\
                 void *uh_realloc(void *p, size_t n) { init(); return umm_realloc(p, n); }\n",
                "void uh_free(void *p) { init(); umm_free(p); }\n",
                "void *uh_calloc(size_t n, size_t s) { init(); return umm_calloc(n, s); }\n",
            ),
            Shim::PlantedFree => (
                "static void *planted;\nint planted_free;\n\
                 void *uh_malloc(size_t n) { init(); void *p = umm_malloc(n); if (n >= 77 && n <= 96) planted = p; return p; }\n\
                 void *uh_realloc(void *p, size_t n) { init(); if (p == planted) planted = 0; return umm_realloc(p, n); }\n",
                "void uh_free(void *p) { init(); planted_free = p && p == planted; if (planted_free) planted = 0; umm_free(p); planted_free = 0; }\n",
                "void *uh_calloc(size_t n, size_t s) { init(); return umm_calloc(n, s); }\n",
            ),
            Shim::SidePool => (
                "static _Alignas(16) unsigned char side[4096];\nstatic int side_used;\n\
                 void *uh_malloc(size_t n) { init(); return umm_malloc(n); }\n\
                 void *uh_realloc(void *p, size_t n) {\n\
                     init();\n\
                     if (p != side) return umm_realloc(p, n);\n\
                     void *q = umm_malloc(n);\n\
                     if (q) { memcpy(q, side, n < sizeof side ? n : sizeof side); side_used = 0; }\n\
                     return q;\n\
                 }\n",
                "void uh_free(void *p) { init(); if (p == side) side_used = 0; else umm_free(p); }\n",
                "void *uh_calloc(size_t n, size_t s) {\n\
                     init();\n\
                     if (!side_used && n && s <= sizeof side / n && n * s > 2048) { side_used = 1; memset(side, 0, sizeof side); return side; }\n\
                     return umm_calloc(n, s);\n\
                 }\n",
            ),
        };
        let shim_c = dir.join(format!("shim-{}.c", shim as u8));
        std::fs::write(
            &shim_c,
            format!(
                "#include \"umm_malloc.c\"\n\
                 static _Alignas(16) unsigned char arena[128 * 1024];\n\
                 static int ready;\n\
                 static void init(void) {{ if (!ready) {{ umm_init_heap(arena, sizeof arena); ready = 1; }} }}\n\
                 size_t uh_in_use(void) {{ init(); return sizeof arena - umm_free_heap_size(); }}\n\
                 void *UMM_MALLOC_CFG_HEAP_ADDR = arena;\n\
                 uint32_t UMM_MALLOC_CFG_HEAP_SIZE = sizeof arena;\n\
                 /* The blocks in use, as umm_info walks the heap (umm_info.c). */\n\
                 void uh_walk(void (*visit)(void *, size_t, void *), void *arg) {{\n\
                     init();\n\
                     uint16_t b = UMM_NBLOCK(0) & UMM_BLOCKNO_MASK;\n\
                     while (UMM_NBLOCK(b) & UMM_BLOCKNO_MASK) {{\n\
                         uint16_t next = UMM_NBLOCK(b) & UMM_BLOCKNO_MASK;\n\
                         if (!(UMM_NBLOCK(b) & UMM_FREELIST_MASK))\n\
                             visit(&UMM_BLOCK(b), (size_t)(next - b) * UMM_BLOCKSIZE, arg);\n\
                         b = next;\n\
                     }}\n\
                 }}\n{malloc}{free}{calloc}"
            ),
        )
        .unwrap();
        Umm {
            sources: vec![shim_c],
            include: vec![
                umm.join("src"),
                src.clone(),
                umm.join("umm_malloc/test/support"),
            ],
            umm_malloc: src.join("umm_malloc.c"),
        }
    }

    /// Its `[[allocator]]` entry from its sources, under `name`, with its
    /// limits and its heap check.
    pub fn declared(&self, name: &str) -> String {
        format!(
            "[[allocator]]\nname = \"{name}\"\n{}[allocator.c]\nsources = {:?}\n\
             include = {:?}\ndefines = {:?}\nprefix = \"uh_\"\n{}",
            Umm::LIMITS,
            self.sources,
            self.include,
            Umm::DEFINES,
            Umm::HEAP_CHECK,
        )
    }
}
