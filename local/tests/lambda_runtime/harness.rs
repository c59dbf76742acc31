//! The harness of lambda_runtime.rs: the deployed stack's functions, cargo-lambda's Runtime API
//! emulator, a binary running under it, and what `cargo lambda invoke` answered.

use granary::adapters::aws::AwsClients;
use granary::handlers::Ctx;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The bucket the emulator's stack names as its importer's source (infra/emulator_deploy.py).
pub const SOURCES_BUCKET: &str = "granary-emulator-sources";

/// How long one invocation may take before the harness calls it hung.
const INVOKE_LIMIT: Duration = Duration::from_secs(120);

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub fn real_events_dir() -> PathBuf {
    match std::env::var_os("GRANARY_REAL_EVENTS") {
        Some(dir) => PathBuf::from(dir),
        None => workspace_root().join("../shared/real-batch-events"),
    }
}

/// Where cargo put this build's binaries (the test runs from `<target>/<profile>/deps`).
fn binaries_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| panic!("no build directory above {}", exe.display()))
}

/// PATH with `.venv-package/bin` first, where scripts/package.sh installs cargo-lambda.
fn path_with_cargo_lambda() -> String {
    let venv = workspace_root().join(".venv-package/bin");
    match std::env::var("PATH") {
        Ok(path) => format!("{}:{path}", venv.display()),
        Err(_) => venv.display().to_string(),
    }
}

/// The stack `make test` deployed into the emulator, with the template it came from.
pub struct Deployed {
    doc: Value,
    template: Value,
}

impl Deployed {
    pub fn read() -> Self {
        let path = std::env::var("GRANARY_DEPLOYED_STACK").unwrap_or_else(|_| {
            panic!("GRANARY_DEPLOYED_STACK is not set: run `make test`, which deploys infra/template.yaml into the emulator first")
        });
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {path}: {e}"));
        let doc: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
        let template = granary_template::Template::granary().unwrap().doc;
        let deployed = Deployed { doc, template };
        assert_eq!(
            deployed.doc["functions"].as_object().map_or(0, |f| f.len()),
            deployed.function_count(),
            "the emulator made every function of the template (this test needs an endpoint that creates Lambda functions, as moto does): {}",
            deployed.doc["functions"]
        );
        deployed
    }

    /// The template's functions.
    pub fn function_count(&self) -> usize {
        self.template["Resources"]
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(_, r)| r["Type"] == "AWS::Serverless::Function")
            .count()
    }

    /// A function as the emulator made it, and the binary its package builds, on `own`'s
    /// bucket and queues.
    pub fn function(&self, logical_id: &str, own: &Own) -> FunctionUnderTest {
        let made = &self.doc["functions"][logical_id];
        let resource = &self.template["Resources"][logical_id];
        let binary = match resource["Metadata"]["BuildProperties"]["Binary"].as_str() {
            Some(b) => b.to_owned(),
            None => resource["Properties"]["CodeUri"]
                .as_str()
                .and_then(|u| u.rsplit('/').next())
                .unwrap_or_else(|| panic!("{logical_id}: no binary"))
                .to_owned(),
        };
        let env = made["environment"]
            .as_object()
            .unwrap_or_else(|| panic!("{logical_id}: not made by the emulator: {made}"))
            .iter()
            .map(|(k, v)| {
                let v = match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                (k.clone(), v)
            })
            .collect::<BTreeMap<String, String>>();
        let env = env
            .into_iter()
            .map(|(k, v)| match own.0.get(&k) {
                Some(mine) if !v.is_empty() => (k, mine.clone()),
                _ => (k, v),
            })
            .collect();
        FunctionUnderTest {
            name: made["name"].as_str().unwrap_or(logical_id).to_owned(),
            binary,
            env,
        }
    }

    /// The `Input` of the function's schedule, with the template's `${Parameter}`s given.
    pub fn schedule_input(&self, logical_id: &str, values: &[(&str, &str)]) -> Value {
        let input = &self.template["Resources"][logical_id]["Properties"]["Events"]["Schedule"]
            ["Properties"]["Input"];
        let mut text = input["Fn::Sub"]
            .as_str()
            .or(input.as_str())
            .unwrap_or_else(|| panic!("{logical_id}'s schedule has no Input: {input}"))
            .to_owned();
        for (k, v) in values {
            text = text.replace(&format!("${{{k}}}"), v);
        }
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{logical_id}'s Input {text}: {e}"))
    }
}

