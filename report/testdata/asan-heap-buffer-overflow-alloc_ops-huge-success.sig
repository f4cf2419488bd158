heap-buffer-overflow WRITE in <shadow::allocator::zoo::Zoo as shadow::allocator::extras::Extras>::realloc_plain
e0969063d1c7471b
heap-buffer-overflow
system
heap-buffer-overflow WRITE
<shadow::allocator::zoo::Zoo as shadow::allocator::extras::Extras>::realloc_plain
alt: bad-access in <shadow::allocator::zoo::Zoo as shadow::allocator::extras::Extras>::realloc_plain
