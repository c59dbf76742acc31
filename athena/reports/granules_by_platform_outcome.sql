-- Granules by platform and latest outcome.
SELECT platform, outcome, count(*) AS granules
FROM granary_latest_outcome
GROUP BY platform, outcome
ORDER BY platform, outcome;
