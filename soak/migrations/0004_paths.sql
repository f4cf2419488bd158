-- A violation of a call's result is keyed by the allocator code its op
-- ran (its path): such a group's signature frames are that path, not a
-- stack.
ALTER TABLE crash_group ADD COLUMN path INTEGER NOT NULL DEFAULT 0;

-- The ways a group's bug was reached: the violation's key (the allocator
-- call and the block's size and alignment tiers: its site), in which
-- target, how often, and the first input that showed it. Its slices
-- tolerate every variant's key.
CREATE TABLE variant (
    group_id TEXT NOT NULL REFERENCES crash_group (id),
    key TEXT NOT NULL,
    site TEXT NOT NULL,
    target TEXT NOT NULL,
    count INTEGER NOT NULL,
    first_input TEXT NOT NULL,
    first_seen INTEGER NOT NULL,
    PRIMARY KEY (group_id, key, target)
);
CREATE INDEX variant_key ON variant (key);
