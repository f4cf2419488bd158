/* A tiny C allocator with a `t_` prefix, for the dylib adapter's tests:
 * a header before every block records its size, as many real allocators do.
 * Built with -DPLANTED_BUG, blocks of 17 to 32 bytes come back 8 bytes short of
 * 16-byte alignment; with -DDIRTY_CALLOC, calloc does not zero (it fills
 * with 0xa5, as reused memory might hold); with -DALIGNED_ALLOC_ONLY, its
 * aligned API is C11's aligned_alloc alone, strict about its precondition
 * (size a multiple of the alignment), as C11 lets an implementation be;
 * with -DBUDGET=N, it stands for an allocator over a fixed region of N
 * bytes: a request that would take the live bytes past N fails. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define HEADER 16

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

void *t_malloc(size_t size) {
    if (size > PTRDIFF_MAX - HEADER || !take(size)) return NULL;
#ifdef PLANTED_BUG
    if (size > 16 && size <= 32) return wrap(malloc(size + HEADER + 8), size, HEADER + 8);
#endif
    return wrap(malloc(size + HEADER), size, HEADER);
}

void t_free(void *p) {
    if (!p) return;
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

size_t t_good_size(size_t size) { return size; }
#endif
