-- The code paths a code-path group's crashes came by, each once (its
-- signature's key). A later crash whose path lies inside or around one of
-- them, and of no other group, is that group's bug reached from another
-- entry point: a plain free that writes a free-list link into a live
-- block, then a realloc whose own free does.
CREATE TABLE group_path (
    group_id TEXT NOT NULL REFERENCES crash_group (id),
    signature TEXT NOT NULL,
    PRIMARY KEY (group_id, signature)
);
