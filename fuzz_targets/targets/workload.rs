#![cfg_attr(not(feature = "honggfuzz"), no_main)]
allocsoak_fuzz::target!(Workload);
