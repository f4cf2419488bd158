double-free of a block freed in <shadow::allocator::zoo::ZooHeaps as shadow::allocator::Heaps>::delete
34ec83051e1a6523
double-free
system
double-free of a block freed
<shadow::allocator::zoo::ZooHeaps as shadow::allocator::Heaps>::delete
alt: freed-live in <shadow::allocator::zoo::ZooHeaps as shadow::allocator::Heaps>::delete
