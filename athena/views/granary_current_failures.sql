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
  regexp_replace(reason, 'i-[0-9a-f]+', 'i-*') AS reason,
  exit_code,
  status_reason,
  log_stream,
  started_at_ms,
  stopped_at_ms,
  job_id,
  logged_at
FROM granary_latest_outcome
WHERE outcome = 'failure';
