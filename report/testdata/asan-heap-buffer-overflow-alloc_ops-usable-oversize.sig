heap-buffer-overflow WRITE in probe_usable
c711bb1f9e361f1a
heap-buffer-overflow
system
heap-buffer-overflow WRITE
probe_usable
