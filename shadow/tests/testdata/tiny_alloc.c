/* A tiny C allocator with a `t_` prefix, for the dylib adapter's tests:
 * a header before every block records its size, as many real allocators do.
 * Built with -DPLANTED_BUG, blocks of 17 to 32 bytes come back 8 bytes short of
 * 16-byte alignment; with -DDIRTY_CALLOC, calloc does not zero (it fills
 * with 0xa5, as reused memory might hold); with -DALIGNED_ALLOC_ONLY, its
 * aligned API is C11's aligned_alloc alone, strict about its precondition
 * (size a multiple of the alignment), as C11 lets an implementation be;
 * with -DBUDGET=N, it stands for an allocator over a fixed region of N
 * bytes: a request that would take the live bytes past N fails. With
 * -DMORE_API it has the calls beyond the malloc family, and with
 * -DHEAP_API mimalloc's heap API (each with a planted bug of its own, see
 * their blocks below). */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* -DHEADER=20 puts every plain block 4 bytes off 16-byte alignment, as
 * umm_malloc's 4-byte block header does. */
#ifndef HEADER
#define HEADER 16
#endif

static void *wrap(void *raw, size_t size, size_t offset) {
    if (!raw) return NULL;
    char *p = (char *)raw + offset;
    ((size_t *)p)[-1] = size;
    ((size_t *)p)[-2] = offset;
    return p;
}

static void *raw_of(void *p) { return (char *)p - ((size_t *)p)[-2]; }

#ifdef BUDGET
static size_t live;
/* Takes `size` bytes of the region, or fails when they are not there. */
static int take(size_t size) {
    if (size > BUDGET - live) return 0;
    live += size;
    return 1;
}
#define GIVE_BACK(p) (live -= ((size_t *)(p))[-1])
#else
#define take(size) 1
#define GIVE_BACK(p) ((void)0)
#endif

#ifdef HEAP_API
static void leave_heap(void *p);
#else
#define leave_heap(p) ((void)0)
#endif

void *t_malloc(size_t size) {
    if (size > PTRDIFF_MAX - HEADER || !take(size)) return NULL;
#ifdef PLANTED_BUG
    if (size > 16 && size <= 32) return wrap(malloc(size + HEADER + 8), size, HEADER + 8);
#endif
    return wrap(malloc(size + HEADER), size, HEADER);
}

void t_free(void *p) {
    if (!p) return;
    leave_heap(p);
    GIVE_BACK(p);
    free(raw_of(p));
}

size_t t_malloc_usable_size(void *p) { return p ? ((size_t *)p)[-1] : 0; }

void *t_calloc(size_t n, size_t size) {
    if (size && n > SIZE_MAX / size) return NULL;
    void *p = t_malloc(n * size);
#ifdef DIRTY_CALLOC
    if (p) memset(p, 0xa5, n * size);
#else
    if (p) memset(p, 0, n * size);
#endif
    return p;
}

void *t_realloc(void *p, size_t size) {
    if (!p) return t_malloc(size);
    if (size == 0) { t_free(p); return NULL; }
    void *q = t_malloc(size);
    if (!q) return NULL;
    size_t old = t_malloc_usable_size(p);
    memcpy(q, p, old < size ? old : size);
    t_free(p);
    return q;
}

static void *aligned(size_t align, size_t size) {
    if (size > PTRDIFF_MAX - align - HEADER || !take(size)) return NULL;
    char *raw = malloc(size + align + HEADER);
    if (!raw) return NULL;
    uintptr_t start = ((uintptr_t)raw + HEADER + align - 1) & ~(uintptr_t)(align - 1);
    return wrap(raw, size, start - (uintptr_t)raw);
}

#ifdef ALIGNED_ALLOC_ONLY
void *t_aligned_alloc(size_t align, size_t size) {
    if (size % align != 0) { errno = EINVAL; return NULL; }
    return aligned(align, size);
}
#else
int t_posix_memalign(void **out, size_t align, size_t size) {
    void *p = aligned(align, size);
    if (!p) return ENOMEM;
    *out = p;
    return 0;
}
#endif

