heap-use-after-free READ in verify < shadow::executor::Executor::free_block < shadow::executor::Executor::finish
4fae5caef74fbf50
heap-use-after-free
heap-use-after-free READ
verify
shadow::executor::Executor::free_block
shadow::executor::Executor::finish
