/*
 * allocsoak's allocation recorder: an LD_PRELOAD library that records
 * every malloc, calloc, realloc, free and aligned allocation a program
 * makes (sizes, alignments, addresses, threads and order; no contents)
 * into one file per process, `$ALLOCSOAK_TRACE_DIR/<pid>.trace`, in the
 * format `shadow::op::trace` reads. The file is `<pid>.trace.part` until
 * the process exits through its exit handlers (one killed keeps its
 * `.part`, whole up to the last buffer written). `allocsoak trace record` builds it and
 * runs a command under it.
 *
 * Every call is made and recorded under one lock, so the file's order is
 * the order the calls took effect in (a block's free is recorded before a
 * later allocation that returns its address, on any thread). A process
 * stops recording at `$ALLOCSOAK_TRACE_MAX_MB` (default 1024) MiB of
 * records, and says so with a last record. Every 65,536 calls, a record
 * holds the process's resident bytes, so a replay can set its memory
 * beside the recorded program's.
 *
 * The real calls are glibc's own entry points (`__libc_malloc`, ...):
 * no dlsym, which itself allocates.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

/* Record kinds (`shadow::op::trace`). */
enum { MALLOC = 1, FREE = 2, CALLOC = 3, REALLOC = 4, MEMALIGN = 5, RESIDENT = 6, TRUNCATED = 7 };

/* A record is a tag byte (its kind; 0x08 when the thread differs from the
 * previous record's, whose id then follows), then its fields as LEB128
 * varints: what `shadow::op::trace` reads. An address is written as the
 * zigzag difference from the last non-null address written. */
#define NEW_THREAD 0x08
#define HEADER "allocsoak-trace2"
#define BUFFER_BYTES (1 << 20)
/* The most one call's records take (a call and a resident record). */
#define MOST_PER_CALL 96
#define RESIDENT_EVERY 65536

/* Recursive: a libc call made while recording that allocates records
 * itself rather than deadlock. */
static pthread_mutex_t lock = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static unsigned char buffer[BUFFER_BYTES];
static size_t buffered;
static uint32_t last_thread; /* the thread of the last record written */
static uint64_t last_address; /* the last non-null address written */
static int fd = -1;
static pid_t owner;        /* the process `fd` and `buffer` belong to */
static uint64_t written;   /* bytes of records this process wrote */
static uint64_t limit;     /* bytes at which it stops */
static uint64_t calls;
static char path[4096];    /* this process's `.part` file */
static int off;            /* 1: stopped (over the limit, or no file) */
static __thread uint32_t thread_id __attribute__((tls_model("initial-exec")));

static void write_all(const void *data, size_t len) {
    const char *p = data;
    while (len > 0 && fd >= 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            off = 1;
            return;
        }
        p += n;
        len -= (size_t)n;
    }
}

static void flush(void) {
    write_all(buffer, buffered);
    written += buffered;
    buffered = 0;
}

/* Opens this process's file: at the first call, and again in a forked
 * child, whose copy of the parent's buffer is the parent's to write. */
static void open_file(void) {
    pid_t pid = getpid();
    if (owner == pid)
        return;
    owner = pid;
    buffered = 0;
    written = 0;
    last_thread = 0;
    last_address = 0;
    off = 1;
    fd = -1;
    const char *dir = getenv("ALLOCSOAK_TRACE_DIR");
    if (!dir)
        return;
    const char *mb = getenv("ALLOCSOAK_TRACE_MAX_MB");
    limit = (uint64_t)(mb ? strtoull(mb, NULL, 10) : 1024) << 20;
    /* `<dir>/<pid>.trace.part`, built by hand: no libc call that may allocate. */
    size_t len = strlen(dir);
    if (len > sizeof path - 32)
        return;
    memcpy(path, dir, len);
    char digits[16];
    int n = 0;
    for (unsigned v = (unsigned)pid; v > 0 || n == 0; v /= 10)
        digits[n++] = (char)('0' + v % 10);
    path[len++] = '/';
    while (n > 0)
        path[len++] = digits[--n];
    memcpy(path + len, ".trace.part", 12);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    off = 0;
    write_all(HEADER, 16);
}

static uint64_t resident(void) {
    int statm = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (statm < 0)
        return 0;
    char text[128] = {0};
    ssize_t n = read(statm, text, sizeof text - 1);
    close(statm);
    if (n <= 0)
        return 0;
    /* The second field: resident pages. */
    const char *p = strchr(text, ' ');
    uint64_t pages = 0;
    for (p = p ? p + 1 : text + n; *p >= '0' && *p <= '9'; p++)
        pages = pages * 10 + (uint64_t)(*p - '0');
    return pages * (uint64_t)sysconf(_SC_PAGESIZE);
}

