timeout in alloc_ops/system
f6288fd2f50ff338
timeout
alloc_ops/system
