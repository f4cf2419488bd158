overlap in realloc: block N+N overlaps live block N+N
317cb61302582fb2
overlap
system
overlap in realloc: block N+N overlaps live block N+N
