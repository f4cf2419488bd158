// mimalloc v2 (libmimalloc-sys 0.1.49's c_src/mimalloc/v2), MI_DEBUG=3:
// a 256 KiB block aligned to 256 KiB in a heap, then mi_heap_delete of the
// heap, fails the assertion `size <= heap->pages_full_size` (mi_page_set_in_full)
// and aborts. Built and run by ./check; expected: SIGABRT.
#include <mimalloc.h>
#include <string.h>

int main(void) {
    mi_heap_t *heap = mi_heap_new();
    void *p = mi_heap_malloc_aligned(heap, 262144, 262144);
    memset(p, 0xa5, 262144);
    mi_heap_delete(heap);
    mi_free(p);
    return 0;
}
