// mimalloc v2 (libmimalloc-sys 0.1.49's c_src/mimalloc/v2), MI_DEBUG=3:
// a thread whose first mimalloc call is mi_realloc_aligned(p, 0, 2048) on a
// block another thread allocated segfaults in mi_heap_malloc_use_guarded on
// _mi_heap_empty. Built and run by ./check; expected: SIGSEGV.
#include <mimalloc.h>
#include <pthread.h>
#include <string.h>

static void *block;

static void *owner(void *arg) {
    (void)arg;
    block = mi_malloc_aligned(2048, 2048);
    memset(block, 0xa5, 2048);
    return NULL;
}

static void *first_call(void *arg) {
    (void)arg;
    return mi_realloc_aligned(block, 0, 2048);
}

int main(void) {
    pthread_t t;
    pthread_create(&t, NULL, owner, NULL);
    pthread_join(t, NULL);
    void *q;
    pthread_create(&t, NULL, first_call, NULL);
    pthread_join(t, &q);
    mi_free(q);
    return 0;
}
