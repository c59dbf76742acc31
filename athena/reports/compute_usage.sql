-- The campaign's compute, as `granary report --cost` prices it: jobs, those without usage (not
-- priced), vCPU-hours and GiB-hours reserved in all and on attempts that were retried. Multiply
-- by your prices (docs/operations.md has the defaults and their source).
SELECT
  count(*) AS jobs,
  count_if(NOT priced) AS jobs_without_usage,
  coalesce(sum(IF(priced, vcpus * run_ms, 0)) / 3600000.0, 0) AS vcpu_hours,
  coalesce(sum(IF(priced, memory_mib / 1024.0 * run_ms, 0)) / 3600000.0, 0) AS gib_hours,
  coalesce(sum(IF(priced AND NOT latest, vcpus * run_ms, 0)) / 3600000.0, 0) AS retried_vcpu_hours,
  coalesce(sum(IF(priced AND NOT latest, memory_mib / 1024.0 * run_ms, 0)) / 3600000.0, 0) AS retried_gib_hours
FROM (
  SELECT
    u.*,
    (u.vcpus IS NOT NULL AND u.memory_mib IS NOT NULL AND u.run_ms IS NOT NULL) AS priced
  FROM granary_job_usage AS u
) AS jobs;
