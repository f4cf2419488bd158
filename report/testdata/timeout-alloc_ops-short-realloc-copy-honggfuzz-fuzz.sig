timeout in alloc_ops/system
e4b308a028c2ffc4
timeout
system
alloc_ops/system
