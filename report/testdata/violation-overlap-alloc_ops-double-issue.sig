overlap in alloc: block N+N overlaps live block N+N
51465d02cf105798
overlap
system
overlap in alloc: block N+N overlaps live block N+N
