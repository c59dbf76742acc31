//! `granary archive …` as an operator runs it, against the emulator: a signing key kept in SSM,
//! a prefix of products archived to two destinations (one DEEP_ARCHIVE), the dispatcher's tick
//! and the task handler run by `tick --run-tasks`, then `verify` on the stored copy alone — intact,
//! a flipped byte, a forged signature, a pinned key.

use granary::adapters::aws::AwsClients;
mod common;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_archives_a_prefix_to_two_destinations_and_verifies_a_copy() {
    assert!(
        std::env::var_os("AWS_ENDPOINT_URL").is_some(),
        "needs an AWS endpoint: run `make test`, or set AWS_ENDPOINT_URL"
    );
    let clients = AwsClients::from_env().await;
    let tag = std::process::id();
    let [data, products, vault, mirror] =
        ["data", "products", "vault", "mirror"].map(|b| format!("gt-archive-{b}-{tag}"));
    for b in [&data, &products, &vault, &mirror] {
        clients.s3.create_bucket().bucket(b).send().await.unwrap();
    }
    for n in 0..12 {
        clients
            .s3
            .put_object()
            .bucket(&products)
            .key(format!("l2/2026/g{n:02}.nc"))
            .body(format!("granule {n} ").repeat(10 + n).into_bytes().into())
            .send()
            .await
            .unwrap();
    }
    let queue = clients
        .sqs
        .create_queue()
        .queue_name(format!("gt-archive-tasks-{tag}"))
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();

    // The operator makes a key and keeps its seed in SSM.
    let (code, out, err) = common::granary(&[], &["archive", "keygen"]);
    assert_eq!(code, 0, "{err}");
    let seed = out
        .split_whitespace()
        .skip_while(|w| *w != "--value")
        .nth(1)
        .unwrap()
        .to_owned();
    let public = out.lines().nth(1).unwrap().trim().to_owned();
    let parameter = format!("/granary-test/{tag}/archive-signing-key");
    clients
        .ssm
        .put_parameter()
        .name(&parameter)
        .value(&seed)
        .r#type(aws_sdk_ssm::types::ParameterType::SecureString)
        .send()
        .await
        .unwrap();

    let vars = [
        ("GRANARY_BUCKET", data.as_str()),
        ("GRANARY_ARCHIVE_TASK_QUEUE_URL", queue.as_str()),
        ("GRANARY_ARCHIVE_SIGNING_KEY_PARAMETER", parameter.as_str()),
        ("GRANARY_ARCHIVE_OBJECTS_PER_SHARD", "5"),
    ];
    let created = common::json(
        &vars,
        &[
            "archive",
            "create",
            "--prefix",
            &format!("s3://{products}/l2/2026/"),
            "--dest",
            &format!("s3://{vault}/archives/:DEEP_ARCHIVE"),
            "--dest",
            &format!("s3://{mirror}/copies/"),
        ],
    );
    let id = created["id"].as_str().unwrap().to_owned();
    common::json(&vars, &["archive", "tick", "--run-tasks"]);
    let status = common::json(&vars, &["archive", "status", &id]);
    assert_eq!(status[0]["state"], "completed", "{status}");
    assert_eq!(
        (status[0]["objects"].as_u64(), status[0]["shards"].as_u64()),
        (Some(12), Some(3))
    );

    // The vault's copy is in DEEP_ARCHIVE.
    let listed = clients
        .s3
        .list_objects_v2()
        .bucket(&vault)
        .prefix(format!("archives/{id}/members/"))
        .send()
        .await
        .unwrap();
    let first = listed
        .contents()
        .first()
        .and_then(|o| o.key())
        .unwrap()
        .to_owned();
    let head = clients
        .s3
        .head_object()
        .bucket(&vault)
        .key(&first)
        .send()
        .await
        .unwrap();
    assert_eq!(
        head.storage_class().map(|c| c.as_str()),
        Some("DEEP_ARCHIVE")
    );

    // The mirror's copy verifies on its own, and against the operator's key.
    let copy = format!("s3://{mirror}/copies/{id}/");
    let report = common::json(&[], &["archive", "verify", &copy]);
    assert_eq!(report["members_checked"], 12, "{report}");
    assert!(
        report["problems"].as_array().unwrap().is_empty(),
        "{report}"
    );
    assert_eq!(
        common::granary(&[], &["archive", "verify", &copy, "--public-key", &public]).0,
        0
    );

    // A flipped byte in a member: exit 1, the member named.
    let member = clients
        .s3
        .list_objects_v2()
        .bucket(&mirror)
        .prefix(format!("copies/{id}/members/"))
        .send()
        .await
        .unwrap()
        .contents()
        .first()
        .and_then(|o| o.key())
        .unwrap()
        .to_owned();
    let body = clients
        .s3
        .get_object()
        .bucket(&mirror)
        .key(&member)
        .send()
        .await
        .unwrap()
        .body
        .collect()
        .await
        .unwrap()
        .to_vec();
    let mut flipped = body.clone();
    flipped[3] ^= 0x20;
    let put = |key: String, bytes: Vec<u8>| {
        let s3 = clients.s3.clone();
        let bucket = mirror.clone();
        async move {
            s3.put_object()
                .bucket(bucket)
                .key(key)
                .body(bytes.into())
                .send()
                .await
                .unwrap();
        }
    };
    put(member.clone(), flipped).await;
    let (code, out, _) = common::granary(&[], &["archive", "verify", &copy]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains(&member) && out.contains("NOT INTACT"), "{out}");
    put(member.clone(), body).await;
    assert_eq!(
        common::granary(&[], &["archive", "verify", &copy]).0,
        0,
        "restored"
    );

    // A forged signature (another key's, over the same checksums): exit 1.
    let forger = granary::domain::archive::manifest::signing_key(&"5a".repeat(32)).unwrap();
    let sums = clients
        .s3
        .get_object()
        .bucket(&mirror)
        .key(format!("copies/{id}/SHA256SUMS"))
        .send()
        .await
        .unwrap()
        .body
        .collect()
        .await
        .unwrap()
        .to_vec();
    let (forged, _) = granary::domain::archive::manifest::sign(&forger, &sums);
    put(format!("copies/{id}/SHA256SUMS.sig"), forged.into_bytes()).await;
    let (code, out, _) = common::granary(&[], &["archive", "verify", &copy]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("signature BAD"), "{out}");
}
