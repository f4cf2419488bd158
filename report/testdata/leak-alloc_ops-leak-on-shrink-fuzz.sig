direct leak in aligned < <shadow::allocator::system::System as shadow::allocator::Allocator>::alloc < alloc_inner
f2242ba70c15315e
leak
direct leak
aligned
<shadow::allocator::system::System as shadow::allocator::Allocator>::alloc
alloc_inner
