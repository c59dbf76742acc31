//! `make deploy`'s pieces against the template and the stack `make test` deployed: it asks for
//! exactly the parameters the template cannot default, infra/samconfig.toml sets only parameters
//! the template has (with values it allows), and the next steps it prints name the deployed
//! stack's own resources.

use std::path::PathBuf;
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn template() -> serde_json::Value {
    granary_template::Template::granary().unwrap().doc
}

#[test]
fn make_deploy_asks_only_for_what_the_template_cannot_default() {
    let out = Command::new("bash")
        .arg(root().join("scripts/deploy.sh"))
        .arg("--questions")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let asked: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once(':').map(|(k, _)| k.to_owned()))
        .collect();
    let template = template();
    let parameters = template["Parameters"].as_object().unwrap();
    let mut no_default: Vec<String> = parameters
        .iter()
        .filter(|(_, p)| p.get("Default").is_none())
        .map(|(k, _)| k.clone())
        .collect();
    no_default.sort();
    let mut sorted = asked.clone();
    sorted.sort();
    assert_eq!(sorted, no_default, "asked {asked:?}");
    println!(
        "make deploy asks {} questions: {asked:?}; {} parameters keep their defaults",
        asked.len(),
        parameters.len() - asked.len()
    );
}

#[test]
fn samconfig_sets_only_parameters_the_template_has() {
    let text = std::fs::read_to_string(root().join("infra/samconfig.toml")).unwrap();
    let line = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("parameter_overrides = "))
        .expect("samconfig.toml has parameter_overrides");
    let template = template();
    for pair in line.trim_matches('"').split_whitespace() {
        let (k, v) = pair.split_once('=').unwrap_or_else(|| panic!("{pair}"));
        let p = &template["Parameters"][k];
        assert!(
            p.is_object(),
            "samconfig.toml sets {k}, which the template does not have"
        );
        if let Some(allowed) = p["AllowedValues"].as_array() {
            assert!(
                allowed.iter().any(|a| a == v),
                "{k}={v} is not one of {allowed:?}"
            );
        }
    }
    for key in ["stack_name", "capabilities", "resolve_s3", "beta_features"] {
        assert!(text.contains(key), "samconfig.toml has no {key}");
    }
}

/// Against the stack `make test` deployed into the emulator (GRANARY_DEPLOYED_STACK).
#[test]
fn the_next_steps_name_the_deployed_stacks_resources() {
    let path = std::env::var("GRANARY_DEPLOYED_STACK")
        .expect("GRANARY_DEPLOYED_STACK is not set: run `make test`, which deploys the template");
    let deployed: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let stack = deployed["stack_name"].as_str().unwrap();
    let out = Command::new(root().join(".venv-deploy/bin/python"))
        .arg(root().join("scripts/next_steps.py"))
        .arg(stack)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bucket = deployed["outputs"]["DataBucketName"].as_str().unwrap();
    let queue = deployed["outputs"]["JobQueueArn"].as_str().unwrap();
    for expected in [
        format!("export GRANARY_BUCKET={bucket}"),
        format!("export GRANARY_JOB_QUEUE={queue}"),
        format!("--out s3://{bucket}/inventories/0001.parquet"),
        "granary plan".to_owned(),
        "granary status".to_owned(),
    ] {
        assert!(stdout.contains(&expected), "no {expected:?} in:\n{stdout}");
    }
}
