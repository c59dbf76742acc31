//! Other buckets over S3 (an archive's source and destinations), and the archive signing key
//! kept in SSM Parameter Store.

use super::S3Store;
use crate::ports::{Buckets, ObjectStore};
use std::sync::Arc;

pub struct S3Buckets {
    client: aws_sdk_s3::Client,
}

impl S3Buckets {
    pub fn new(client: aws_sdk_s3::Client) -> Self {
        Self { client }
    }
}

impl Buckets for S3Buckets {
    fn store(&self, bucket: &str, storage_class: Option<&str>) -> Arc<dyn ObjectStore> {
        let store = S3Store::new(self.client.clone(), bucket);
        Arc::new(match storage_class {
            Some(class) => store.with_storage_class(class),
            None => store,
        })
    }
}

/// The Ed25519 seed (hex) kept in SSM parameter `name` (a SecureString, decrypted by SSM with
/// its KMS key: GetParameter `WithDecryption`). The error names the parameter and SSM's reason.
pub async fn load_signing_seed(client: &aws_sdk_ssm::Client, name: &str) -> Result<String, String> {
    load_secure_parameter(client, name).await
}

/// A SecureString parameter's value, decrypted; the error names the parameter and SSM's reason.
pub async fn load_secure_parameter(
    client: &aws_sdk_ssm::Client,
    name: &str,
) -> Result<String, String> {
    let out = client
        .get_parameter()
        .name(name)
        .with_decryption(true)
        .send()
        .await
        .map_err(|e| {
            format!(
                "reading {name} from SSM: {}",
                aws_sdk_ssm::error::DisplayErrorContext(&e)
            )
        })?;
    out.parameter
        .and_then(|p| p.value)
        .ok_or_else(|| format!("SSM parameter {name} has no value"))
}

/// Stores the Ed25519 seed (hex) in SSM parameter `name` as a SecureString under `key_id` (the
/// stack's signing key, whose policy lets only the archive tasks decrypt). An existing parameter
/// is kept unless `overwrite`. The error names the parameter and SSM's reason.
pub async fn store_signing_seed(
    client: &aws_sdk_ssm::Client,
    name: &str,
    seed_hex: &str,
    key_id: &str,
    overwrite: bool,
) -> Result<(), String> {
    client
        .put_parameter()
        .name(name)
        .value(seed_hex)
        .r#type(aws_sdk_ssm::types::ParameterType::SecureString)
        .key_id(key_id)
        .overwrite(overwrite)
        .send()
        .await
        .map_err(|e| {
            format!(
                "storing the archive signing key in SSM parameter {name} (an existing one is kept unless --overwrite): {}",
                aws_sdk_ssm::error::DisplayErrorContext(&e)
            )
        })?;
    Ok(())
}
