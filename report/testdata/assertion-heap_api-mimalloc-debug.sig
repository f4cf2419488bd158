assertion `size <= heap->pages_full_size` (mi_page_set_in_full) in mi_page_set_in_full < mi_page_queue_remove < _mi_page_free
c6d1400ec87b7e27
assertion
assertion `size <= heap->pages_full_size` (mi_page_set_in_full)
mi_page_set_in_full
mi_page_queue_remove
_mi_page_free
