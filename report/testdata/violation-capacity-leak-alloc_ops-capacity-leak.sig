capacity-leak in end: free bytes N after everything was freed, N when the program started
809dc10f0ec403c2
capacity-leak
system
capacity-leak in end: free bytes N after everything was freed, N when the program started
