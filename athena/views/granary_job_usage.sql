-- One row a log, one log a Batch job: what the job reserved and how long its attempts ran, read
-- from its detail as `granary report --cost` reads it (shared/src/domain/cost.rs, usage_of):
-- the VCPU and MEMORY resource requirements, else the older vcpus and memory (MiB); the run time
-- of each attempt Batch made with both a start and a stop (epoch milliseconds), else, for a
-- detail without the attempts field, the job's own (an empty list: nothing ran). A job that names no resources or never ran has NULL
-- usage (not priced). latest: the attempt is its granule's latest outcome (the others were
-- retried). vCPU is kept to thousandths and memory to whole MiB, as the command keeps them.
CREATE OR REPLACE VIEW granary_job_usage AS
SELECT
  u.granule_id,
  u.attempt,
  u.outcome,
  round(u.vcpus * 1000) / 1000 AS vcpus,
  round(u.memory_mib) AS memory_mib,
  u.run_ms,
  (lo.granule_id IS NOT NULL) AS latest
FROM (
  SELECT
    l.granule_id,
    l.attempt,
    l.outcome,
    coalesce(
      try_cast(element_at(filter(l.job.container.resourcerequirements, r -> r.type = 'VCPU'), 1).value AS double),
      l.job.container.vcpus
    ) AS vcpus,
    coalesce(
      try_cast(element_at(filter(l.job.container.resourcerequirements, r -> r.type = 'MEMORY'), 1).value AS double),
      l.job.container.memory
    ) AS memory_mib,
    CASE
      WHEN l.job.attempts IS NULL THEN
        IF(l.job.startedat > 0 AND l.job.stoppedat >= l.job.startedat, l.job.stoppedat - l.job.startedat)
      WHEN cardinality(filter(l.job.attempts, a -> a.startedat > 0 AND a.stoppedat >= a.startedat)) > 0 THEN
        reduce(
          transform(l.job.attempts, a -> IF(a.startedat > 0 AND a.stoppedat >= a.startedat, a.stoppedat - a.startedat, 0)),
          0, (s, x) -> s + x, s -> s)
    END AS run_ms
  FROM granary_logs AS l
) AS u
LEFT JOIN granary_latest_outcome AS lo
  ON lo.granule_id = u.granule_id AND lo.attempt = u.attempt;
