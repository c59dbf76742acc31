-- From the keys-only inventory table: log objects by outcome and platform on the latest report,
-- without reading a single log. Placeholder: ${REPORT_DT} (e.g. 2026-11-22-01-00).
SELECT
  regexp_extract(key, 'outcome=([^/]+)', 1) AS outcome,
  regexp_extract(key, 'platform=([^/]+)', 1) AS platform,
  count(*) AS log_objects,
  count(DISTINCT regexp_extract(key, 'granule_id=([^/]+)', 1)) AS granules
FROM granary_logs_inventory
WHERE dt = '${REPORT_DT}'
GROUP BY 1, 2
ORDER BY 1, 2;
