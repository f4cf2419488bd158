realloc-prefix in realloc: realloc N+N -> N+N lost the prefix: offset N expected N found N
c549e57a96129f81
realloc-prefix
realloc-prefix in realloc: realloc N+N -> N+N lost the prefix: offset N expected N found N
