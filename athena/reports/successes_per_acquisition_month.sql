-- Successes per acquisition month and platform (what `granary report --chart` draws).
SELECT substr(acquisition_date, 1, 7) AS acquisition_month, platform, count(*) AS granules
FROM granary_latest_outcome
WHERE outcome = 'success' AND acquisition_date <> 'unknown'
GROUP BY 1, 2
ORDER BY 1, 2;
