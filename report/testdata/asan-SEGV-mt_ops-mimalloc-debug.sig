SEGV WRITE in mi_heap_malloc_use_guarded
c90503a48d2ca44d
SEGV
system
SEGV WRITE
mi_heap_malloc_use_guarded
alt: bad-access in mi_heap_malloc_use_guarded
