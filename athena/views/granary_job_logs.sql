-- The job logs table of the design: one row per log object on the latest S3 Inventory report of
-- logs/, every column read from the key (outcome, platform, acquisition date, granule, attempt)
-- or the report (last modified, key). Nothing opens a log. The template creates this view in the
-- stack's database (JobLogsView), with the same SQL.
CREATE OR REPLACE VIEW granary_job_logs AS
SELECT
  regexp_extract(key, 'outcome=([^/]+)', 1) AS outcome,
  regexp_extract(key, 'platform=([^/]+)', 1) AS platform,
  CASE
    WHEN regexp_like(regexp_extract(key, 'acquisition_date=([^/]+)', 1), '^[0-9]{4}-[0-9]{2}-[0-9]{2}$')
    THEN CAST(regexp_extract(key, 'acquisition_date=([^/]+)', 1) AS timestamp)
  END AS acquisition_date,
  regexp_extract(key, 'granule_id=([^/]+)', 1) AS granule_id,
  CAST(regexp_extract(key, 'attempt=([0-9]+)', 1) AS integer) AS attempt,
  last_modified_date,
  key
FROM granary_logs_inventory
WHERE dt = (SELECT max(dt) FROM granary_logs_inventory)
  AND regexp_like(key, 'outcome=[^/]+/platform=[^/]+/acquisition_date=[^/]+/granule_id=[^/]+/attempt=[0-9]+\.json$')
