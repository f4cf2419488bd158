bad-malloc_usable_size of a block freed in wrong_free
464e13519d22d73b
bad-malloc_usable_size
system
bad-malloc_usable_size of a block freed
wrong_free
alt: bad-free in wrong_free
