heap-use-after-free READ of a block freed in <shadow::allocator::zoo::heaps::ZooHeaps as shadow::allocator::Heaps>::delete
b4edefec4c73a512
heap-use-after-free
system
heap-use-after-free READ of a block freed
<shadow::allocator::zoo::heaps::ZooHeaps as shadow::allocator::Heaps>::delete
alt: bad-free in <shadow::allocator::zoo::heaps::ZooHeaps as shadow::allocator::Heaps>::delete
