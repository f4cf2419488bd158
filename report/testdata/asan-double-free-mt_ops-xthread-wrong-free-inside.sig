double-free in wrong_free
7cccb568878dd099
double-free
system
double-free
wrong_free
alt: bad-free in wrong_free
