//! Creates granary's resources on an emulator (or any endpoint): bucket, queues, the EventBridge
//! rule that buffers Batch events in SQS, and a Batch compute environment, job queue and job
//! definition. Names are unique per stack so tests can share one emulator.

use anyhow::{Context, Result};
use aws_sdk_batch::types::{
    CeState, CeType, ComputeEnvironmentOrder, ContainerProperties, EvaluateOnExit,
    JobDefinitionType, JobTimeout, JqState, ResourceRequirement, ResourceType, RetryAction,
    RetryStrategy,
};
use aws_sdk_sqs::types::QueueAttributeName;
use granary::adapters::aws::AwsClients;
use granary::config::Config;
use std::collections::HashMap;

/// What the job definition's RetryStrategy says: Batch's own retries before granary's.
#[derive(Debug, Clone)]
pub struct StackOptions {
    /// RetryStrategy.attempts of the job definition (1 = Batch never retries).
    pub batch_attempts: i32,
    /// Extra/overriding config variables (GRANARY_MAX_RETRIES, GRANARY_CLAIM_LEASE_SECS, ...).
    pub env: HashMap<String, String>,
}

impl Default for StackOptions {
    fn default() -> Self {
        Self {
            batch_attempts: 2,
            env: HashMap::new(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct EmulatorStack {
    pub name: String,
    pub bucket: String,
    pub retry_queue_url: String,
    pub failure_dlq_url: String,
    /// The Batch-events buffer queue (EventBridge rule target) and its own DLQ.
    pub events_queue_url: String,
    pub events_dlq_url: String,
    /// Item ids between importer steps.
    pub import_queue_url: String,
    pub rule_name: String,
    pub job_queue: String,
    pub job_queue_arn: String,
    pub job_definition: String,
    /// False when the endpoint has no Batch (LocalStack's free edition): jobs go to granary's
    /// in-memory Batch instead (`job_services`).
    pub batch: bool,
    /// The job definition's RetryStrategy.attempts.
    pub batch_attempts: i32,
    pub env: HashMap<String, String>,
}

/// Capability probe: does this endpoint have AWS Batch? (See
/// `granary::adapters::aws::batch::endpoint_has_batch`.)
pub async fn batch_available(clients: &AwsClients) -> Result<bool> {
    Ok(granary::adapters::aws::batch::endpoint_has_batch(&clients.batch).await?)
}

/// Where a stack's jobs go: the job-runner port the handlers submit to, the simulator's view of
/// the same Batch, and the in-memory Batch when that is what it is.
pub struct StackBatch {
    pub jobs: std::sync::Arc<dyn granary::ports::JobRunner>,
    pub ledger: std::sync::Arc<dyn super::simulator::JobLedger>,
    pub in_memory: Option<std::sync::Arc<super::in_memory::InMemoryBatch>>,
}

/// The endpoint's Batch when it has one; otherwise granary's in-memory Batch with the stack's job
/// queue ARN, so the events the simulator makes of its jobs still match the stack's EventBridge
/// rule and travel the endpoint's EventBridge into its SQS queue.
pub fn stack_batch(stack: &EmulatorStack, clients: &AwsClients) -> StackBatch {
    use granary::adapters::aws::BatchJobRunner;
    use std::sync::Arc;
    if stack.batch {
        return StackBatch {
            jobs: Arc::new(BatchJobRunner::new(
                clients.batch.clone(),
                &stack.job_queue,
                &stack.job_definition,
            )),
            ledger: Arc::new(super::simulator::EndpointBatch::new(
                clients.batch.clone(),
                &stack.job_queue,
            )),
            in_memory: None,
        };
    }
    let attempts = u32::try_from(stack.batch_attempts).unwrap_or(1).max(1);
    let batch = Arc::new(super::in_memory::InMemoryBatch::new(
        &stack.job_queue_arn,
        &stack.job_definition,
        super::events::default_retry_strategy(attempts),
    ));
    StackBatch {
        jobs: batch.clone(),
        ledger: batch.clone(),
        in_memory: Some(batch),
    }
}

/// Creates (or finds) SQS queue `name` with `attrs`: its URL and ARN.
pub async fn queue(
    clients: &AwsClients,
    name: &str,
    attrs: &[(QueueAttributeName, String)],
) -> Result<(String, String)> {
    let mut req = clients.sqs.create_queue().queue_name(name);
    for (k, v) in attrs {
        req = req.attributes(k.clone(), v);
    }
    let url = req
        .send()
        .await
        .with_context(|| format!("creating SQS queue {name}"))?
        .queue_url
        .unwrap_or_default();
    let arn = clients
        .sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .context("reading queue ARN")?
        .attributes
        .and_then(|a| a.get(&QueueAttributeName::QueueArn).cloned())
        .context("queue has no ARN")?;
    Ok((url, arn))
}

impl EmulatorStack {
    /// Provisions a stack named `name` (lowercase letters, digits, hyphens).
    pub async fn provision(
        clients: &AwsClients,
        iam: &aws_sdk_iam::Client,
        name: &str,
        options: StackOptions,
    ) -> Result<Self> {
        // Asked before anything is created, so an endpoint that is down leaves nothing behind.
        let batch = batch_available(clients).await?;
        let bucket = create_bucket(clients, name).await?;
        let queues = StackQueues::create(clients, name).await?;

        let (job_queue, job_queue_arn, job_definition) = if batch {
            provision_batch(clients, iam, name, &options).await?
        } else {
            // The in-memory Batch's queue: its ARN is what the rule below matches.
            (
                format!("{name}-jobs"),
                format!("arn:aws:batch:us-east-1:000000000000:job-queue/{name}-jobs"),
                format!("{name}-job"),
            )
        };

        let rule_name = route_batch_events(clients, name, &job_queue_arn, &queues).await?;

        let mut env = HashMap::from([
            ("GRANARY_BUCKET".to_owned(), bucket.clone()),
            ("GRANARY_JOB_QUEUE".to_owned(), job_queue.clone()),
            ("GRANARY_JOB_DEFINITION".to_owned(), job_definition.clone()),
            (
                "GRANARY_RETRY_QUEUE_URL".to_owned(),
                queues.retry_queue_url.clone(),
            ),
            (
                "GRANARY_FAILURE_DLQ_URL".to_owned(),
                queues.failure_dlq_url.clone(),
            ),
            (
                "GRANARY_IMPORT_QUEUE_URL".to_owned(),
                queues.import_queue_url.clone(),
            ),
        ]);
        env.extend(options.env);
        Ok(Self {
            name: name.to_owned(),
            bucket,
            retry_queue_url: queues.retry_queue_url,
            failure_dlq_url: queues.failure_dlq_url,
            events_queue_url: queues.events_queue_url,
            events_dlq_url: queues.events_dlq_url,
            import_queue_url: queues.import_queue_url,
            rule_name,
            job_queue,
            job_queue_arn,
            job_definition,
            batch,
            batch_attempts: options.batch_attempts,
            env,
        })
    }

    pub fn config(&self) -> Result<Config> {
        config_from(&self.env)
    }
}

/// granary's configuration from `env`, falling back to the process environment (so
/// `GRANARY_ITEM_RECORDS=off` and the like apply to a local stack too).
pub fn config_from(env: &HashMap<String, String>) -> Result<Config> {
    Config::from_lookup(|k| env.get(k).cloned().or_else(|| std::env::var(k).ok()))
        .context("stack configuration")
}

async fn provision_batch(
    clients: &AwsClients,
    iam: &aws_sdk_iam::Client,
    name: &str,
    options: &StackOptions,
) -> Result<(String, String, String)> {
    let role_arn = create_batch_service_role(iam, name).await?;
    let ce_arn = create_compute_environment(clients, name, &role_arn).await?;
    let job_queue = format!("{name}-jobs");
    let jq = clients
        .batch
        .create_job_queue()
        .job_queue_name(&job_queue)
        .state(JqState::Enabled)
        .priority(1)
        .compute_environment_order(
            ComputeEnvironmentOrder::builder()
                .order(1)
                .compute_environment(ce_arn)
                .build(),
        )
        .send()
        .await
        .context("creating the job queue")?;
    let job_queue_arn = jq.job_queue_arn.context("no job queue ARN")?;
    let job_definition = format!("{name}-job");
    register_job_definition(
        clients,
        &job_definition,
        granary_retry_strategy(options.batch_attempts),
    )
    .await?;
    Ok((job_queue, job_queue_arn, job_definition))
}

/// Creates the role Batch assumes, `{name}-batch-service`: its ARN.
async fn create_batch_service_role(iam: &aws_sdk_iam::Client, name: &str) -> Result<String> {
    let trust = serde_json::json!({
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"Service": "batch.amazonaws.com"}, "Action": "sts:AssumeRole"}]
    });
    iam.create_role()
        .role_name(format!("{name}-batch-service"))
        .assume_role_policy_document(trust.to_string())
        .send()
        .await
        .context("creating the Batch service role")?
        .role
        .map(|r| r.arn)
        .context("no role in CreateRole response")
}

/// Creates the unmanaged compute environment `{name}-ce`: its ARN.
async fn create_compute_environment(
    clients: &AwsClients,
    name: &str,
    role_arn: &str,
) -> Result<String> {
    let ce = clients
        .batch
        .create_compute_environment()
        .compute_environment_name(format!("{name}-ce"))
        .r#type(CeType::Unmanaged)
        .state(CeState::Enabled)
        .service_role(role_arn)
        .send()
        .await
        .context("creating the compute environment")?;
    ce.compute_environment_arn
        .context("no compute environment ARN")
}

/// Batch retries Spot reclaims and image-pull failures itself (and exit code 66); everything
/// else exits to granary. `attempts` in all.
fn granary_retry_strategy(attempts: i32) -> RetryStrategy {
    RetryStrategy::builder()
        .attempts(attempts)
        .evaluate_on_exit(
            EvaluateOnExit::builder()
                .on_status_reason("Host EC2*")
                .action(RetryAction::Retry)
                .build(),
        )
        .evaluate_on_exit(
            EvaluateOnExit::builder()
                .on_reason("CannotPullContainerError*")
                .action(RetryAction::Retry)
                .build(),
        )
        .evaluate_on_exit(
            EvaluateOnExit::builder()
                .on_exit_code("66")
                .action(RetryAction::Retry)
                .build(),
        )
        .evaluate_on_exit(
            EvaluateOnExit::builder()
                .on_reason("*")
                .action(RetryAction::Exit)
                .build(),
        )
        .build()
}

/// Registers the container job definition `job_definition`: busybox's `process-granule`, 1 vCPU
/// and 2 GiB, an hour an attempt, retried as `retry` says.
async fn register_job_definition(
    clients: &AwsClients,
    job_definition: &str,
    retry: RetryStrategy,
) -> Result<()> {
    clients
        .batch
        .register_job_definition()
        .job_definition_name(job_definition)
        .r#type(JobDefinitionType::Container)
        .container_properties(
            ContainerProperties::builder()
                .image("public.ecr.aws/docker/library/busybox:latest")
                .command("process-granule")
                .resource_requirements(
                    ResourceRequirement::builder()
                        .r#type(ResourceType::Vcpu)
                        .value("1")
                        .build(),
                )
                .resource_requirements(
                    ResourceRequirement::builder()
                        .r#type(ResourceType::Memory)
                        .value("2048")
                        .build(),
                )
                .build(),
        )
        .retry_strategy(retry)
        .timeout(JobTimeout::builder().attempt_duration_seconds(3600).build())
        .send()
        .await
        .context("registering the job definition")?;
    Ok(())
}

/// Creates the stack's bucket, `{name}-data`: its name.
async fn create_bucket(clients: &AwsClients, name: &str) -> Result<String> {
    let bucket = format!("{name}-data");
    clients
        .s3
        .create_bucket()
        .bucket(&bucket)
        .send()
        .await
        .with_context(|| {
            format!(
                "creating bucket {bucket} (is the endpoint reachable? AWS_ENDPOINT_URL={:?})",
                std::env::var("AWS_ENDPOINT_URL").ok()
            )
        })?;
    Ok(bucket)
}

/// The stack's SQS queues.
struct StackQueues {
    failure_dlq_url: String,
    retry_queue_url: String,
    import_queue_url: String,
    events_dlq_url: String,
    events_queue_url: String,
    /// What the EventBridge rule targets and the queue policy allows.
    events_queue_arn: String,
}

impl StackQueues {
    /// Creates the failure DLQ, the retry and import queues, and the Batch-events buffer with its
    /// own DLQ (after 5 receives).
    async fn create(clients: &AwsClients, name: &str) -> Result<Self> {
        let fourteen_days = (14 * 24 * 3600).to_string();
        let (failure_dlq_url, _) = queue(
            clients,
            &format!("{name}-failure-dlq"),
            &[(
                QueueAttributeName::MessageRetentionPeriod,
                fourteen_days.clone(),
            )],
        )
        .await?;
        let (retry_queue_url, _) = queue(
            clients,
            &format!("{name}-retry"),
            &[(QueueAttributeName::VisibilityTimeout, "60".into())],
        )
        .await?;
        let (import_queue_url, _) = queue(
            clients,
            &format!("{name}-import"),
            &[(QueueAttributeName::VisibilityTimeout, "60".into())],
        )
        .await?;
        let (events_dlq_url, events_dlq_arn) = queue(
            clients,
            &format!("{name}-events-dlq"),
            &[(QueueAttributeName::MessageRetentionPeriod, fourteen_days)],
        )
        .await?;
        let redrive =
            serde_json::json!({"deadLetterTargetArn": events_dlq_arn, "maxReceiveCount": 5})
                .to_string();
        let (events_queue_url, events_queue_arn) = queue(
            clients,
            &format!("{name}-batch-events"),
            &[
                (QueueAttributeName::VisibilityTimeout, "60".into()),
                (QueueAttributeName::RedrivePolicy, redrive),
            ],
        )
        .await?;
        Ok(Self {
            failure_dlq_url,
            retry_queue_url,
            import_queue_url,
            events_dlq_url,
            events_queue_url,
            events_queue_arn,
        })
    }
}

/// Batch → EventBridge → SQS buffer: a rule for only our queue's terminal states, allowed to send
/// to the events queue and targeting it. The rule's name.
async fn route_batch_events(
    clients: &AwsClients,
    name: &str,
    job_queue_arn: &str,
    queues: &StackQueues,
) -> Result<String> {
    let rule_name = format!("{name}-batch-state");
    let pattern = serde_json::json!({
        "source": ["aws.batch"],
        "detail-type": ["Batch Job State Change"],
        "detail": {"jobQueue": [job_queue_arn], "status": ["SUCCEEDED", "FAILED"]}
    });
    let rule_arn = clients
        .events
        .put_rule()
        .name(&rule_name)
        .event_pattern(pattern.to_string())
        .send()
        .await
        .context("creating the Batch state-change rule")?
        .rule_arn
        .unwrap_or_default();
    let policy = serde_json::json!({
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"Service": "events.amazonaws.com"},
            "Action": "sqs:SendMessage", "Resource": queues.events_queue_arn,
            "Condition": {"ArnEquals": {"aws:SourceArn": rule_arn}}}]
    });
    clients
        .sqs
        .set_queue_attributes()
        .queue_url(&queues.events_queue_url)
        .attributes(QueueAttributeName::Policy, policy.to_string())
        .send()
        .await
        .context("allowing EventBridge to send to the events queue")?;
    clients
        .events
        .put_targets()
        .rule(&rule_name)
        .targets(
            aws_sdk_eventbridge::types::Target::builder()
                .id("batch-events-buffer")
                .arn(&queues.events_queue_arn)
                .build()?,
        )
        .send()
        .await
        .context("targeting the events queue")?;
    Ok(rule_name)
}
