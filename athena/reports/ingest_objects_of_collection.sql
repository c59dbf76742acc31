-- A collection's stored objects: how many, how many files and bytes, how many under an
-- identifier, and the last recorded. Placeholder: ${COLLECTION}.
SELECT
  collection,
  count(*) AS objects,
  sum(file_count) AS files,
  sum(bytes) AS bytes,
  count(identifier) AS identified,
  max(recorded_at) AS last_recorded
FROM granary_ingest_catalog
WHERE collection = '${COLLECTION}'
GROUP BY collection;
