-- A group's alternative titles (syzkaller's AltTitles: `bad-access in f`,
-- `bad-free in g`): a crash of the same allocator whose signature has
-- one of them files into the group, though its key differs. A group keeps
-- the alternative titles of every crash filed into it.
CREATE TABLE alt_title (
    group_id TEXT NOT NULL REFERENCES crash_group (id),
    title TEXT NOT NULL,
    PRIMARY KEY (group_id, title)
);
CREATE INDEX alt_title_title ON alt_title (title);
