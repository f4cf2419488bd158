oom in alloc_ops/system
e687401851cc025f
oom
alloc_ops/system