#ifdef MORE_API
/* The calls beyond the malloc family, under mimalloc's names and argument
 * orders. SHORT_REALLOC_ALIGNED plants a bug in the aligned realloc: it
 * copies half of what it must. */
void *t_realloc_aligned(void *p, size_t size, size_t align) {
    if (!p) return aligned(align, size);
    void *q = aligned(align, size);
    if (!q) return NULL;
    size_t old = t_malloc_usable_size(p);
    size_t n = old < size ? old : size;
#ifdef SHORT_REALLOC_ALIGNED
    n /= 2;
#endif
    memcpy(q, p, n);
    t_free(p);
    return q;
}

void *t_rezalloc(void *p, size_t size) {
    size_t old = p ? t_malloc_usable_size(p) : 0;
    void *q = t_realloc(p, size);
    if (q && size > old) memset((char *)q + old, 0, size - old);
    return q;
}

void *t_expand(void *p, size_t size) {
    return size <= t_malloc_usable_size(p) ? p : NULL;
}

void t_free_size(void *p, size_t size) {
    (void)size;
    t_free(p);
}

/* GOOD_SIZE_ROUNDS: an estimate above the usable size, as mimalloc's is
 * for large blocks; GOOD_SIZE_SHORT: less than the request, a bug. */
size_t t_good_size(size_t size) {
#if defined(GOOD_SIZE_ROUNDS)
    return (size + 4095) & ~(size_t)4095;
#elif defined(GOOD_SIZE_SHORT)
    return size / 2;
#else
    return size;
#endif
}
#endif

#ifdef HEAP_API
/* mimalloc's heap API, names and argument orders: a heap is the list of
 * its live blocks. A block freed with t_free leaves its heap; heap_delete
 * forgets the list (the blocks stay valid, in no heap), heap_destroy frees
 * them. HEAP_ZALLOC_DIRTY plants a bug in the heap's own zeroed
 * allocation: a block over 32 bytes comes back holding what reused memory
 * might (0xa5), not zeros. */
#include <pthread.h>
#include <stdbool.h>

typedef struct t_heap {
    void **blocks;
    size_t n, cap;
    struct t_heap *next;
} t_heap;

static t_heap *heaps;
static pthread_mutex_t heaps_lock = PTHREAD_MUTEX_INITIALIZER;

#ifdef HEAP_ZALLOC_DIRTY
#define ZALLOC_FILL(size) ((size) > 32 ? 0xa5 : 0)
#else
#define ZALLOC_FILL(size) 0
#endif

static void leave_heap(void *p) {
    pthread_mutex_lock(&heaps_lock);
    for (t_heap *h = heaps; h; h = h->next)
        for (size_t i = 0; i < h->n; i++)
            if (h->blocks[i] == p) {
                h->blocks[i] = h->blocks[--h->n];
                pthread_mutex_unlock(&heaps_lock);
                return;
            }
    pthread_mutex_unlock(&heaps_lock);
}

/* Puts the new block `p` in heap `h`; null (and `p` freed) when the list
 * cannot grow. */
static void *join(t_heap *h, void *p) {
    if (!p) return NULL;
    pthread_mutex_lock(&heaps_lock);
    if (h->n == h->cap) {
        size_t cap = h->cap ? 2 * h->cap : 16;
        void **blocks = realloc(h->blocks, cap * sizeof *blocks);
        if (!blocks) {
            pthread_mutex_unlock(&heaps_lock);
            t_free(p);
            return NULL;
        }
        h->blocks = blocks;
        h->cap = cap;
    }
    h->blocks[h->n++] = p;
    pthread_mutex_unlock(&heaps_lock);
    return p;
}

static void unlink_heap(t_heap *h) {
    pthread_mutex_lock(&heaps_lock);
    for (t_heap **link = &heaps; *link; link = &(*link)->next)
        if (*link == h) {
            *link = h->next;
            break;
        }
    pthread_mutex_unlock(&heaps_lock);
}

