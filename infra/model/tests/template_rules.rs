//! What the deployed stack needs of `infra/template.yaml` beyond what cfn-lint and checkov check,
//! each rule the check that would have caught a defect found in review (issue #15): a function
//! whose failures no alarm sees, an alarm topic CloudWatch cannot publish to, event sources that
//! throttle messages into their DLQ, a Batch rule that drops what it cannot deliver, queues that
//! accept plain HTTP, logs kept forever, multipart parts billed forever, wildcard ARNs.
//!
//! The template is resolved for a stack with its parameter defaults (and an S3 source, so the
//! conditional importer resources exist).
#![allow(clippy::too_many_lines)] // test code: a scenario reads top to bottom

use granary_template::{Resolved, Stack, Template};
use serde_json::Value;

fn resolved() -> (Template, Resolved) {
    let template = Template::granary().unwrap();
    let stack = Stack::new("rules")
        .with("SubnetIds", "subnet-1")
        .with("SecurityGroupIds", "sg-1")
        .with("ContainerImage", "image")
        .with("SourceUrl", "s3://source-bucket/in/");
    let resolved = template.resolve(&stack).unwrap();
    (template, resolved)
}

fn of_type<'a>(r: &'a Resolved, kind: &'a str) -> impl Iterator<Item = (&'a String, &'a Value)> {
    r.resources.iter().filter(move |(_, v)| v["Type"] == kind)
}

fn number(v: &Value) -> u64 {
    match v {
        Value::Number(n) => n.as_u64().unwrap(),
        Value::String(s) => s.parse().unwrap(),
        other => panic!("{other} is not a number"),
    }
}

/// A function's name in the stack (its Ref), as its alarm and log group name it.
fn physical(logical: &str) -> String {
    format!("rules-{logical}")
}

#[test]
fn every_function_has_an_errors_alarm_that_notifies() {
    let (_, r) = resolved();
    for f in r.functions() {
        let name = physical(f.logical_id);
        let alarmed = of_type(&r, "AWS::CloudWatch::Alarm").any(|(_, a)| {
            let p = &a["Properties"];
            p["Namespace"] == "AWS/Lambda"
                && p["MetricName"] == "Errors"
                && p["Dimensions"][0]["Value"] == name.as_str()
                && p["AlarmActions"].as_array().is_some_and(|x| !x.is_empty())
        });
        assert!(alarmed, "{} has no Errors alarm", f.logical_id);
    }
}

#[test]
fn the_alarm_topic_uses_a_key_cloudwatch_may_use() {
    let (t, r) = resolved();
    for (id, topic) in t.resources_of_type("AWS::SNS::Topic") {
        let key = &topic["Properties"]["KmsMasterKeyId"];
        let key_id = key["Ref"].as_str().unwrap_or_else(|| {
            panic!("{id} is encrypted with {key}, not a key of this stack: CloudWatch cannot use AWS-managed keys")
        });
        let policy = &r.resources[key_id]["Properties"]["KeyPolicy"]["Statement"];
        let allowed = policy.as_array().unwrap().iter().any(|s| {
            s["Effect"] == "Allow"
                && s["Principal"]["Service"] == "cloudwatch.amazonaws.com"
                && s["Action"].to_string().contains("kms:Decrypt")
                && s["Action"].to_string().contains("kms:GenerateDataKey")
        });
        assert!(allowed, "{key_id}'s policy does not let CloudWatch encrypt");
    }
}

#[test]
fn every_queue_event_source_is_capped_below_its_reserved_concurrency() {
    let (_, r) = resolved();
    for f in r.functions() {
        for (name, event) in f.properties()["Events"].as_object().unwrap() {
            if event["Type"] != "SQS" {
                continue;
            }
            let cap = &event["Properties"]["ScalingConfig"]["MaximumConcurrency"];
            assert!(
                !cap.is_null(),
                "{}.{name}: no ScalingConfig.MaximumConcurrency (throttles count as receives)",
                f.logical_id
            );
            let reserved = number(&f.properties()["ReservedConcurrentExecutions"]);
            assert!(
                (2..=reserved).contains(&number(cap)),
                "{}.{name}: MaximumConcurrency {cap} must be 2..={reserved}",
                f.logical_id
            );
        }
    }
}

