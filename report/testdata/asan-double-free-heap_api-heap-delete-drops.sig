double-free in <shadow::allocator::zoo::Zoo as shadow::allocator::Allocator>::free
099762be86adf14b
double-free
system
double-free
<shadow::allocator::zoo::Zoo as shadow::allocator::Allocator>::free
