heap-use-after-free READ in verify < heap_delete < dispatch
85ef96bace61d6c1
heap-use-after-free
system
heap-use-after-free READ
verify
heap_delete
dispatch
