-- `granary audit`'s lists over Athena, for a campaign that has finished: every inventory row
-- fed and nothing in flight (the SQL cannot see the feeder's place or the open claims; the
-- command can). One row per list entry: list, granule_id, attempt (the latest logged, 1 when
-- none is). The command and this query give the same rows over the same data (the test holds
-- them to it on DuckDB).
-- Placeholders: ${MAX_RETRIES} (GRANARY_MAX_RETRIES; with GRANARY_MAX_SPOT_RETRIES set, use the
-- command), ${PRODUCT_PREFIX} and ${PRODUCT_SUFFIX} (a GRANARY_PRODUCT_KEYS template
-- prefix{id}suffix, e.g. products/ and .tif).
WITH inventory AS (
  SELECT DISTINCT granule_id FROM granary_inventories
),
logs AS (
  SELECT
    granule_id,
    attempt,
    outcome = 'success' AS success_side,
    superseded IS NOT NULL AS superseded,
    revoked IS NOT NULL AS revoked,
    route
  FROM granary_logs
),
successes AS (
  SELECT granule_id, count(DISTINCT attempt) AS n
  FROM logs
  WHERE success_side AND NOT superseded AND NOT revoked
  GROUP BY granule_id
),
latest AS (
  SELECT granule_id, attempt, revoked, route
  FROM (
    SELECT
      l.*,
      row_number() OVER (
        PARTITION BY l.granule_id ORDER BY l.attempt DESC, l.success_side ASC
      ) AS rn
    FROM logs AS l
    WHERE NOT l.superseded
  ) AS ranked
  WHERE rn = 1
),
last_attempt AS (
  SELECT granule_id, max(attempt) AS attempt FROM logs GROUP BY granule_id
),
judged AS (
  SELECT
    i.granule_id,
    coalesce(a.attempt, 1) AS attempt,
    coalesce(s.n, 0) AS successes,
    CASE
      WHEN s.n > 0 THEN 'succeeded'
      WHEN l.granule_id IS NULL OR l.revoked THEN 'missing'
      WHEN l.route = 'failure_dlq' THEN 'dead_lettered'
      WHEN l.route = 'cancelled' THEN 'cancelled'
      WHEN l.route = 'retry_queue' AND l.attempt > ${MAX_RETRIES} THEN 'dead_lettered'
      ELSE 'missing'
    END AS standing
  FROM inventory AS i
  LEFT JOIN successes AS s ON s.granule_id = i.granule_id
  LEFT JOIN latest AS l ON l.granule_id = i.granule_id
  LEFT JOIN last_attempt AS a ON a.granule_id = i.granule_id
),
products AS (
  SELECT
    substr(
      key,
      length('${PRODUCT_PREFIX}') + 1,
      length(key) - length('${PRODUCT_PREFIX}') - length('${PRODUCT_SUFFIX}')
    ) AS granule_id,
    key,
    size
  FROM granary_products_inventory
  WHERE dt = (SELECT max(dt) FROM granary_products_inventory)
    AND key LIKE '${PRODUCT_PREFIX}%${PRODUCT_SUFFIX}'
    AND length(key) > length('${PRODUCT_PREFIX}') + length('${PRODUCT_SUFFIX}')
    AND strpos(
      substr(key, length('${PRODUCT_PREFIX}') + 1, length(key) - length('${PRODUCT_PREFIX}') - length('${PRODUCT_SUFFIX}')),
      '/'
    ) = 0
),
product_counts AS (
  SELECT granule_id, count(DISTINCT key) AS n FROM products GROUP BY granule_id
)
SELECT 'missing' AS list, granule_id, attempt FROM judged WHERE standing = 'missing'
UNION ALL
SELECT 'dead_letters', granule_id, attempt FROM judged WHERE standing = 'dead_lettered'
UNION ALL
SELECT 'doubled', granule_id, attempt FROM judged WHERE successes > 1
UNION ALL
SELECT 'doubled', j.granule_id, j.attempt
FROM judged AS j
JOIN product_counts AS c ON c.granule_id = j.granule_id
WHERE c.n > 1
UNION ALL
SELECT 'product_missing', j.granule_id, j.attempt
FROM judged AS j
WHERE j.standing = 'succeeded'
  AND NOT EXISTS (
    SELECT 1 FROM products AS p
    WHERE p.key = '${PRODUCT_PREFIX}' || j.granule_id || '${PRODUCT_SUFFIX}' AND p.size > 0
  )
UNION ALL
SELECT 'orphan_products', p.granule_id, 1
FROM products AS p
LEFT JOIN inventory AS i ON i.granule_id = p.granule_id
LEFT JOIN last_attempt AS a ON a.granule_id = p.granule_id
WHERE i.granule_id IS NULL
  -- An imported item's granule has logs and no inventory row: its products are explained.
  AND a.granule_id IS NULL
ORDER BY list, granule_id;
