-- From the job logs table (the latest S3 Inventory report, keys only): log objects by outcome and
-- platform, and the granules they belong to, without reading a single log. A failure superseded
-- by a later success is moved under outcome=success, so the granule counts are the latest
-- outcomes (as granules_by_platform_outcome counts them from the logs).
SELECT
  outcome,
  platform,
  count(*) AS log_objects,
  count(DISTINCT granule_id) AS granules
FROM granary_job_logs
GROUP BY outcome, platform
ORDER BY outcome, platform;
