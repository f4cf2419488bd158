capacity-leak in end: free bytes N after everything was freed, N when the program started
31ffcb8fb9d42dc5
capacity-leak
capacity-leak in end: free bytes N after everything was freed, N when the program started
