-- Each granule's latest attempt: the highest attempt among its logs not superseded by a later
-- success (a success relocates earlier failure logs under outcome=success, marked superseded),
-- with what that attempt's Batch job reported. A success a re-validation revoked (its products
-- found wanting) counts as that attempt's failure, for the re-validation's reason.
CREATE OR REPLACE VIEW granary_latest_outcome AS
SELECT
  granule_id,
  attempt,
  outcome,
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
    CASE WHEN l.revoked IS NULL THEN l.outcome ELSE 'failure' END AS outcome,
    l.platform,
    l.acquisition_date,
    coalesce(l.revoked.reason, l.classification.reason) AS reason,
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
WHERE rn = 1;