/// The bucket, queues and source prefix of this run alone, in place of the deployed ones: the
/// suite's other tests use the deployed stack's at the same time (its feeder reads every
/// inventory in the bucket, and its importer test takes the import queue's one message).
pub struct Own(BTreeMap<String, String>);

impl Own {
    pub async fn make(clients: &AwsClients) -> Self {
        let run = format!("lambda-rt-{}-{}", std::process::id(), rand_suffix());
        create_bucket(clients, &run).await;
        create_bucket(clients, SOURCES_BUCKET).await;
        let mut env = BTreeMap::new();
        env.insert("GRANARY_BUCKET".to_owned(), run.clone());
        env.insert(
            "GRANARY_SOURCE_URL".to_owned(),
            format!("s3://{SOURCES_BUCKET}/{run}/"),
        );
        for (var, queue) in [
            ("GRANARY_RETRY_QUEUE_URL", "retry"),
            ("GRANARY_FAILURE_DLQ_URL", "dlq"),
            ("GRANARY_IMPORT_QUEUE_URL", "import"),
            ("GRANARY_ARCHIVE_TASK_QUEUE_URL", "tasks"),
        ] {
            let made = clients
                .sqs
                .create_queue()
                .queue_name(format!("{run}-{queue}"))
                .send()
                .await
                .unwrap_or_else(|e| panic!("creating {queue}: {}", e.into_service_error()));
            env.insert(
                var.to_owned(),
                made.queue_url().unwrap_or_default().to_owned(),
            );
        }
        // The archive's signing key, as an operator puts it (docs/archive.md).
        let parameter = format!("/{run}/archive-signing-key");
        clients
            .ssm
            .put_parameter()
            .name(&parameter)
            .value("7e".repeat(32))
            .r#type(aws_sdk_ssm::types::ParameterType::SecureString)
            .send()
            .await
            .unwrap_or_else(|e| panic!("putting {parameter}: {}", e.into_service_error()));
        env.insert(
            "GRANARY_ARCHIVE_SIGNING_KEY_PARAMETER".to_owned(),
            parameter,
        );
        Own(env)
    }

    pub fn get(&self, var: &str) -> &str {
        &self.0[var]
    }
}

fn rand_suffix() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos() % 1_000_000)
}

pub struct FunctionUnderTest {
    /// The deployed function's name (AWS_LAMBDA_FUNCTION_NAME).
    pub name: String,
    pub binary: String,
    pub env: BTreeMap<String, String>,
}

impl FunctionUnderTest {
    /// The handlers' context on the function's own configuration, to set up and read outcomes.
    pub fn ctx(&self, clients: &AwsClients) -> Ctx {
        let env: HashMap<String, String> = self.env.clone().into_iter().collect();
        let config = granary_local::stack::config_from(&env).unwrap();
        Ctx::aws(config, clients).unwrap()
    }
}