#[test]
fn a_queue_outlasts_the_longest_timeout_its_function_may_be_given() {
    let (t, r) = resolved();
    for f in r.functions() {
        // The raw template names the timeout's parameter; its MaxValue bounds every deployment.
        let raw = &t.doc["Resources"][f.logical_id]["Properties"]["Timeout"];
        let longest = match raw["Ref"].as_str() {
            Some(param) => number(&t.doc["Parameters"][param]["MaxValue"]),
            None => number(raw),
        };
        for (name, event) in f.properties()["Events"].as_object().unwrap() {
            if event["Type"] != "SQS" {
                continue;
            }
            let queue_arn = event["Properties"]["Queue"].as_str().unwrap();
            let (_, queue) = of_type(&r, "AWS::SQS::Queue")
                .find(|(id, _)| queue_arn.ends_with(&format!(":rules-{id}")))
                .unwrap();
            let visibility = number(&queue["Properties"]["VisibilityTimeout"]);
            assert!(
                visibility >= longest,
                "{}.{name}: queue visibility {visibility}s < the function's longest timeout {longest}s",
                f.logical_id
            );
        }
    }
}

#[test]
fn the_batch_rule_keeps_what_it_cannot_deliver_and_says_so() {
    let (_, r) = resolved();
    for (id, rule) in of_type(&r, "AWS::Events::Rule") {
        let p = &rule["Properties"];
        if p["EventPattern"].is_null() {
            continue; // schedules
        }
        for target in p["Targets"].as_array().unwrap() {
            assert!(
                !target["DeadLetterConfig"]["Arn"].is_null(),
                "{id}: target without a DLQ"
            );
            assert!(
                !target["RetryPolicy"].is_null(),
                "{id}: target without a retry policy"
            );
        }
        // The alarm names the rule by its Ref, or, for a rule on a custom bus (whose Ref is
        // "bus|rule"), by the Name the rule is given.
        let names = [
            format!("rules-{id}"),
            p["Name"].as_str().unwrap_or("").to_owned(),
        ];
        let alarmed = of_type(&r, "AWS::CloudWatch::Alarm").any(|(_, a)| {
            a["Properties"]["MetricName"] == "FailedInvocations"
                && a["Properties"]["Dimensions"][0]["Value"]
                    .as_str()
                    .is_some_and(|v| !v.is_empty() && names.iter().any(|n| n == v))
        });
        assert!(alarmed, "{id}: no FailedInvocations alarm");
    }
}

#[test]
fn every_queue_refuses_plain_http() {
    let (_, r) = resolved();
    for (id, _) in of_type(&r, "AWS::SQS::Queue") {
        let url_suffix = format!("/rules-{id}");
        let covered = of_type(&r, "AWS::SQS::QueuePolicy").any(|(_, p)| {
            let p = &p["Properties"];
            p["Queues"]
                .as_array()
                .unwrap()
                .iter()
                .any(|q| q.as_str().is_some_and(|u| u.ends_with(&url_suffix)))
                && p["PolicyDocument"]["Statement"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|s| {
                        s["Effect"] == "Deny"
                            && s["Condition"]["Bool"]["aws:SecureTransport"] == "false"
                    })
        });
        assert!(covered, "{id} has no TLS-only policy");
    }
}

#[test]
fn every_function_log_group_has_a_retention() {
    let (_, r) = resolved();
    for f in r.functions() {
        let name = format!("/aws/lambda/{}", physical(f.logical_id));
        let kept = of_type(&r, "AWS::Logs::LogGroup").any(|(_, g)| {
            g["Properties"]["LogGroupName"] == name.as_str()
                && !g["Properties"]["RetentionInDays"].is_null()
        });
        assert!(kept, "{}: no log group with a retention", f.logical_id);
    }
}

/// The data bucket's lifecycle rules, as resolved.
fn data_bucket_rules(r: &Resolved) -> &Vec<Value> {
    r.resources["DataBucket"]["Properties"]["LifecycleConfiguration"]["Rules"]
        .as_array()
        .unwrap()
}

/// A rule that applies to every key of the bucket: enabled, with no prefix, tag or size filter.
fn whole_bucket(rule: &Value) -> bool {
    rule["Status"] == "Enabled"
        && [
            "Prefix",
            "TagFilters",
            "ObjectSizeGreaterThan",
            "ObjectSizeLessThan",
        ]
        .iter()
        .all(|filter| rule[*filter].is_null() || rule[*filter] == "")
}

