/* tiny_alloc.c (the test copies it beside this file) under mimalloc's own
 * names: a declared C allocator whose every function shares its name with
 * one of the bundled mimalloc, which diff_mimalloc compares against. Each
 * must run its own code: this one its planted bugs, the reference
 * mimalloc's. */
#define t_malloc mi_malloc
#define t_free mi_free
#define t_calloc mi_calloc
#define t_realloc mi_realloc
#define t_malloc_usable_size mi_malloc_usable_size
#define t_aligned_alloc mi_aligned_alloc
#define t_posix_memalign mi_posix_memalign
#include "tiny_alloc.c"
