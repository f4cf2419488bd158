/* A declared C allocator for `allocsoak coverage`'s test: malloc and free
 * over the C library's, and one function only a call from a second thread
 * reaches. mt_ops' workers make such calls; alloc_ops runs every call on
 * the thread that made the first. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

static _Atomic unsigned long first_thread;
static _Atomic unsigned long calls_from_others;

__attribute__((noinline)) static void from_another_thread(void) {
    atomic_fetch_add(&calls_from_others, 1);
}

static void note_caller(void) {
    unsigned long me = (unsigned long)pthread_self();
    unsigned long none = 0;
    if (!atomic_compare_exchange_strong(&first_thread, &none, me) && none != me)
        from_another_thread();
}

void *cv_malloc(size_t size) {
    note_caller();
    return malloc(size);
}

void cv_free(void *p) {
    note_caller();
    free(p);
}
