heap-buffer-overflow WRITE in probe_usable < dispatch < shadow::executor::Executor::step
24059ac8da72a2e1
heap-buffer-overflow
system
heap-buffer-overflow WRITE
probe_usable
dispatch
shadow::executor::Executor::step
