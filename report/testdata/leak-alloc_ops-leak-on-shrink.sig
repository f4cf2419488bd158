direct leak in alloc_inner < <shadow::allocator::zoo::Zoo as shadow::allocator::Allocator>::alloc
747862ba0b3c9b81
leak
system
direct leak
alloc_inner
<shadow::allocator::zoo::Zoo as shadow::allocator::Allocator>::alloc
