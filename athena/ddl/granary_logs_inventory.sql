-- Keys only: the daily S3 Inventory report of logs/ (configured by the template). Counting
-- millions of outcomes from the keys costs one Parquet scan instead of millions of GETs, since
-- every key carries outcome, platform, acquisition date, granule and attempt.
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
  'projection.dt.range' = '2024-01-01-00-00,NOW',
  'projection.dt.interval' = '1',
  'projection.dt.interval.unit' = 'DAYS'
);
