-- A group's tolerance key: the violation key, or for a sanitizer report
-- `asan: <title>` (both are what ALLOCSOAK_TOLERATE lists).
ALTER TABLE crash_group RENAME COLUMN violation_key TO tolerance_key;
