alignment in alloc: block N (size N) is not aligned to N
2c5c31c2767b24b2
alignment
alignment in alloc: block N (size N) is not aligned to N
