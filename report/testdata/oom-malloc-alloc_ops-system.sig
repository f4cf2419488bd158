oom in alloc_ops/system
afe7829cd01a445f
oom
system
alloc_ops/system
