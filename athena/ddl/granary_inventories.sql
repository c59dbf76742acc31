-- The campaign's inventories: the Parquet files the feeder reads (`granary inventory convert`
-- writes them), one row a granule. `granary audit`'s SQL joins them with the logs.
-- Placeholders: ${BUCKET} (the stack output DataBucketName).
CREATE EXTERNAL TABLE IF NOT EXISTS granary_inventories (
  granule_id string,
  start_datetime string
)
STORED AS PARQUET
LOCATION 's3://${BUCKET}/inventories/';
