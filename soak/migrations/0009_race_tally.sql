-- What a slice's race sections did (`shadow::tally`): sections run, those
-- with two or more workers inside the allocator at once, and the most
-- inside at once. NULL for slices from before, 0 for a target without
-- race sections (`alloc_ops`, `diff_mimalloc`).
ALTER TABLE slice ADD COLUMN race_sections INTEGER;
ALTER TABLE slice ADD COLUMN races_together INTEGER;
ALTER TABLE slice ADD COLUMN most_inside INTEGER;
