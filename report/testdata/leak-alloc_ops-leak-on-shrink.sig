direct leak in aligned < <shadow::allocator::system::System as shadow::allocator::Allocator>::alloc < alloc_inner
58d6fe9439510268
leak
system
direct leak
aligned
<shadow::allocator::system::System as shadow::allocator::Allocator>::alloc
alloc_inner
