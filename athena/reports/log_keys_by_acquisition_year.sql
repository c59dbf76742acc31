-- From the job logs table: granules by acquisition year and outcome, from keys alone.
SELECT
  year(acquisition_date) AS acquisition_year,
  outcome,
  count(DISTINCT granule_id) AS granules
FROM granary_job_logs
WHERE acquisition_date IS NOT NULL
GROUP BY year(acquisition_date), outcome
ORDER BY acquisition_year, outcome;
