-- Keys only: an S3 Inventory report of the products' prefix (set one up on the bucket that
-- holds them, as the template does for logs/). `granary audit`'s SQL reads the latest report.
-- Placeholders: ${PRODUCTS_INVENTORY_LOCATION} (the report's hive/ folder, s3://…/hive/).
CREATE EXTERNAL TABLE IF NOT EXISTS granary_products_inventory (
  bucket string,
  key string,
  size bigint,
  last_modified_date timestamp
)
PARTITIONED BY (dt string)
ROW FORMAT SERDE 'org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe'
STORED AS INPUTFORMAT 'org.apache.hadoop.hive.ql.io.SymlinkTextInputFormat'
OUTPUTFORMAT 'org.apache.hadoop.hive.ql.io.IgnoreKeyTextOutputFormat'
LOCATION '${PRODUCTS_INVENTORY_LOCATION}'
TBLPROPERTIES (
  'projection.enabled' = 'true',
  'projection.dt.type' = 'date',
  'projection.dt.format' = 'yyyy-MM-dd-HH-mm',
  'projection.dt.range' = 'NOW-3DAYS,NOW',
  'projection.dt.interval' = '1',
  'projection.dt.interval.unit' = 'HOURS'
);
