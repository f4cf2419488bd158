overlap in alloc: block N+N overlaps live block N+N
9e3d786b6b94a524
overlap
overlap in alloc: block N+N overlaps live block N+N
