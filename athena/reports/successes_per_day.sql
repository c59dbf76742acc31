-- Successes over time: granules whose latest outcome is success, by the UTC day it was logged.
SELECT substr(logged_at, 1, 10) AS day, count(*) AS granules
FROM granary_latest_outcome
WHERE outcome = 'success'
GROUP BY 1
ORDER BY 1;