/// Parts of a multipart upload nobody completes or aborts are billed until removed, wherever
/// they are: the importer's raw/, ingest's files under ingest/, the archive's members under
/// archive/. One rule aborts them after a day all over the bucket (S3 User Guide, "Configuring a
/// bucket lifecycle configuration to delete incomplete multipart uploads": a rule without a
/// prefix applies to every upload in the bucket).
#[test]
fn incomplete_uploads_are_cleaned_up_across_the_whole_bucket() {
    let (_, r) = resolved();
    let days: Vec<u64> = data_bucket_rules(&r)
        .iter()
        .filter(|rule| whole_bucket(rule))
        .filter_map(|rule| {
            let days = &rule["AbortIncompleteMultipartUpload"]["DaysAfterInitiation"];
            (!days.is_null()).then(|| number(days))
        })
        .collect();
    assert_eq!(
        days,
        [1],
        "one whole-bucket AbortIncompleteMultipartUpload rule, after a day"
    );
}

/// The data bucket is versioned, and granary deletes index markers by the thousand under the
/// prefixes it LISTs. Old versions expire (a week after they stop being current), and so does
/// the delete marker a deleted key is left with once its last old version has gone: S3 keeps
/// such an "expired object delete marker" until a rule says `ExpiredObjectDeleteMarker`, which
/// cannot share a rule with an expiration in days or on a date (S3 API Reference,
/// "LifecycleExpiration"). Both cover the whole bucket.
#[test]
fn old_versions_and_their_lone_delete_markers_expire_across_the_whole_bucket() {
    let (_, r) = resolved();
    let versioning = &r.resources["DataBucket"]["Properties"]["VersioningConfiguration"];
    assert_eq!(
        versioning["Status"], "Enabled",
        "the rule is for a versioned bucket"
    );
    let rules = data_bucket_rules(&r);
    let noncurrent: Vec<u64> = rules
        .iter()
        .filter(|rule| whole_bucket(rule))
        .filter_map(|rule| {
            let days = &rule["NoncurrentVersionExpiration"]["NoncurrentDays"];
            (!days.is_null()).then(|| number(days))
        })
        .collect();
    assert_eq!(
        noncurrent,
        [7],
        "old versions kept a week, all over the bucket"
    );
    let markers: Vec<&Value> = rules
        .iter()
        .filter(|rule| rule["ExpiredObjectDeleteMarker"] == true)
        .collect();
    assert!(
        markers.iter().any(|rule| whole_bucket(rule)),
        "no whole-bucket rule removes expired object delete markers"
    );
    for rule in markers {
        for refused in ["ExpirationInDays", "ExpirationDate", "TagFilters"] {
            assert!(
                rule[refused].is_null(),
                "{}: ExpiredObjectDeleteMarker cannot share a rule with {refused}",
                rule["Id"]
            );
        }
    }
}

