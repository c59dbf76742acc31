//! Other buckets over S3 (an archive's source and destinations), and the archive signing key
//! kept in SSM Parameter Store.

use super::S3Store;
use crate::ports::{Buckets, ObjectStore};
use aws_sdk_ssm::error::{DisplayErrorContext, SdkError};
use aws_sdk_ssm::operation::get_parameter::GetParameterError;
use aws_sdk_ssm::operation::put_parameter::PutParameterError;
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

/// Why an SSM parameter could not be read or stored. The text names the parameter and SSM's
/// reason (the SDK's error in full, with its causes, since the SDK's own text is terse).
#[derive(Debug, thiserror::Error)]
pub enum SsmParameterError {
    #[error("reading {name} from SSM: {}", DisplayErrorContext(.source.as_ref()))]
    Read {
        name: String,
        #[source]
        source: Box<SdkError<GetParameterError>>,
    },
    #[error("SSM parameter {name} has no value")]
    NoValue { name: String },
    #[error(
        "storing the archive signing key in SSM parameter {name} (an existing one is kept unless --overwrite): {}",
        DisplayErrorContext(.source.as_ref())
    )]
    StoreSigningSeed {
        name: String,
        #[source]
        source: Box<SdkError<PutParameterError>>,
    },
}

/// The Ed25519 seed (hex) kept in SSM parameter `name` (a SecureString, decrypted by SSM with
/// its KMS key: GetParameter `WithDecryption`). The error names the parameter and SSM's reason.
pub async fn load_signing_seed(
    client: &aws_sdk_ssm::Client,
    name: &str,
) -> Result<String, SsmParameterError> {
    load_secure_parameter(client, name).await
}

/// A SecureString parameter's value, decrypted; the error names the parameter and SSM's reason.
pub async fn load_secure_parameter(
    client: &aws_sdk_ssm::Client,
    name: &str,
) -> Result<String, SsmParameterError> {
    let out = client
        .get_parameter()
        .name(name)
        .with_decryption(true)
        .send()
        .await
        .map_err(|e| SsmParameterError::Read {
            name: name.to_owned(),
            source: Box::new(e),
        })?;
    out.parameter
        .and_then(|p| p.value)
        .ok_or_else(|| SsmParameterError::NoValue {
            name: name.to_owned(),
        })
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
) -> Result<(), SsmParameterError> {
    client
        .put_parameter()
        .name(name)
        .value(seed_hex)
        .r#type(aws_sdk_ssm::types::ParameterType::SecureString)
        .key_id(key_id)
        .overwrite(overwrite)
        .send()
        .await
        .map_err(|e| SsmParameterError::StoreSigningSeed {
            name: name.to_owned(),
            source: Box::new(e),
        })?;
    Ok(())
}
