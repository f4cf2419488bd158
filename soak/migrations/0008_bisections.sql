-- What `allocsoak bisect` found for a group in its allocator's repository:
-- the first commit where it reproduces (`cause`), or where it stops
-- reproducing (`fix`). A later bisection of the same direction replaces it.
CREATE TABLE bisection (
    group_id TEXT NOT NULL REFERENCES crash_group (id),
    direction TEXT NOT NULL,
    commit_id TEXT NOT NULL,
    subject TEXT NOT NULL,
    builds INTEGER NOT NULL,
    skipped INTEGER NOT NULL,
    at INTEGER NOT NULL,
    PRIMARY KEY (group_id, direction)
);