t_heap *t_heap_new(void) {
    t_heap *h = calloc(1, sizeof *h);
    if (!h) return NULL;
    pthread_mutex_lock(&heaps_lock);
    h->next = heaps;
    heaps = h;
    pthread_mutex_unlock(&heaps_lock);
    return h;
}

void *t_heap_malloc(t_heap *h, size_t size) { return join(h, t_malloc(size)); }

void *t_heap_zalloc(t_heap *h, size_t size) {
    void *p = t_heap_malloc(h, size);
    if (p) memset(p, ZALLOC_FILL(size), size);
    return p;
}

void *t_heap_malloc_aligned(t_heap *h, size_t size, size_t align) {
    return join(h, aligned(align, size));
}

void *t_heap_zalloc_aligned(t_heap *h, size_t size, size_t align) {
    void *p = t_heap_malloc_aligned(h, size, align);
    if (p) memset(p, 0, size);
    return p;
}

static void *heap_move(void *p, void *q, size_t size) {
    if (!q) return NULL;
    size_t old = t_malloc_usable_size(p);
    memcpy(q, p, old < size ? old : size);
    t_free(p);
    return q;
}

void *t_heap_realloc(t_heap *h, void *p, size_t size) {
    if (!p) return t_heap_malloc(h, size);
    return heap_move(p, t_heap_malloc(h, size), size);
}

void *t_heap_realloc_aligned(t_heap *h, void *p, size_t size, size_t align) {
    if (!p) return t_heap_malloc_aligned(h, size, align);
    return heap_move(p, t_heap_malloc_aligned(h, size, align), size);
}

/* The heap's zeroed realloc: the bytes past the old usable size read zero.
 * HEAP_REZALLOC_DIRTY plants a bug in it: a grown block keeps those bytes
 * as reused memory might hold them (0xa5). */
void *t_heap_rezalloc(t_heap *h, void *p, size_t size) {
    size_t old = p ? t_malloc_usable_size(p) : 0;
    void *q = t_heap_realloc(h, p, size);
#ifdef HEAP_REZALLOC_DIRTY
    if (q && size > old) memset((char *)q + old, 0xa5, size - old);
#else
    if (q && size > old) memset((char *)q + old, 0, size - old);
#endif
    return q;
}

void *t_heap_rezalloc_aligned(t_heap *h, void *p, size_t size, size_t align) {
    size_t old = p ? t_malloc_usable_size(p) : 0;
    void *q = t_heap_realloc_aligned(h, p, size, align);
    if (q && size > old) memset((char *)q + old, 0, size - old);
    return q;
}

void t_heap_delete(t_heap *h) {
    unlink_heap(h);
    free(h->blocks);
    free(h);
}

void t_heap_destroy(t_heap *h) {
    unlink_heap(h);
    for (size_t i = 0; i < h->n; i++) {
        GIVE_BACK(h->blocks[i]);
        free(raw_of(h->blocks[i]));
    }
    free(h->blocks);
    free(h);
}

void t_heap_collect(t_heap *h, bool force) {
    (void)h;
    (void)force;
}

bool t_heap_contains(const t_heap *h, const void *p) {
    bool found = false;
    pthread_mutex_lock(&heaps_lock);
    for (size_t i = 0; i < h->n && !found; i++) found = h->blocks[i] == p;
    pthread_mutex_unlock(&heaps_lock);
    return found;
}

typedef bool(t_block_visitor)(const t_heap *, const void *area, void *block, size_t size,
                              void *arg);

bool t_heap_visit_blocks(const t_heap *h, bool all, t_block_visitor *visit, void *arg) {
    (void)all;
    bool complete = true;
    pthread_mutex_lock(&heaps_lock);
    for (size_t i = 0; i < h->n && complete; i++)
        complete = visit(h, NULL, h->blocks[i], t_malloc_usable_size(h->blocks[i]), arg);
    pthread_mutex_unlock(&heaps_lock);
    return complete;
}
#endif
