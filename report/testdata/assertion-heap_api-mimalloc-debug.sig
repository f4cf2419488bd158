assertion `size <= heap->pages_full_size` (mi_page_set_in_full) in mi_page_set_in_full
e7f54ea78e646e9d
assertion
system
assertion `size <= heap->pages_full_size` (mi_page_set_in_full)
mi_page_set_in_full
