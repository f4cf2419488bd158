heap-use-after-free READ in verify
41abc0227c052fd6
heap-use-after-free
system
heap-use-after-free READ
verify
