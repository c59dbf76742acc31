-- The status of each step of each item's workflow (seed 001's processing-status rows), read from
-- the item's transitions (granary_item_transitions: the append-only history and the entries each
-- record holds): a step begins with the entry that enters DOWNLOADING (a download
-- attempt), DOWNLOADED (the admission checks) or PROCESSING (a processing attempt), and is
-- complete once a later entry of the item leaves that state. The same rows as
-- `granary items steps` (shared/src/domain/item_steps.rs); tests/tests/athena_sql.rs runs both
-- over one campaign's history and compares them.
CREATE OR REPLACE VIEW granary_item_steps AS
WITH entries AS (
  SELECT
    item_id,
    seq,
    "to" AS state,
    attempt,
    "at" AS started,
    LEAD("at") OVER (PARTITION BY item_id ORDER BY seq) AS ended,
    LEAD("to") OVER (PARTITION BY item_id ORDER BY seq) AS ended_in
  FROM granary_item_transitions
)
SELECT
  concat(item_id, '.', CAST(seq AS varchar)) AS id,
  CASE state
    WHEN 'DOWNLOADED' THEN 'admission'
    WHEN 'DOWNLOADING' THEN concat('download attempt ', CAST(attempt AS varchar))
    ELSE concat('processing attempt ', CAST(attempt AS varchar))
  END AS name,
  CASE state
    WHEN 'DOWNLOADING' THEN 'download'
    WHEN 'DOWNLOADED' THEN 'admission'
    ELSE 'processing'
  END AS type,
  ended IS NOT NULL AS step_complete,
  item_id,
  concat('items/', item_id, '.json') AS item_record,
  started,
  ended,
  ended_in
FROM entries
WHERE state IN ('DOWNLOADING', 'DOWNLOADED', 'PROCESSING');
