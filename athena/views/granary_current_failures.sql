-- Granules still failing, with what an operator needs to look: the latest attempt's exit code,
-- Batch's status reason, the CloudWatch log stream, and when the attempt started and stopped
-- (epoch milliseconds, as Batch reports them). The reason has its EC2 instance id masked, so
-- Spot interruptions count as one reason; the full text stays in status_reason.
CREATE OR REPLACE VIEW granary_current_failures AS
SELECT
  granule_id,
  attempt,
  platform,
  acquisition_date,
  reason,
  exit_code,
  status_reason,
  log_stream,
  started_at_ms,
  stopped_at_ms,
  job_id,
  logged_at
FROM (
  SELECT
    l.granule_id,
    l.attempt,
    l.outcome,
    l.platform,
    l.acquisition_date,
    regexp_replace(l.classification.reason, 'i-[0-9a-f]+', 'i-*') AS reason,
    l.job.container.exitcode AS exit_code,
    l.job.statusreason AS status_reason,
    l.job.container.logstreamname AS log_stream,
    l.job.startedat AS started_at_ms,
    l.job.stoppedat AS stopped_at_ms,
    l.job_id,
    l.logged_at,
    row_number() OVER (
      PARTITION BY l.granule_id
      ORDER BY l.attempt DESC, l.outcome DESC
    ) AS rn
  FROM granary_logs AS l
  WHERE l.superseded IS NULL
) AS ranked
WHERE rn = 1 AND outcome = 'failure';
