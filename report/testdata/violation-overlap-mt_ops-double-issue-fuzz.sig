overlap in realloc: block N+N overlaps live block N+N
c1bf81afefacc931
overlap
overlap in realloc: block N+N overlaps live block N+N
