//! IAM by use: a [`Tap`] that records, for every call a function makes, the IAM action it needs
//! and the resource ARN it is checked against, so a test can hold each function's role in the
//! template to exactly what its code does.
//!
//! What AWS checks for each call (Service Authorization Reference, and the API references' own
//! "Permissions" sections):
//! - S3 GetObject (also ranged): `s3:GetObject` on the object. A GET of a key that does not exist
//!   answers 404 only to a caller that also has `s3:ListBucket` on the bucket; to any other it
//!   answers 403 (S3 API Reference, GetObject, Permissions). granary reads missing keys on purpose
//!   (a tracker before its first run, a hold nobody set), so such a read records both.
//! - PutObject and the multipart calls (Create, UploadPart, Complete): `s3:PutObject`;
//!   AbortMultipartUpload: `s3:AbortMultipartUpload`; DeleteObject: `s3:DeleteObject`;
//!   ListObjectsV2: `s3:ListBucket` on the bucket; CopyObject: `s3:GetObject` on the source and
//!   `s3:PutObject` on the destination.
//! - SQS: the action of the same name on the queue's ARN (ChangeMessageVisibility for a release,
//!   GetQueueAttributes for a depth).
//! - Batch SubmitJob: `batch:SubmitJob` on both the job queue and the job definition ("you must
//!   provide both", AWS Batch User Guide, Restrict to a job queue). ListJobs and DescribeJobs
//!   support no resource-level permissions: `*`.

use super::{Answer, Call, Op, Tap};
use crate::config::Config;
use std::collections::BTreeSet;
use std::sync::Mutex;

/// One permission a call needed.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Access {
    pub action: &'static str,
    pub resource: String,
}

/// Where the stack lives, for the ARNs of what config names only by name or URL.
#[derive(Debug, Clone)]
pub struct AwsAccount {
    pub partition: String,
    pub region: String,
    pub account: String,
}

/// The accesses one function's calls needed.
pub struct AccessLog {
    account: AwsAccount,
    bucket: String,
    job_queue: String,
    job_definition: String,
    seen: Mutex<BTreeSet<Access>>,
}

impl AccessLog {
    pub fn new(config: &Config, account: AwsAccount) -> Self {
        Self {
            bucket: config.layout.bucket.clone(),
            job_queue: batch_arn(
                &account,
                "job-queue",
                config.jobs.as_ref().map_or("", |j| j.job_queue.as_str()),
            ),
            job_definition: batch_arn(
                &account,
                "job-definition",
                config
                    .jobs
                    .as_ref()
                    .map_or("", |j| j.job_definition.as_str()),
            ),
            account,
            seen: Mutex::new(BTreeSet::new()),
        }
    }

    pub fn accesses(&self) -> BTreeSet<Access> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn record(&self, action: &'static str, resource: String) {
        self.seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(Access { action, resource });
    }

    fn object(&self, key: &str) -> String {
        format!("arn:{}:s3:::{}/{key}", self.account.partition, self.bucket)
    }

    fn bucket_arn(&self, bucket: &str) -> String {
        format!("arn:{}:s3:::{bucket}", self.account.partition)
    }

    /// A queue's ARN from its URL (`https://sqs.<region>.amazonaws.com/<account>/<name>`), or
    /// from a bare name in this account.
    fn queue(&self, url_or_name: &str) -> String {
        let parts: Vec<&str> = url_or_name.trim_end_matches('/').rsplitn(3, '/').collect();
        let a = &self.account;
        match parts.as_slice() {
            [name, account, host] if host.contains("sqs") => {
                let region = host
                    .split('.')
                    .find(|p| p.contains('-'))
                    .unwrap_or(&a.region);
                format!("arn:{}:sqs:{region}:{account}:{name}", a.partition)
            }
            _ => format!(
                "arn:{}:sqs:{}:{}:{}",
                a.partition,
                a.region,
                a.account,
                parts.first().copied().unwrap_or(url_or_name)
            ),
        }
    }
}

fn batch_arn(account: &AwsAccount, kind: &str, name_or_arn: &str) -> String {
    if name_or_arn.starts_with("arn:") {
        name_or_arn.to_owned()
    } else {
        format!(
            "arn:{}:batch:{}:{}:{kind}/{name_or_arn}",
            account.partition, account.region, account.account
        )
    }
}

