// mimalloc v3 (libmimalloc-sys 0.1.49's c_src/mimalloc/v3), release build
// (MI_DEBUG=0): mi_heap_visit_blocks does not visit a heap's block aligned
// above 64 KiB, though mi_heap_contains says the heap owns it. (Aligned to
// 64 KiB or less, or merely large, it is visited; v2 visits it.) Built
// and run by ./check; expected: exit 1.
#include <mimalloc.h>
#include <stdio.h>

static bool count(const mi_heap_t *heap, const mi_heap_area_t *area, void *block,
                  size_t size, void *arg) {
    if (block != NULL) (*(int *)arg)++;
    return true;
}

#if MI_MALLOC_VERSION >= 30000
#define owns mi_heap_contains
#else
#define owns mi_heap_check_owned
#endif

int main(void) {
    mi_heap_t *heap = mi_heap_new();
    void *p = mi_heap_malloc_aligned(heap, 1, 131072);
    int visited = 0;
    mi_heap_visit_blocks(heap, true, count, &visited);
    printf("block %p: owned by the heap %d, visited %d block(s)\n", p, owns(heap, p),
           visited);
    return visited == 1 ? 0 : 1;
}
