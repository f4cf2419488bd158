// mimalloc v3 (libmimalloc-sys 0.1.49's c_src/mimalloc/v3), release build
// (MI_DEBUG=0): a block aligned above 64 KiB in a heap, mi_heap_delete of
// the heap (its blocks move to the default heap), then mi_free of the block
// segfaults in _mi_arenas_collect (its tld is null). Built and run by
// ./check; expected: SIGSEGV.
#include <mimalloc.h>
#include <string.h>

int main(void) {
    mi_heap_t *heap = mi_heap_new();
    void *p = mi_heap_malloc_aligned(heap, 3984, 131072);
    memset(p, 0xa5, 3984);
    mi_heap_delete(heap);
    mi_free(p);
    return 0;
}
