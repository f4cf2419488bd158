-- RSS drift: the memory half of the soak. A series is a slot with engine
-- `drift` (target = the workload whose programs are replayed, allocator):
-- its findings are crash groups of that slot like any other.

-- One replay process of a series: a restart starts a new segment, which
-- the fit treats as a gap (memory back at its cold size).
CREATE TABLE drift_segment (
    id INTEGER PRIMARY KEY,
    slot_id INTEGER NOT NULL REFERENCES slot (id),
    run_id INTEGER REFERENCES run (id),
    started INTEGER NOT NULL,
    ended INTEGER,
    -- what ended it: `stop`, `rss-limit`, `violation`, `exit <status>`
    outcome TEXT
);
CREATE INDEX drift_segment_slot ON drift_segment (slot_id, id);

-- A segment's readings, thinned as they age (drift::rethin): a raw reading
-- is a point of one sample; older points summarise a minute or an hour.
-- min / median / max are retained bytes (rss - live); the other figures
-- are the point's last reading's.
CREATE TABLE drift_point (
    id INTEGER PRIMARY KEY,
    segment_id INTEGER NOT NULL REFERENCES drift_segment (id),
    secs INTEGER NOT NULL,
    last_secs INTEGER NOT NULL,
    samples INTEGER NOT NULL,
    ops INTEGER NOT NULL,
    min INTEGER NOT NULL,
    median INTEGER NOT NULL,
    max INTEGER NOT NULL,
    rss INTEGER NOT NULL,
    anon INTEGER NOT NULL,
    live INTEGER NOT NULL,
    cpu_ms INTEGER NOT NULL,
    programs INTEGER NOT NULL,
    -- the allocator's own figures: `name=bytes` separated by spaces
    figures TEXT NOT NULL
);
CREATE INDEX drift_point_segment ON drift_point (segment_id, secs);

-- The share of one core a run gave its drift workers (the duty cycle
-- counts their CPU time against it).
ALTER TABLE run ADD COLUMN drift_share REAL NOT NULL DEFAULT 0;
