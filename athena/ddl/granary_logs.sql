-- The outcome logs: one JSON object per finished attempt, hive-partitioned by outcome, platform
-- and acquisition date. Partition projection computes the partitions from these properties, so
-- no crawler and no MSCK REPAIR is needed as millions of objects arrive.
-- Placeholders: ${BUCKET} (the stack's DataBucketName output), ${PLATFORMS} (comma-separated
-- platform labels your ids produce; HLS: L30,S30). Ids granary could not date are written under
-- acquisition_date=unknown, which a date projection cannot name: count those with
-- granary_logs_inventory, or `granary report --scan`.
CREATE EXTERNAL TABLE IF NOT EXISTS granary_logs (
  granule_id string,
  attempt int,
  classification struct<outcome: string, batch_rules: string, reason: string>,
  route string,
  job_id string,
  job_name string,
  logged_at string,
  routed_at string,
  superseded struct<by_attempt: int, by_job_id: string, at: string>,
  revoked struct<through_attempt: int, reason: string, at: string>,
  job struct<
    status: string,
    statusreason: string,
    createdat: bigint,
    startedat: bigint,
    stoppedat: bigint,
    container: struct<
      exitcode: int,
      reason: string,
      logstreamname: string,
      vcpus: double,
      memory: double,
      resourcerequirements: array<struct<type: string, value: string>>
    >,
    attempts: array<struct<
      startedat: bigint,
      stoppedat: bigint,
      statusreason: string,
      container: struct<exitcode: int, reason: string, logstreamname: string>
    >>
  >
)
PARTITIONED BY (outcome string, platform string, acquisition_date string)
ROW FORMAT SERDE 'org.openx.data.jsonserde.JsonSerDe'
WITH SERDEPROPERTIES ('ignore.malformed.json' = 'true')
LOCATION 's3://${BUCKET}/logs/'
TBLPROPERTIES (
  'projection.enabled' = 'true',
  'projection.outcome.type' = 'enum',
  'projection.outcome.values' = 'success,failure',
  'projection.platform.type' = 'enum',
  'projection.platform.values' = '${PLATFORMS}',
  'projection.acquisition_date.type' = 'date',
  'projection.acquisition_date.format' = 'yyyy-MM-dd',
  'projection.acquisition_date.range' = '2013-01-01,NOW',
  'projection.acquisition_date.interval' = '1',
  'projection.acquisition_date.interval.unit' = 'DAYS',
  'storage.location.template' = 's3://${BUCKET}/logs/outcome=${outcome}/platform=${platform}/acquisition_date=${acquisition_date}/'
);
