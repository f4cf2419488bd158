-- Groups merged into another (ClusterFuzz's grouper): two code-path groups
-- of one kind and allocator that a later signature's path lies inside
-- both of (one bug in code two entry points share, found from each entry
-- point first). A crash with a merged group's key, or a path beside its
-- signature's, files into `into_id`; its folder stays, its group.toml
-- renamed merged.toml.
CREATE TABLE merged_group (
    id TEXT PRIMARY KEY,
    into_id TEXT NOT NULL REFERENCES crash_group (id),
    signature TEXT NOT NULL,
    path INTEGER NOT NULL
);
