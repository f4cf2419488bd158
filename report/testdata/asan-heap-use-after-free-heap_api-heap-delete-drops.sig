heap-use-after-free READ in verify < heap_delete < dispatch
4583a03822018312
heap-use-after-free
heap-use-after-free READ
verify
heap_delete
dispatch
