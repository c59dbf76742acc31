-- Keys only: the daily S3 Inventory report of logs/ (configured by the template). Counting
-- millions of outcomes from the keys costs one Parquet scan instead of millions of GETs, since
-- every key carries outcome, platform, acquisition date, granule and attempt.
-- The report folders are named dt=YYYY-MM-DD-HH-MM at the hour S3 delivered them; projection
-- covers every hour of the last three days, so the latest daily report is always in range
-- (granary_job_logs reads the latest). The template creates this table (LogsInventoryTable).
-- Placeholders: ${INVENTORY_BUCKET} (InventoryBucketName output), ${BUCKET} (DataBucketName).
CREATE EXTERNAL TABLE IF NOT EXISTS granary_logs_inventory (
  bucket string,
  key string,
  size bigint,
  last_modified_date timestamp
)
PARTITIONED BY (dt string)
ROW FORMAT SERDE 'org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe'
STORED AS INPUTFORMAT 'org.apache.hadoop.hive.ql.io.SymlinkTextInputFormat'
OUTPUTFORMAT 'org.apache.hadoop.hive.ql.io.IgnoreKeyTextOutputFormat'
LOCATION 's3://${INVENTORY_BUCKET}/logs-inventory/${BUCKET}/logs-inventory/hive/'
TBLPROPERTIES (
  'projection.enabled' = 'true',
  'projection.dt.type' = 'date',
  'projection.dt.format' = 'yyyy-MM-dd-HH-mm',
  'projection.dt.range' = 'NOW-3DAYS,NOW',
  'projection.dt.interval' = '1',
  'projection.dt.interval.unit' = 'HOURS'
);
