-- The ingest queue's catalog of stored objects (seed 004's inventory step): one JSON record per
-- stored object, written by recording from the object's storage manifest — its identifier,
-- local id, deposit description, storage manifest and every file as stored. Partitioned by
-- collection, injected: every query names the collection it reads (WHERE collection = '…').
-- Placeholder: ${BUCKET}.
CREATE EXTERNAL TABLE IF NOT EXISTS granary_ingest_catalog (
  job string,
  batch string,
  identifier string,
  local_id string,
  primary_id string,
  submission_mode string,
  erc_who string,
  erc_what string,
  erc_when string,
  storage_manifest string,
  file_count int,
  bytes bigint,
  files array<struct<key: string, sha256: string, size: bigint, name: string>>,
  processing_job string,
  recorded_at string
)
PARTITIONED BY (collection string)
ROW FORMAT SERDE 'org.openx.data.jsonserde.JsonSerDe'
WITH SERDEPROPERTIES ('ignore.malformed.json' = 'true')
LOCATION 's3://${BUCKET}/ingest/catalog/'
TBLPROPERTIES (
  'projection.enabled' = 'true',
  'projection.collection.type' = 'injected',
  'storage.location.template' = 's3://${BUCKET}/ingest/catalog/collection=${collection}/'
);
