-- Granules by acquisition year and latest outcome.
SELECT
  CASE WHEN acquisition_date = 'unknown' THEN 'unknown' ELSE substr(acquisition_date, 1, 4) END
    AS acquisition_year,
  outcome,
  count(*) AS granules
FROM granary_latest_outcome
GROUP BY 1, 2
ORDER BY 1, 2;
