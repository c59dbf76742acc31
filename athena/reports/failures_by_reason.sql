-- What is failing now, and why: granules still failing, by the monitor's reason.
SELECT reason, count(*) AS granules
FROM granary_current_failures
GROUP BY reason
ORDER BY granules DESC, reason;
