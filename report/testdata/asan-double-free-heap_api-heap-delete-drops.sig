double-free in <shadow::allocator::zoo::Zoo as shadow::allocator::Allocator>::free < call < shadow::executor::Executor::free_block
7ece99479806c8f7
double-free
double-free
<shadow::allocator::zoo::Zoo as shadow::allocator::Allocator>::free
call
shadow::executor::Executor::free_block
