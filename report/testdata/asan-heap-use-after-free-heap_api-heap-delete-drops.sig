heap-use-after-free READ of a block freed in <shadow::allocator::zoo::ZooHeaps as shadow::allocator::Heaps>::delete
13e380c6d3983538
heap-use-after-free
system
heap-use-after-free READ of a block freed
<shadow::allocator::zoo::ZooHeaps as shadow::allocator::Heaps>::delete
alt: freed-live in <shadow::allocator::zoo::ZooHeaps as shadow::allocator::Heaps>::delete
