-- The soak's store. Times are unix seconds.

-- A slot is what a slice fuzzes: (target, allocator, engine). Its weight
-- follows its yield and survives restarts.
CREATE TABLE slot (
    id INTEGER PRIMARY KEY,
    target TEXT NOT NULL,
    allocator TEXT NOT NULL,
    engine TEXT NOT NULL,
    weight REAL NOT NULL,
    UNIQUE (target, allocator, engine)
);

-- One engine run of a slot. `ended` is null while it runs (or when the
-- daemon died during it).
CREATE TABLE slice (
    id INTEGER PRIMARY KEY,
    slot_id INTEGER NOT NULL REFERENCES slot (id),
    run_id INTEGER NOT NULL REFERENCES run (id),
    started INTEGER NOT NULL,
    ended INTEGER,
    fuzz_secs REAL,
    execs INTEGER,
    execs_per_sec REAL,
    cov INTEGER,
    ft INTEGER,
    corpus_size INTEGER,
    new_units INTEGER,
    merged_units INTEGER,
    peak_rss_mb INTEGER,
    findings INTEGER,
    tolerated INTEGER,
    -- what ended the engine: `time`, `stop`, or a finding kind
    outcome TEXT
);
CREATE INDEX slice_slot ON slice (slot_id, id);

-- A crash group: every crash with one signature. `id` is the signature's
-- hash and the name of its folder under crashes/.
CREATE TABLE crash_group (
    id TEXT PRIMARY KEY,
    signature TEXT NOT NULL,
    kind TEXT NOT NULL,
    title TEXT NOT NULL,
    violation_key TEXT,
    slot_id INTEGER NOT NULL REFERENCES slot (id),
    first_seen INTEGER NOT NULL,
    last_seen INTEGER NOT NULL,
    count INTEGER NOT NULL,
    -- new, known, fixed, flaky, regressed
    status TEXT NOT NULL,
    minimized TEXT,
    repro TEXT NOT NULL
);

-- Every raw crash, timeout, OOM or leak artifact filed into a group.
CREATE TABLE crash (
    id INTEGER PRIMARY KEY,
    group_id TEXT NOT NULL REFERENCES crash_group (id),
    slot_id INTEGER NOT NULL REFERENCES slot (id),
    slice_id INTEGER,
    input TEXT NOT NULL,
    seen INTEGER NOT NULL,
    reproduced INTEGER NOT NULL
);

-- How often a slice got past a known group (its violation tolerated).
CREATE TABLE tolerated (
    slice_id INTEGER NOT NULL REFERENCES slice (id),
    group_id TEXT NOT NULL REFERENCES crash_group (id),
    count INTEGER NOT NULL,
    PRIMARY KEY (slice_id, group_id)
);

-- Merges and prunes of a persistent corpus.
CREATE TABLE corpus_event (
    id INTEGER PRIMARY KEY,
    target TEXT NOT NULL,
    at INTEGER NOT NULL,
    what TEXT NOT NULL,
    before INTEGER NOT NULL,
    after INTEGER NOT NULL,
    secs REAL NOT NULL
);

-- The daemon's runs, for duty-cycle accounting and `status`.
CREATE TABLE run (
    id INTEGER PRIMARY KEY,
    pid INTEGER NOT NULL,
    jobs INTEGER NOT NULL,
    started INTEGER NOT NULL,
    deadline INTEGER NOT NULL,
    ended INTEGER
);
