double-free of a block freed in wrong_free
d2be887667ed6b5a
double-free
system
double-free of a block freed
wrong_free
alt: bad-free in wrong_free
