double-free in <shadow::allocator::zoo::Zoo as shadow::allocator::Allocator>::free < call < shadow::executor::Executor::free_block
fca7ec3fabe46461
double-free
system
double-free
<shadow::allocator::zoo::Zoo as shadow::allocator::Allocator>::free
call
shadow::executor::Executor::free_block
