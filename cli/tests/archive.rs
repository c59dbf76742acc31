//! `granary archive …` as an operator runs it, against the emulator: a signing key kept in SSM,
//! a prefix of products archived to two destinations (one DEEP_ARCHIVE), the dispatcher's tick
//! and the task handler run by `tick --run-tasks`, then `verify` on the stored copy alone — intact,
//! a flipped byte, a forged signature, a pinned key.
#![allow(clippy::too_many_lines)] // test code: a scenario reads top to bottom

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

    // The operator makes a key and keeps its seed in SSM; the seed is never printed.
    let parameter = format!("/granary-test/{tag}/archive-signing-key");
    let (code, out, err) = common::granary(
        &[],
        &[
            "archive",
            "keygen",
            "--put-parameter",
            &parameter,
            "--kms-key-id",
            "alias/aws/ssm",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let public = out.lines().last().unwrap().trim().to_owned();
    let seed = clients
        .ssm
        .get_parameter()
        .name(&parameter)
        .with_decryption(true)
        .send()
        .await
        .unwrap()
        .parameter
        .unwrap()
        .value
        .unwrap();
    assert!(!out.contains(&seed), "the seed is printed: {out}");
    // A second keygen keeps the first seed rather than replace it silently.
    let (code, _, err) = common::granary(
        &[],
        &[
            "archive",
            "keygen",
            "--put-parameter",
            &parameter,
            "--kms-key-id",
            "alias/aws/ssm",
        ],
    );
    assert_ne!(code, 0);
    assert!(err.contains(&parameter), "{err}");
    // The public key of the stored seed, read from stdin.
    let (code, derived, err) =
        common::granary_with_stdin(&[], &["archive", "public-key", "--seed-file", "-"], &seed);
    assert_eq!(code, 0, "{err}");
    assert_eq!(derived.trim(), public);

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

/// `keygen --seed-file` writes the seed to a new file only its owner can read, refuses to
/// replace one, and never prints the seed; `public-key` reads it back from the file.
#[test]
fn keygen_to_a_file_keeps_the_seed_off_the_screen() {
    let dir = std::env::temp_dir().join(format!("granary-keygen-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("seed.hex");
    let _ = std::fs::remove_file(&path);
    let file = path.to_str().unwrap();
    let (code, out, err) = common::granary(&[], &["archive", "keygen", "--seed-file", file]);
    assert_eq!(code, 0, "{err}");
    let seed = std::fs::read_to_string(&path).unwrap();
    assert_eq!(seed.len(), 64);
    assert!(!out.contains(&seed), "{out}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "readable by others: {mode:o}");
    }
    let public = out.lines().last().unwrap().trim();
    let (code, derived, err) =
        common::granary(&[], &["archive", "public-key", "--seed-file", file]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(derived.trim(), public);
    let (code, _, err) = common::granary(&[], &["archive", "keygen", "--seed-file", file]);
    assert_ne!(code, 0);
    assert!(err.contains("must not exist"), "{err}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), seed, "kept");
    let (code, _, err) = common::granary(&[], &["archive", "keygen"]);
    assert_ne!(code, 0, "a seed with nowhere to go");
    assert!(err.contains("--seed-file"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
