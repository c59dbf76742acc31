-- The item records: one JSON object per item, where it is now. A record holds the history
-- entries of its latest write (its current state's, and a multi-step write's earlier steps)
-- until it moves past them; the view granary_item_transitions reads them with the history.
-- Only the columns the view reads are declared. Placeholder: ${BUCKET}.
CREATE EXTERNAL TABLE IF NOT EXISTS granary_item_records (
  id string,
  seq int,
  previous_state string,
  state string,
  reason string,
  download int,
  processing int,
  last_updated string,
  updated_by string,
  history_batch struct<keys: array<string>, through_seq: int>,
  earlier_steps array<struct<
    item_id: string,
    seq: int,
    `from`: string,
    `to`: string,
    reason: string,
    attempt: int,
    `at`: string,
    `by`: string
  >>
)
ROW FORMAT SERDE 'org.openx.data.jsonserde.JsonSerDe'
WITH SERDEPROPERTIES ('ignore.malformed.json' = 'true')
LOCATION 's3://${BUCKET}/items/';
