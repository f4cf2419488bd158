SEGV WRITE in <shadow::allocator::zoo::Zoo as shadow::allocator::extras::Extras>::realloc_plain
ec560c6b6e3d47c9
SEGV
system
SEGV WRITE
<shadow::allocator::zoo::Zoo as shadow::allocator::extras::Extras>::realloc_plain
alt: bad-access in <shadow::allocator::zoo::Zoo as shadow::allocator::extras::Extras>::realloc_plain