#[test]
fn grants_name_exact_resources() {
    let (_, r) = resolved();
    for f in r.functions() {
        for s in f.statements().unwrap() {
            for a in &s.actions {
                for res in &s.resources {
                    if a == "batch:SubmitJob" {
                        assert!(!res.contains('*'), "{}: SubmitJob on {res}", f.logical_id);
                    }
                    if a == "s3:ListBucket" {
                        // ListBucket applies to a bucket; on an object ARN it grants nothing.
                        let path = res.split(":::").nth(1).unwrap_or("");
                        assert!(
                            !path.contains('/'),
                            "{}: s3:ListBucket on {res}",
                            f.logical_id
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn every_event_bus_has_a_publisher() {
    let (_, r) = resolved();
    for (id, _) in of_type(&r, "AWS::Events::EventBus") {
        let published = r.functions().any(|f| {
            f.statements()
                .unwrap()
                .iter()
                .any(|s| s.actions.iter().any(|a| a == "events:PutEvents"))
        });
        assert!(published, "{id}: nothing may publish to it");
    }
}

/// The seed's job logs table exists in a deployed stack: the view the template stores in Glue is
/// the SQL in athena/views/granary_job_logs.sql (which the Athena SQL tests run on DuckDB), with
/// the seed's seven columns.
#[test]
fn the_job_logs_view_is_the_athena_sql_with_the_seven_columns() {
    use base64::Engine;
    let (_, r) = resolved();
    let input = &r.resources["JobLogsView"]["Properties"]["TableInput"];
    assert_eq!(input["TableType"], "VIRTUAL_VIEW");
    let text = input["ViewOriginalText"].as_str().unwrap();
    let encoded = text
        .strip_prefix("/* Presto View: ")
        .and_then(|t| t.strip_suffix(" */"))
        .unwrap();
    let view: Value = serde_json::from_slice(
        &base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .unwrap(),
    )
    .unwrap();
    let file = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../athena/views/granary_job_logs.sql"),
    )
    .unwrap();
    let select = file
        .lines()
        .filter(|l| !l.starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n");
    let select = select
        .split_once(" AS\n")
        .unwrap()
        .1
        .trim()
        .trim_end_matches(';');
    assert_eq!(
        view["originalSql"], select,
        "the template's view is not athena/'s"
    );
    assert_eq!(
        view["schema"],
        r.resources["AnalyticsDatabase"]["Properties"]["DatabaseInput"]["Name"]
    );
    let names = |cols: &Value, key: &str| -> Vec<String> {
        cols.as_array()
            .unwrap()
            .iter()
            .map(|c| c[key].as_str().unwrap().to_owned())
            .collect()
    };
    let seed = [
        "outcome",
        "platform",
        "acquisition_date",
        "granule_id",
        "attempt",
        "last_modified_date",
        "key",
    ];
    assert_eq!(names(&view["columns"], "name"), seed);
    assert_eq!(names(&input["StorageDescriptor"]["Columns"], "Name"), seed);
}

/// The events queue takes job ends from the Batch rule and from the named redrive roles only: a
/// role whose IAM policy allows sqs:SendMessage on it (an administrator, another function) is
/// denied by the queue, so it cannot forge a SUCCEEDED. Decided by `policy::decide`, IAM's
/// evaluation order and condition semantics.
#[test]
fn only_the_batch_rule_and_the_named_redrivers_may_send_to_the_events_queue() {
    use granary_template::policy::{decide, Caller, Decision, Request};
    let rule = "arn:aws:events:us-east-1:123456789012:rule/rules-BatchStateRule";
    let queue = "arn:aws:sqs:us-east-1:123456789012:rules-BatchEventsQueue";
    let ops = "arn:aws:iam::123456789012:role/ops-night";
    let admin = "arn:aws:iam::123456789012:role/Admin";
    let other_rule = "arn:aws:events:us-east-1:123456789012:rule/someone-elses";
    for redrivers in [None, Some("arn:aws:iam::123456789012:role/ops-*")] {
        let template = Template::granary().unwrap();
        let mut stack = Stack::new("rules")
            .with("SubnetIds", "subnet-1")
            .with("SecurityGroupIds", "sg-1")
            .with("ContainerImage", "image");
        if let Some(r) = redrivers {
            stack = stack.with("EventsRedriveRoleArns", r);
        }
        let r = template.resolve(&stack).unwrap();
        let policy =
            &r.resources["BatchEventsQueuePolicy"]["Properties"]["PolicyDocument"]["Statement"];
        let send = |c: Caller| Request::new(c, "sqs:SendMessage", queue);
        let events = || Caller::Service("events.amazonaws.com".into());
        let d = |req: Request| decide(policy, &req).unwrap();
        assert_eq!(
            d(send(events()).with("aws:SourceArn", rule)),
            Decision::Allowed
        );
        assert_eq!(
            d(send(events()).with("aws:SourceArn", other_rule)),
            Decision::Denied
        );
        assert_eq!(d(send(Caller::Iam(admin.into()))), Decision::Denied);
        let operator = d(send(Caller::Iam(ops.into())));
        match redrivers {
            // Not denied: the operator's own IAM policy decides.
            Some(_) => assert_eq!(operator, Decision::Silent),
            None => assert_eq!(operator, Decision::Denied),
        }
        // Plain HTTP is refused to everyone, the rule included.
        assert_eq!(
            d(send(events())
                .with("aws:SourceArn", rule)
                .with("aws:SecureTransport", "false")),
            Decision::Denied
        );
    }
}

/// What waits in the events DLQ goes back to the monitor (`granary redrive-events`), so only the
/// Batch rule's dead letters may be sent there: every IAM principal — an administrator, the
/// account's root, a function's role, a named redrive role — is denied sqs:SendMessage, whatever
/// its IAM policy says, and another rule finds no Allow (a service principal has no IAM policy of
/// its own). The events SQS itself moves there after the monitor failed on them are no
/// SendMessage (SQS Developer Guide, "Using dead-letter queues in Amazon SQS"), and the Deny could
/// not match such a move even if it were decided as a request: it needs `aws:PrincipalIsAWSService`
/// false, which only a signed request of an IAM principal carries.
#[test]
fn only_the_batch_rule_may_send_to_the_events_dlq() {
    use granary_template::policy::{decide, Caller, Decision, Request};
    let rule = "arn:aws:events:us-east-1:123456789012:rule/rules-BatchStateRule";
    let other_rule = "arn:aws:events:us-east-1:123456789012:rule/someone-elses";
    let dlq = "arn:aws:sqs:us-east-1:123456789012:rules-BatchEventsDlq";
    let events_queue = "arn:aws:sqs:us-east-1:123456789012:rules-BatchEventsQueue";
    for redrivers in [None, Some("arn:aws:iam::123456789012:role/ops-*")] {
        let template = Template::granary().unwrap();
        let mut stack = Stack::new("rules")
            .with("SubnetIds", "subnet-1")
            .with("SecurityGroupIds", "sg-1")
            .with("ContainerImage", "image");
        if let Some(r) = redrivers {
            stack = stack.with("EventsRedriveRoleArns", r);
        }
        let r = template.resolve(&stack).unwrap();
        let policy =
            &r.resources["BatchEventsDlqPolicy"]["Properties"]["PolicyDocument"]["Statement"];
        let d = |req: Request| decide(policy, &req).unwrap();
        let send = |c: Caller| Request::new(c, "sqs:SendMessage", dlq);
        let events = || Caller::Service("events.amazonaws.com".into());
        assert_eq!(
            d(send(events()).with("aws:SourceArn", rule)),
            Decision::Allowed
        );
        assert_eq!(
            d(send(events()).with("aws:SourceArn", other_rule)),
            Decision::Silent,
            "another rule: no Allow lets a service principal in"
        );
        for who in [
            "arn:aws:iam::123456789012:role/Admin",
            "arn:aws:iam::123456789012:root",
            "arn:aws:iam::123456789012:role/rules-JobMonitorFunctionRole",
            "arn:aws:iam::123456789012:role/ops-night",
        ] {
            assert_eq!(d(send(Caller::Iam(who.into()))), Decision::Denied, "{who}");
        }
        // SQS's own move from the events queue, were it decided as a service's call, or as a
        // request carrying no keys at all: nothing denies it.
        let sqs = || Caller::Service("sqs.amazonaws.com".into());
        assert_ne!(
            d(send(sqs()).with("aws:SourceArn", events_queue)),
            Decision::Denied
        );
        let mut bare = send(sqs());
        bare.context.clear();
        assert_ne!(d(bare), Decision::Denied);
        // Plain HTTP is refused to everyone, the rule included.
        assert_eq!(
            d(send(events())
                .with("aws:SourceArn", rule)
                .with("aws:SecureTransport", "false")),
            Decision::Denied
        );
    }
}

/// Only the archive task role decrypts the signing seed, and only through SSM for the seed's
/// parameter; an administrator of the account (or any other role, whatever its IAM policies say)
/// cannot, since a KMS key policy that does not allow a principal denies it. The account may
/// still encrypt with the key, which is how an operator puts the seed.
#[test]
fn only_the_archive_tasks_may_decrypt_the_signing_seed() {
    use granary_template::policy::{decide, Caller, Decision, Request};
    let (_, r) = resolved();
    let policy = &r.resources["ArchiveSigningKey"]["Properties"]["KeyPolicy"]["Statement"];
    let key = "arn:aws:kms:us-east-1:123456789012:key/rules-ArchiveSigningKey-key-id";
    let tasks = "arn:aws:iam::123456789012:role/rules-ArchiveTaskFunctionRole";
    let parameter = "arn:aws:ssm:us-east-1:123456789012:parameter/granary/archive-signing-key";
    let decrypt = |who: &str| {
        Request::new(Caller::Iam(who.into()), "kms:Decrypt", key)
            .with("kms:ViaService", "ssm.us-east-1.amazonaws.com")
            .with("kms:EncryptionContext:PARAMETER_ARN", parameter)
    };
    let d = |req: Request| decide(policy, &req).unwrap();
    assert_eq!(d(decrypt(tasks)), Decision::Allowed);
    assert_eq!(
        d(decrypt(tasks).with(
            "kms:EncryptionContext:PARAMETER_ARN",
            "arn:aws:ssm:us-east-1:123456789012:parameter/other"
        )),
        Decision::Silent,
        "another parameter under the same key"
    );
    let mut direct = decrypt(tasks);
    direct.context.remove("kms:ViaService");
    assert_eq!(
        d(direct),
        Decision::Silent,
        "KMS called directly, not via SSM"
    );
    for other in [
        "arn:aws:iam::123456789012:role/Admin",
        "arn:aws:iam::123456789012:role/rules-JobMonitorFunctionRole",
    ] {
        assert_eq!(d(decrypt(other)), Decision::Silent, "{other}");
    }
    let encrypt = Request::new(
        Caller::Iam("arn:aws:iam::123456789012:role/Admin".into()),
        "kms:Encrypt",
        key,
    );
    assert_eq!(d(encrypt), Decision::Allowed);
    // A grant would hand Decrypt to whoever made it: the account may not make one.
    let grant = Request::new(
        Caller::Iam("arn:aws:iam::123456789012:role/Admin".into()),
        "kms:CreateGrant",
        key,
    );
    assert_eq!(d(grant), Decision::Silent);
    // The role the policy names is the one SAM makes for the archive task function.
    assert_eq!(
        r.resources["ArchiveSigningKey"]["Properties"]["KeyPolicy"]["Statement"][1]["Principal"]
            ["AWS"],
        tasks
    );
}

/// Design 003's cluster: Spot capacity of the compute-optimized families (C: 2 GiB a vCPU, which
/// is what a job asks for, and away from the general-purpose M types other product compute
/// competes for), chosen by the Spot allocation strategy that prefers the pools least likely to
/// be interrupted — `SPOT_CAPACITY_OPTIMIZED`, which AWS offers only for Spot compute resources
/// (Batch user guide, "Instance type allocation strategies"); one queue over that environment
/// alone; and the job definition's RetryStrategy retrying a reclaimed host (`Host EC2*`).
#[test]
fn the_compute_environment_is_spot_on_compute_optimized_families_capacity_first() {
    let (_, r) = resolved();
    let envs: Vec<_> = of_type(&r, "AWS::Batch::ComputeEnvironment").collect();
    assert_eq!(envs.len(), 1, "one compute environment");
    let (env_id, env) = envs[0];
    let p = &env["Properties"];
    assert_eq!(p["Type"], "MANAGED");
    let c = &p["ComputeResources"];
    assert_eq!(c["Type"], "SPOT");
    assert_eq!(c["AllocationStrategy"], "SPOT_CAPACITY_OPTIMIZED");
    assert_eq!(number(&c["MinvCpus"]), 0, "scales to nothing when idle");
    let types: Vec<&str> = c["InstanceTypes"]
        .as_array()
        .unwrap_or_else(|| panic!("InstanceTypes is no list: {}", c["InstanceTypes"]))
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert!(!types.is_empty());
    for t in &types {
        let family = t.split('.').next().unwrap_or(t);
        assert!(
            family.starts_with('c') && family[1..].starts_with(|ch: char| ch.is_ascii_digit()),
            "{t} is not a compute-optimized (C) family"
        );
    }
    // The job definition asks for C's ratio: 2 GiB a vCPU.
    let (_, def) = of_type(&r, "AWS::Batch::JobDefinition").next().unwrap();
    let wants = |kind: &str| {
        def["Properties"]["ContainerProperties"]["ResourceRequirements"]
            .as_array()
            .unwrap()
            .iter()
            .find(|q| q["Type"] == kind)
            .map(|q| number(&q["Value"]))
            .unwrap()
    };
    assert_eq!(wants("MEMORY"), 2048 * wants("VCPU"));
    let retries = def["Properties"]["RetryStrategy"]["EvaluateOnExit"]
        .as_array()
        .unwrap();
    assert!(retries
        .iter()
        .any(|e| e["OnStatusReason"] == "Host EC2*" && e["Action"] == "RETRY"));
    // Every queue runs on that environment and nothing else.
    for (id, q) in of_type(&r, "AWS::Batch::JobQueue") {
        let order = q["Properties"]["ComputeEnvironmentOrder"]
            .as_array()
            .unwrap();
        assert_eq!(order.len(), 1, "{id}");
        let named = &order[0]["ComputeEnvironment"];
        assert!(
            named.as_str().is_some_and(|s| s.contains(env_id.as_str())) || named == env_id.as_str(),
            "{id} runs on {named}"
        );
    }
}

/// Design 003's feeder: one run at a time (the tracker's If-Match is the guard; one run is the
/// plan), fired by its schedule with the count it feeds; the logs' daily S3 Inventory (Parquet,
/// with the size and date the job logs table reads) that the job-logs view is built on; and the
/// job definition's other Batch retry, an image that could not be pulled, before the rule that
/// hands every other failure back to granary.
#[test]
fn the_feeder_runs_alone_on_its_schedule_and_the_logs_are_inventoried_daily() {
    let (t, r) = resolved();
    let feeder = r.function("QueueFeederFunction").unwrap();
    assert_eq!(number(feeder.property("ReservedConcurrentExecutions")), 1);
    let schedule = &feeder.property("Events")["Schedule"];
    assert_eq!(schedule["Type"], "Schedule");
    let input: Value =
        serde_json::from_str(schedule["Properties"]["Input"].as_str().unwrap()).unwrap();
    let default_count = &t.doc["Parameters"]["GranuleSubmitCount"]["Default"];
    assert_eq!(
        input["granule_submit_count"].as_u64(),
        Some(number(default_count))
    );
    assert!(schedule["Properties"]["Schedule"]
        .as_str()
        .is_some_and(|s| s.starts_with("rate(")));

    let (_, bucket) = of_type(&r, "AWS::S3::Bucket")
        .find(|(id, _)| id.as_str() == "DataBucket")
        .unwrap();
    let inventories = bucket["Properties"]["InventoryConfigurations"]
        .as_array()
        .unwrap();
    let logs = inventories
        .iter()
        .find(|i| i["Prefix"] == "logs/")
        .expect("an inventory of logs/");
    assert_eq!(logs["Enabled"], true);
    assert_eq!(logs["ScheduleFrequency"], "Daily");
    assert_eq!(logs["Destination"]["Format"], "Parquet");
    for field in ["Size", "LastModifiedDate"] {
        assert!(
            logs["OptionalFields"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f == field),
            "{field}"
        );
    }

    let (_, def) = of_type(&r, "AWS::Batch::JobDefinition").next().unwrap();
    let rules = def["Properties"]["RetryStrategy"]["EvaluateOnExit"]
        .as_array()
        .unwrap();
    let pull = rules
        .iter()
        .position(|e| e["OnReason"] == "CannotPullContainerError*" && e["Action"] == "RETRY")
        .expect("an image pull failure is retried by Batch");
    let rest = rules
        .iter()
        .position(|e| e["OnReason"] == "*" && e["Action"] == "EXIT")
        .expect("everything else exits to granary");
    assert!(pull < rest, "Batch takes the first rule that matches");
    // The array child's wrapper exits 66 when S3 would not give it its window claim.
    let claim_unread = rules
        .iter()
        .position(|e| e["OnExitCode"] == "66" && e["Action"] == "RETRY")
        .expect("an array child that could not read its claim is retried by Batch");
    assert!(claim_unread < rest, "before the rule that exits");
    let wrapper = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../container/array_child.py"),
    )
    .unwrap();
    assert!(
        wrapper.contains("CLAIM_UNREADABLE = 66"),
        "the wrapper's code is the rule's"
    );
}

/// One SubmitJob budget for the account: Batch takes 50 calls a second per account and Region
/// and AWS does not raise it (AWS Batch user guide, "AWS Batch service quotas"). Every function
/// that submits is paced to its share (`GRANARY_SUBMIT_JOB_RATE`, fixed by the template), and
/// the shares — the feeder's, each concurrent requeuer's, the ingest dispatcher's, the
/// sweeper's (its reconciler finishes windows of a campaign the stack no longer feeds) —
/// add up to at most 40, leaving a fifth of the account's rate to everyone else.
#[test]
fn the_submitters_shares_of_the_submit_job_budget_leave_room_in_the_account() {
    let (t, r) = resolved();
    let rate = |f: &str| -> f64 {
        let env = r.function(f).unwrap().environment().unwrap();
        env.get("GRANARY_SUBMIT_JOB_RATE")
            .unwrap_or_else(|| panic!("{f} submits unpaced"))
            .parse()
            .unwrap()
    };
    let concurrency = number(&t.doc["Parameters"]["FunctionConcurrency"]["Default"]) as f64;
    let total = rate("QueueFeederFunction")
        + rate("RequeuerFunction") * concurrency
        + rate("IngestDispatcherFunction")
        + rate("ItemSweeperFunction");
    assert!(
        total <= 40.0,
        "the submitters take {total} calls a second of 50"
    );
    assert!(total >= 20.0, "{total}: a campaign should not crawl either");
    for f in [
        "QueueFeederFunction",
        "RequeuerFunction",
        "IngestDispatcherFunction",
        "ItemSweeperFunction",
    ] {
        assert!(rate(f) <= 50.0, "{f} may exceed what Batch takes");
    }
}

/// The feeder is asked for no more granules a run than a run can submit (the parameter's
/// MaxValue), and that bound cuts no mode short. Batch's quotas (AWS Batch User Guide, "AWS Batch
/// service quotas"): 50 SubmitJob calls a second per account, arrays of at most 10,000 children,
/// at most 1,000,000 jobs in SUBMITTED state. A single-job run makes one call a granule, so it
/// submits at most 50 a second for its whole timeout, and the bound must allow that; an
/// array-window run makes one call a window, and its bound is at most what Batch holds
/// submitted, in windows the feeder's own rate starts in a fraction of its window time.
#[test]
fn the_feeder_is_asked_for_no_more_than_a_run_can_submit() {
    let (t, r) = resolved();
    let p = &t.doc["Parameters"]["GranuleSubmitCount"];
    assert!(
        !p["MaxValue"].is_null(),
        "GranuleSubmitCount has no MaxValue"
    );
    let (min, default, max) = (
        number(&p["MinValue"]),
        number(&p["Default"]),
        number(&p["MaxValue"]),
    );
    assert!(
        min <= default && default <= max,
        "{min} <= {default} <= {max}"
    );
    const SUBMIT_JOB_PER_SEC: u64 = 50;
    const LARGEST_ARRAY: u64 = 10_000;
    const SUBMITTED_JOBS: u64 = 1_000_000;
    let feeder = r.function("QueueFeederFunction").unwrap();
    let timeout = number(feeder.property("Timeout"));
    assert!(
        max >= SUBMIT_JOB_PER_SEC * timeout,
        "{max} is below what a single-job run can submit in {timeout} s"
    );
    assert!(
        max <= SUBMITTED_JOBS,
        "{max} is more than Batch holds submitted"
    );
    // The windows of the largest count: calls at the feeder's own rate within the 120 s (half of
    // four fifths of its timeout, `Budget`) in which it starts windows.
    let rate: u64 = feeder.environment().unwrap()["GRANARY_SUBMIT_JOB_RATE"]
        .parse()
        .unwrap();
    let windows = max.div_ceil(LARGEST_ARRAY);
    assert!(
        windows <= rate * (timeout * 4 / 5 / 2),
        "{windows} windows take more than the run's window time at {rate} calls/s"
    );
}

/// Every schedule's rate expression is one EventBridge accepts: the unit singular for a value of
/// 1 and plural otherwise ("Rate expressions reference", Amazon EventBridge User Guide:
/// `rate(1 minutes)` is refused). A rate built from a parameter is checked at its default and
/// at its least allowed value.
#[test]
fn every_schedule_is_a_rate_eventbridge_accepts() {
    let t = Template::granary().unwrap();
    let mut expressions = Vec::new();
    for (id, f) in t.resources_of_type("AWS::Serverless::Function") {
        let Some(events) = f["Properties"]["Events"].as_object() else {
            continue;
        };
        for (name, event) in events {
            if event["Type"] != "Schedule" {
                continue;
            }
            let schedule = &event["Properties"]["Schedule"];
            let text = schedule
                .as_str()
                .or_else(|| schedule["Fn::Sub"].as_str())
                .unwrap_or_else(|| panic!("{id}.{name}: a schedule expression or Fn::Sub"));
            let mut values = vec![text.to_owned()];
            // A `${Parameter}` in the expression: its default and its least allowed value.
            if let Some((_, rest)) = text.split_once("${") {
                let name = rest.split('}').next().unwrap_or_default();
                let p = &t.doc["Parameters"][name];
                values = [&p["Default"], &p["MinValue"]]
                    .iter()
                    .filter(|v| !v.is_null())
                    .map(|v| {
                        let v = v.as_str().map_or_else(|| v.to_string(), str::to_owned);
                        text.replace(&format!("${{{name}}}"), &v)
                    })
                    .collect();
            }
            expressions.extend(values.into_iter().map(|e| (format!("{id}.{name}"), e)));
        }
    }
    assert!(expressions.len() >= 5, "{expressions:?}");
    let units = ["minute", "minutes", "hour", "hours", "day", "days"];
    for (at, e) in expressions {
        let inner = e.strip_prefix("rate(").and_then(|r| r.strip_suffix(')'));
        let (value, unit) = inner
            .and_then(|r| r.split_once(' '))
            .filter(|(v, u)| v.parse::<u32>().is_ok_and(|v| v > 0) && units.contains(u))
            .unwrap_or_else(|| panic!("{at}: {e} is not rate(value unit)"));
        assert_eq!(value == "1", !unit.ends_with('s'), "{at}: {e}");
    }
}
