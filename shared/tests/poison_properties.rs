//! Property tests: whatever arrives — a Batch event with any field changed or removed, any SQS
//! body — the handlers answer with an outcome or a clear error, never a panic, and a permanent
//! error is recorded and dead-lettered rather than left to redelivery.
#![allow(clippy::too_many_lines)] // test code: a scenario reads top to bottom

use granary::config::Config;
use granary::domain::job_end::on_job_event;
use granary::handlers::{monitor, requeuer, Ctx};
use proptest::prelude::*;
use serde_json::{json, Value};

fn ctx() -> Ctx {
    let env = [
        ("GRANARY_BUCKET", "b"),
        ("GRANARY_JOB_QUEUE", "q"),
        ("GRANARY_JOB_DEFINITION", "d"),
        ("GRANARY_RETRY_QUEUE_URL", "retry"),
        ("GRANARY_FAILURE_DLQ_URL", "dlq"),
    ];
    Ctx::in_memory(Config::from_pairs(&env).expect("test config"))
}

fn base_event() -> Value {
    json!({
        "version": "0", "id": "e", "detail-type": "Batch Job State Change", "source": "aws.batch",
        "account": "123456789012", "time": "2025-01-01T00:00:00Z", "region": "us-east-1",
        "resources": ["arn:job"],
        "detail": {
            "jobArn": "arn:job", "jobName": "n", "jobId": "j", "jobQueue": "arn:q",
            "status": "FAILED", "statusReason": "Host EC2 (instance i-0abc) terminated.",
            "attempts": [{"container": {"exitCode": 1, "reason": "r"}, "statusReason": "s",
                          "exitCode": 1, "taskProperties": [{"containers": [{"exitCode": 2}]}]}],
            "retryStrategy": {"attempts": 2, "evaluateOnExit": [{"onStatusReason": "Host EC2*", "action": "RETRY"}]},
            "parameters": {"granule_id": "HLS.S30.T01GBH.2022226T214921.v2.0", "attempt": "1"},
            "container": {"environment": [{"name": "GRANULE_ID", "value": "HLS.S30.T01GBH.2022226T214921.v2.0"},
                                          {"name": "ATTEMPT", "value": "1"}], "exitCode": 1}
        }
    })
}

/// Every path to a value inside `v` (object keys and array indexes).
fn paths(v: &Value, here: Vec<String>, out: &mut Vec<Vec<String>>) {
    match v {
        Value::Object(m) => {
            for (k, c) in m {
                let mut p = here.clone();
                p.push(k.clone());
                out.push(p.clone());
                paths(c, p, out);
            }
        }
        Value::Array(a) => {
            for (i, c) in a.iter().enumerate() {
                let mut p = here.clone();
                p.push(i.to_string());
                out.push(p.clone());
                paths(c, p, out);
            }
        }
        _ => {}
    }
}

fn replace(v: &mut Value, path: &[String], with: Option<Value>) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = v;
    for p in parents {
        cur = match cur {
            Value::Object(m) => match m.get_mut(p) {
                Some(c) => c,
                None => return,
            },
            Value::Array(a) => match p.parse::<usize>().ok().and_then(|i| a.get_mut(i)) {
                Some(c) => c,
                None => return,
            },
            _ => return,
        };
    }
    match (cur, with) {
        (Value::Object(m), None) => {
            m.remove(last);
        }
        (Value::Object(m), Some(w)) => {
            m.insert(last.clone(), w);
        }
        (Value::Array(a), Some(w)) => {
            if let Some(slot) = last.parse::<usize>().ok().and_then(|i| a.get_mut(i)) {
                *slot = w;
            }
        }
        _ => {}
    }
}

fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        ".{0,40}".prop_map(Value::from),
        Just(Value::from("x".repeat(300_000))),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map(".{0,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn a_mutated_event_is_decided_or_rejected_never_a_panic(
        picks in prop::collection::vec((any::<prop::sample::Index>(), prop::option::of(any_json())), 1..4)
    ) {
        let mut event = base_event();
        for (pick, with) in picks {
            let mut all = Vec::new();
            paths(&event, Vec::new(), &mut all);
            if all.is_empty() { break; }
            let path = all[pick.index(all.len())].clone();
            replace(&mut event, &path, with);
        }
        let _ = on_job_event(&event);
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let ctx = ctx();
        // Permanent errors are outcomes (recorded and dead-lettered); only the store or a queue
        // failing could make this an error, and the in-memory ones do not fail.
        let out = rt.block_on(monitor::handle_message(&ctx, &event.to_string()));
        prop_assert!(out.is_ok(), "{:?}", out);
    }

    #[test]
    fn any_sqs_body_is_handled_or_rejected_never_a_panic(body in prop_oneof![
        ".{0,200}",
        any_json().prop_map(|v| v.to_string()),
    ]) {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let ctx = ctx();
        let m = rt.block_on(monitor::handle_message(&ctx, &body));
        prop_assert!(m.is_ok(), "monitor: {:?}", m);
        let r = rt.block_on(requeuer::handle_message(&ctx, &body));
        prop_assert!(r.is_ok(), "requeuer: {:?}", r);
    }
}
