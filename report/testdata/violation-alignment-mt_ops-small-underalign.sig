alignment in alloc: block N (size N) is not aligned to N
aeb1db826748f971
alignment
system
alignment in alloc: block N (size N) is not aligned to N