/// A process killed when dropped.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `cargo lambda watch --only-lambda-apis` on a free loopback port.
pub struct Emulator {
    port: u16,
    logs: tempfile::TempDir,
    _process: Process,
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

impl Emulator {
    pub fn start() -> Self {
        let port = free_port();
        let logs = tempfile::tempdir().unwrap();
        let log = std::fs::File::create(logs.path().join("emulator.log")).unwrap();
        let child = Command::new("cargo")
            .args(["lambda", "watch", "--only-lambda-apis", "-A", "127.0.0.1"])
            .args(["-P", &port.to_string()])
            .current_dir(workspace_root())
            .env("PATH", path_with_cargo_lambda())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting cargo lambda watch: {e}"));
        let process = Process(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            let log = std::fs::read_to_string(logs.path().join("emulator.log")).unwrap_or_default();
            assert!(
                Instant::now() < deadline,
                "cargo lambda watch did not listen on {port} (is cargo-lambda installed? `scripts/package.sh install`): {log}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Emulator {
            port,
            logs,
            _process: process,
        }
    }

    /// The function's binary, polling the emulator's Runtime API under its binary's name.
    pub fn run(&self, f: &FunctionUnderTest) -> Running<'_> {
        let bin = binaries_dir().join(&f.binary);
        assert!(
            bin.exists(),
            "{} not found: build the functions first (`cargo build --workspace --all-targets \
             --features granary/mutants`, as scripts/test-suite.sh does)",
            bin.display()
        );
        let log_path = self.logs.path().join(format!("{}.log", f.binary));
        let log = std::fs::File::create(&log_path).unwrap();
        let passed_on = [
            "AWS_ENDPOINT_URL",
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN",
            "AWS_REGION",
            "AWS_DEFAULT_REGION",
        ];
        let mut command = Command::new(&bin);
        command.env_clear();
        for k in passed_on {
            if let Ok(v) = std::env::var(k) {
                command.env(k, v);
            }
        }
        let child = command
            .envs(&f.env)
            .env(
                "AWS_LAMBDA_RUNTIME_API",
                format!("http://127.0.0.1:{}/.rt/{}", self.port, f.binary),
            )
            .env("AWS_LAMBDA_FUNCTION_NAME", &f.name)
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
            .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
            .env(
                "AWS_LAMBDA_LOG_GROUP_NAME",
                format!("/aws/lambda/{}", f.name),
            )
            .env("AWS_LAMBDA_LOG_STREAM_NAME", "lambda-runtime-test")
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
        Running {
            emulator: self,
            binary: f.binary.clone(),
            log_path,
            _process: Process(child),
        }
    }
}

/// One function's binary under the emulator.
pub struct Running<'a> {
    emulator: &'a Emulator,
    binary: String,
    log_path: PathBuf,
    _process: Process,
}

impl Running<'_> {
    /// `cargo lambda invoke --data-file`: what the function answered, or the error Lambda
    /// reported.
    pub fn invoke(&self, event: &Value) -> Invoked {
        let data = self
            .emulator
            .logs
            .path()
            .join(format!("{}-event.json", self.binary));
        std::fs::write(&data, event.to_string()).unwrap();
        let port = self.emulator.port.to_string();
        let mut child = Command::new("cargo")
            .args([
                "lambda",
                "invoke",
                &self.binary,
                "-A",
                "127.0.0.1",
                "-P",
                &port,
            ])
            .args(["--output-format", "json", "--data-file"])
            .arg(&data)
            .env("PATH", path_with_cargo_lambda())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cargo lambda invoke: {e}"));
        let deadline = Instant::now() + INVOKE_LIMIT;
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!(
                    "{} answered nothing in {INVOKE_LIMIT:?}; its log:\n{}",
                    self.binary,
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = child.wait_with_output().unwrap();
        Invoked {
            binary: self.binary.clone(),
            succeeded: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            log: self.log(),
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }
}

/// What one `cargo lambda invoke` printed.
pub struct Invoked {
    binary: String,
    succeeded: bool,
    stdout: String,
    stderr: String,
    log: String,
}

impl Invoked {
    /// The function's answer, as JSON.
    pub fn answer(&self) -> Value {
        assert!(
            self.succeeded,
            "{} failed: {}\n{}\nits log:\n{}",
            self.binary, self.stdout, self.stderr, self.log
        );
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "{}'s answer is not JSON ({e}): {}",
                self.binary, self.stdout
            )
        })
    }

    /// The invocation failed with an error of `error_type`, as the Runtime API reported it.
    pub fn assert_error(&self, error_type: &str) {
        assert!(
            !self.succeeded && self.stderr.contains(error_type),
            "{}: expected an error {error_type}, got: {}\n{}",
            self.binary,
            self.stdout,
            self.stderr
        );
    }
}

pub async fn create_bucket(clients: &AwsClients, name: &str) {
    if let Err(e) = clients.s3.create_bucket().bucket(name).send().await {
        let e = e.into_service_error();
        assert!(
            e.is_bucket_already_owned_by_you() || e.is_bucket_already_exists(),
            "creating {name}: {e}"
        );
    }
}
