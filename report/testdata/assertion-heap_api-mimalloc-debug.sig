assertion `size <= heap->pages_full_size` (mi_page_set_in_full) in mi_page_set_in_full < mi_page_queue_remove < _mi_page_free
7cfebd47dd5f3787
assertion
system
assertion `size <= heap->pages_full_size` (mi_page_set_in_full)
mi_page_set_in_full
mi_page_queue_remove
_mi_page_free