static void put(uint64_t v) {
    while (v >= 0x80) {
        buffer[buffered++] = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    buffer[buffered++] = (unsigned char)v;
}

static void put_address(uint64_t address) {
    int64_t delta = (int64_t)(address - last_address);
    put(((uint64_t)delta << 1) ^ (uint64_t)(delta >> 63));
    if (address)
        last_address = address;
}

/* Encodes one record into the buffer, which has room for it. */
static void encode(uint32_t kind, uint64_t a, uint64_t b, uint64_t result) {
    int new_thread = thread_id != last_thread;
    buffer[buffered++] = (unsigned char)(kind | (new_thread ? NEW_THREAD : 0));
    if (new_thread) {
        put(thread_id);
        last_thread = thread_id;
    }
    switch (kind) {
    case MALLOC:
        put(a);
        put_address(result);
        break;
    case FREE:
        put_address(a);
        break;
    case CALLOC:
    case MEMALIGN:
        put(a);
        put(b);
        put_address(result);
        break;
    case REALLOC:
        put_address(a);
        put(b);
        put_address(result);
        break;
    case RESIDENT:
        put(a);
        break;
    }
}

/* Appends one record; the caller holds `lock`. */
static void add(uint32_t kind, uint64_t a, uint64_t b, uint64_t result) {
    open_file();
    if (off)
        return;
    if (thread_id == 0)
        thread_id = (uint32_t)syscall(SYS_gettid);
    if (written + buffered + MOST_PER_CALL > limit) {
        encode(TRUNCATED, 0, 0, 0);
        flush();
        off = 1;
        return;
    }
    encode(kind, a, b, result);
    if (++calls % RESIDENT_EVERY == 0)
        encode(RESIDENT, resident(), 0, 0);
    if (buffered + MOST_PER_CALL > BUFFER_BYTES)
        flush();
}

__attribute__((destructor)) static void at_exit(void) {
    pthread_mutex_lock(&lock);
    if (owner == getpid() && fd >= 0) {
        if (!off) {
            uint64_t bytes = resident();
            add(RESIDENT, bytes, 0, 0);
            flush();
        }
        close(fd);
        fd = -1;
        off = 1;
        char whole[4096];
        size_t len = strlen(path) - 5; /* without `.part` */
        memcpy(whole, path, len);
        whole[len] = 0;
        rename(path, whole);
    }
    pthread_mutex_unlock(&lock);
}

/* A fork waits for the lock, so the child never starts with it held by a
 * thread it does not have. */
static void before_fork(void) { pthread_mutex_lock(&lock); }
static void after_fork_in_parent(void) { pthread_mutex_unlock(&lock); }

/* The child's thread has another id than the one that holds the lock:
 * it starts with a fresh lock. */
static void after_fork_in_child(void) {
    pthread_mutex_t fresh = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
    memcpy(&lock, &fresh, sizeof lock);
}

__attribute__((constructor)) static void at_start(void) {
    pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);
}

void *malloc(size_t size) {
    pthread_mutex_lock(&lock);
    void *p = __libc_malloc(size);
    add(MALLOC, size, 0, (uintptr_t)p);
    pthread_mutex_unlock(&lock);
    return p;
}

void free(void *p) {
    if (!p)
        return;
    pthread_mutex_lock(&lock);
    add(FREE, (uintptr_t)p, 0, 0);
    __libc_free(p);
    pthread_mutex_unlock(&lock);
}

void *calloc(size_t n, size_t size) {
    pthread_mutex_lock(&lock);
    void *p = __libc_calloc(n, size);
    add(CALLOC, n, size, (uintptr_t)p);
    pthread_mutex_unlock(&lock);
    return p;
}

void *realloc(void *old, size_t size) {
    pthread_mutex_lock(&lock);
    void *p = __libc_realloc(old, size);
    add(REALLOC, (uintptr_t)old, size, (uintptr_t)p);
    pthread_mutex_unlock(&lock);
    return p;
}

static void *aligned(size_t align, size_t size) {
    pthread_mutex_lock(&lock);
    void *p = __libc_memalign(align, size);
    add(MEMALIGN, align, size, (uintptr_t)p);
    pthread_mutex_unlock(&lock);
    return p;
}

void *memalign(size_t align, size_t size) { return aligned(align, size); }
void *aligned_alloc(size_t align, size_t size) { return aligned(align, size); }
void *valloc(size_t size) { return aligned((size_t)sysconf(_SC_PAGESIZE), size); }

void *pvalloc(size_t size) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return aligned(page, (size + page - 1) / page * page);
}

int posix_memalign(void **out, size_t align, size_t size) {
    if (align < sizeof(void *) || (align & (align - 1)) != 0)
        return EINVAL;
    void *p = aligned(align, size);
    if (!p && size)
        return ENOMEM;
    *out = p;
    return 0;
}
