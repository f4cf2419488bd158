#![cfg_attr(not(feature = "honggfuzz"), no_main)]
// LeakSanitizer misreads the state of worker threads that outlive an input
// (thread-exit ops restart them mid-input) as leaks. mt_ops leaves leaks to
// alloc_ops and to the RSS-drift monitor.
allocsoak_fuzz::target!(MtOps, ":detect_leaks=0");
