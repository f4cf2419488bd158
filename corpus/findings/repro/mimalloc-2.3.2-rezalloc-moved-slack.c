// mimalloc v2 (libmimalloc-sys 0.1.49's c_src/mimalloc/v2; v3 does the
// same), release build: mimalloc#763. A zeroed block grown by mi_rezalloc
// past its usable size moves to a new block zeroed only up to the new
// request; growing it again with mi_rezalloc within the new block's usable
// size stays in place and zeroes nothing, so the bytes past the first
// request read what the new block held before. The block was allocated
// zeroed and written only within its requests, so mimalloc's zeroinit
// precondition holds. Built and run by ./check; expected: exit 1.
#include <mimalloc.h>
#include <stdio.h>
#include <string.h>

int main(void) {
    // Blocks of the 256-byte class, written and freed: the next one is
    // not fresh from the OS.
    static unsigned char *used[4096];
    for (int i = 0; i < 4096; i++) {
        used[i] = mi_malloc(230);
        memset(used[i], 0xaa, mi_usable_size(used[i]));
    }
    for (int i = 0; i < 4096; i++) mi_free(used[i]);

    unsigned char *p = mi_zalloc(100);
    memset(p, 1, 100);
    unsigned char *q = mi_rezalloc(p, 230); // moves: past 100's usable size
    memset(q, 1, 230);
    size_t usable = mi_usable_size(q);
    unsigned char *r = mi_rezalloc(q, usable); // in place
    for (size_t i = 230; i < usable; i++) {
        if (r[i] != 0) {
            printf("moved %d, in place %d: byte %zu of %zu reads 0x%02x, not zero\n", q != p,
                   r == q, i, usable, r[i]);
            return 1;
        }
    }
    printf("bytes 230..%zu read zero\n", usable);
    return 0;
}