impl Tap for AccessLog {
    fn leave(&self, call: &Call<'_>, answer: &Answer) {
        let target = call.target;
        match call.op {
            Op::StoreGet => {
                self.record("s3:GetObject", self.object(target));
                if answer.absent {
                    self.record("s3:ListBucket", self.bucket_arn(&self.bucket));
                }
            }
            Op::StorePut | Op::StoreUploadPart | Op::StoreUploadFinish => {
                self.record("s3:PutObject", self.object(target))
            }
            Op::StoreUploadAbort => self.record("s3:AbortMultipartUpload", self.object(target)),
            Op::StoreList => self.record("s3:ListBucket", self.bucket_arn(&self.bucket)),
            Op::StoreCopy => {
                if let Some(from) = call.from {
                    self.record("s3:GetObject", self.object(from));
                }
                self.record("s3:PutObject", self.object(target));
            }
            Op::StoreDelete => self.record("s3:DeleteObject", self.object(target)),
            Op::QueueSend => self.record("sqs:SendMessage", self.queue(target)),
            Op::QueueReceive => self.record("sqs:ReceiveMessage", self.queue(target)),
            Op::QueueDelete => self.record("sqs:DeleteMessage", self.queue(target)),
            Op::QueueRelease => self.record("sqs:ChangeMessageVisibility", self.queue(target)),
            Op::QueueDepth => self.record("sqs:GetQueueAttributes", self.queue(target)),
            Op::JobSubmit => {
                // IAM checks the queue the request names (AWS Batch User Guide, "Restrict to
                // a job queue"): the last-attempt queue for a granule's last chance.
                let queue = call.job_queue.map_or_else(
                    || self.job_queue.clone(),
                    |q| batch_arn(&self.account, "job-queue", q),
                );
                self.record("batch:SubmitJob", queue);
                self.record("batch:SubmitJob", self.job_definition.clone());
            }
            Op::JobList => self.record("batch:ListJobs", "*".into()),
            Op::JobDescribe => self.record("batch:DescribeJobs", "*".into()),
            // The job's ARN is Batch's to make; no function of the stack calls it (the
            // operator's `granary cancel` does, with the operator's own role).
            Op::JobTerminate => self.record("batch:TerminateJob", "*".into()),
            // A depositor's server and the identifier service need no IAM. The notification bus's ARN is not in the
            // log's configuration: the ingest IAM test names events:PutEvents itself.
            Op::RemoteSize | Op::RemoteFetch | Op::RemoteCallBack | Op::Mint | Op::BusPut => {}
            // An s3:// source is read with the importer's own role; an HTTP one needs no IAM.
            Op::SourceList | Op::SourceOpen => {
                if let Some(path) = target.strip_prefix("s3://") {
                    let (bucket, _) = path.split_once('/').unwrap_or((path, ""));
                    if call.op == Op::SourceList {
                        self.record("s3:ListBucket", self.bucket_arn(bucket));
                    } else {
                        self.record(
                            "s3:GetObject",
                            format!("arn:{}:s3:::{path}", self.account.partition),
                        );
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::memory::MemoryStore;
    use crate::adapters::tap::TappedStore;
    use crate::ports::ObjectStore;
    use std::sync::Arc;

    fn log() -> Arc<AccessLog> {
        let config = Config::from_pairs(&[
            ("GRANARY_BUCKET", "b"),
            ("GRANARY_JOB_QUEUE", "q"),
            (
                "GRANARY_JOB_DEFINITION",
                "arn:aws:batch:eu-west-1:1:job-definition/d:3",
            ),
            ("GRANARY_RETRY_QUEUE_URL", "r"),
            ("GRANARY_FAILURE_DLQ_URL", "f"),
        ])
        .unwrap();
        Arc::new(AccessLog::new(
            &config,
            AwsAccount {
                partition: "aws".into(),
                region: "eu-west-1".into(),
                account: "1".into(),
            },
        ))
    }

    #[tokio::test]
    async fn a_read_of_a_missing_key_needs_list_bucket_to_be_a_404() {
        let log = log();
        let store = TappedStore {
            inner: Arc::new(MemoryStore::new()),
            tap: log.clone(),
        };
        assert!(store.get("holds/feeder.json").await.unwrap().is_none());
        let got: Vec<(&str, String)> = log
            .accesses()
            .into_iter()
            .map(|a| (a.action, a.resource))
            .collect();
        assert_eq!(
            got,
            [
                (
                    "s3:GetObject",
                    "arn:aws:s3:::b/holds/feeder.json".to_owned()
                ),
                ("s3:ListBucket", "arn:aws:s3:::b".to_owned()),
            ]
        );
    }

    #[test]
    fn queue_arns_come_from_their_urls_and_job_names_become_arns() {
        let log = log();
        assert_eq!(
            log.queue("https://sqs.us-west-2.amazonaws.com/42/retries"),
            "arn:aws:sqs:us-west-2:42:retries"
        );
        assert_eq!(log.queue("retries"), "arn:aws:sqs:eu-west-1:1:retries");
        assert_eq!(log.job_queue, "arn:aws:batch:eu-west-1:1:job-queue/q");
        assert_eq!(
            log.job_definition,
            "arn:aws:batch:eu-west-1:1:job-definition/d:3"
        );
    }

    /// IAM checks the job queue a SubmitJob names: the runner's own, or the request's own (a
    /// granule's last chance on the last-attempt queue).
    #[tokio::test]
    async fn a_submit_to_another_queue_needs_that_queue() {
        use crate::adapters::memory::MemoryJobRunner;
        use crate::adapters::tap::TappedJobs;
        use crate::ports::JobRunner;
        let log = log();
        let jobs = TappedJobs {
            inner: Arc::new(MemoryJobRunner::default()),
            tap: log.clone(),
        };
        let id = crate::domain::granule::GranuleId::parse("g").unwrap();
        let mut request = crate::contracts::job::job_request("n", None, &id, 2);
        jobs.submit(request.clone()).await.unwrap();
        request.queue = Some("on-demand".into());
        jobs.submit(request).await.unwrap();
        let queues: Vec<String> = log
            .accesses()
            .into_iter()
            .filter(|a| a.action == "batch:SubmitJob" && a.resource.contains("job-queue"))
            .map(|a| a.resource)
            .collect();
        assert_eq!(
            queues,
            [
                "arn:aws:batch:eu-west-1:1:job-queue/on-demand",
                "arn:aws:batch:eu-west-1:1:job-queue/q"
            ]
        );
    }
}
