heap-buffer-overflow WRITE in probe_usable < dispatch < shadow::executor::Executor::step
f9ffc5d2777e8749
heap-buffer-overflow
heap-buffer-overflow WRITE
probe_usable
dispatch
shadow::executor::Executor::step
