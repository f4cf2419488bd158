direct leak in alloc_inner
371683f9d2ae3840
leak
system
direct leak
alloc_inner
