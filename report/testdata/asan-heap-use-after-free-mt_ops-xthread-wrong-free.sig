heap-use-after-free READ of a block freed in wrong_free
715f399a417d9cba
heap-use-after-free
system
heap-use-after-free READ of a block freed
wrong_free
alt: bad-free in wrong_free
