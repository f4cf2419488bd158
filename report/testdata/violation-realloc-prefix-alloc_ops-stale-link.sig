realloc-prefix in realloc: realloc N+N -> N+N lost the prefix: offset N expected N found N
bd3190e19972a3b9
realloc-prefix
system
realloc-prefix in realloc: realloc N+N -> N+N lost the prefix: offset N expected N found N
