double-free of a block freed in <shadow::allocator::zoo::heaps::ZooHeaps as shadow::allocator::Heaps>::delete
4150c8e7aa844227
double-free
system
double-free of a block freed
<shadow::allocator::zoo::heaps::ZooHeaps as shadow::allocator::Heaps>::delete
alt: bad-free in <shadow::allocator::zoo::heaps::ZooHeaps as shadow::allocator::Heaps>::delete
