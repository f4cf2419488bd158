heap-use-after-free READ in verify < shadow::executor::Executor::free_block < shadow::executor::Executor::finish
574f3cd962794ef9
heap-use-after-free
system
heap-use-after-free READ
verify
shadow::executor::Executor::free_block
shadow::executor::Executor::finish
