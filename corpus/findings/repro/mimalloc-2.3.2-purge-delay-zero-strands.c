// mimalloc v2 (libmimalloc-sys 0.1.49's c_src/mimalloc/v2), release
// build. Memory freed while the purge delay is the default (10 ms) is
// scheduled for a purge; setting the delay to 0 afterwards
// (`mi_option_set(mi_option_purge_delay, 0)`, "purge at once") and then
// `mi_collect(true)` ("aggressively return memory to the OS") purges none
// of it: `mi_arenas_try_purge` returns at once when the delay is 0
// ("nothing will be scheduled", arena.c), so what was scheduled under
// the old delay stays resident for as long as the delay stays 0. The
// freed segments' arena blocks are counted with mincore(2). Built and
// run by ./check; expected: exit 1.
#include <mimalloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

// Bytes of mimalloc's arenas resident now (no block is live: all of it is free).
static size_t arena_resident(void) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE), resident = 0;
    for (mi_arena_id_t id = 1; id < 64; id++) {
        size_t size = 0;
        unsigned char *start = mi_arena_area(id, &size);
        if (start == NULL) break;
        unsigned char *vec = malloc(size / page);
        if (mincore(start, size, vec) == 0)
            for (size_t i = 0; i < size / page; i++) resident += (vec[i] & 1) * page;
        free(vec);
    }
    return resident;
}

int main(void) {
    enum { N = 4096 };
    static void *blocks[N];
    for (int i = 0; i < N; i++) blocks[i] = mi_malloc(16 << 10);  // 64 MiB
    for (int i = 0; i < N; i++) ((char *)blocks[i])[0] = 1;
    for (int i = 0; i < N; i++) mi_free(blocks[i]);
    mi_option_set(mi_option_purge_delay, 0);
    mi_collect(true);
    size_t kept = arena_resident();
    printf("resident in mimalloc's arenas after mi_collect(true) at purge delay 0, nothing live: %zu bytes\n", kept);
    return kept > (1 << 20) ? 1 : 0;
}
