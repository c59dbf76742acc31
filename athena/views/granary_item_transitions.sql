-- Every item transition, in one place: the history objects (one entry each, or a window's
-- creations as lines of its batch objects), and the entries each record holds — its latest
-- write's: the current state's and a multi-step write's earlier steps — which become objects only
-- when the record moves past them (a granule's last transition never does). A record still in
-- the state its window's batch creation left it in holds none of its own: its entries are the
-- batch lines. UNION keeps one of an entry both hold (a mover wrote it, then lost the record's
-- compare-and-swap). The same entries as `granary items history`.
CREATE OR REPLACE VIEW granary_item_transitions AS
SELECT item_id, seq, "from", "to", reason, attempt, "at", "by"
FROM granary_item_history
UNION
SELECT
  id AS item_id,
  seq,
  previous_state AS "from",
  state AS "to",
  reason,
  CASE
    WHEN state IN ('DISCOVERED', 'DOWNLOADING', 'DOWNLOADED', 'DOWNLOADING_FAILED', 'IGNORE', 'SKIPPED')
      THEN download
    ELSE processing
  END AS attempt,
  last_updated AS "at",
  updated_by AS "by"
FROM granary_item_records
WHERE history_batch IS NULL OR seq > history_batch.through_seq
UNION
-- (Unnesting an array of rows gives a column per field: the alias names all eight.)
SELECT held_item_id, held_seq, held_from, held_to, held_reason, held_attempt, held_at, held_by
FROM granary_item_records
CROSS JOIN UNNEST(earlier_steps)
  AS held (held_item_id, held_seq, held_from, held_to, held_reason, held_attempt, held_at, held_by)
WHERE history_batch IS NULL OR seq > history_batch.through_seq;
