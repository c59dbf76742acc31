-- The item history: one JSON object per lifecycle transition, never rewritten, partitioned by the
-- day it happened and the state it entered. Placeholder: ${BUCKET}.
CREATE EXTERNAL TABLE IF NOT EXISTS granary_item_history (
  item_id string,
  seq int,
  `from` string,
  `to` string,
  reason string,
  attempt int,
  `at` string,
  `by` string,
  record struct<
    name: string,
    workflow_complete: boolean,
    terminal: boolean,
    download: int,
    processing: int,
    raw_file_hash: string,
    size: bigint,
    checksum: string,
    source: string,
    stored_key: string,
    job_id: string,
    created: string
  >
)
PARTITIONED BY (`date` string, state string)
ROW FORMAT SERDE 'org.openx.data.jsonserde.JsonSerDe'
WITH SERDEPROPERTIES ('ignore.malformed.json' = 'true')
LOCATION 's3://${BUCKET}/history/'
TBLPROPERTIES (
  'projection.enabled' = 'true',
  'projection.date.type' = 'date',
  'projection.date.format' = 'yyyy-MM-dd',
  'projection.date.range' = '2024-01-01,NOW',
  'projection.date.interval' = '1',
  'projection.date.interval.unit' = 'DAYS',
  'projection.state.type' = 'enum',
  'projection.state.values' = 'DISCOVERED,DOWNLOADING,DOWNLOADED,DOWNLOADING_FAILED,IGNORE,SKIPPED,READY,PROCESSING,PROCESSED,PROCESSING_FAILED,ABANDONED',
  'storage.location.template' = 's3://${BUCKET}/history/date=${date}/state=${state}/'
);
