use super::describe;
use crate::ports::{OutgoingMessage, Queue, QueueDepth, QueueError, ReceivedMessage};
use async_trait::async_trait;
use aws_sdk_sqs::types::{MessageAttributeValue, MessageSystemAttributeName, QueueAttributeName};

/// One SQS queue.
#[derive(Clone, Debug)]
pub struct SqsQueue {
    client: aws_sdk_sqs::Client,
    url: String,
}

impl SqsQueue {
    pub fn new(client: aws_sdk_sqs::Client, url: impl Into<String>) -> Self {
        Self {
            client,
            url: url.into(),
        }
    }
}

#[async_trait]
impl Queue for SqsQueue {
    fn name(&self) -> &str {
        &self.url
    }

    async fn send(&self, message: OutgoingMessage) -> Result<(), QueueError> {
        let mut req = self
            .client
            .send_message()
            .queue_url(&self.url)
            .message_body(message.body);
        for (name, value) in message.attributes {
            let attr = MessageAttributeValue::builder()
                .data_type("String")
                .string_value(value)
                .build()
                .map_err(|e| QueueError::new(&self.url, e))?;
            req = req.message_attributes(name, attr);
        }
        req.send()
            .await
            .map(|_| ())
            .map_err(|e| QueueError::new(&self.url, describe(&e)).with_source(e))
    }

    async fn receive(
        &self,
        max: u32,
        visibility_timeout_secs: u32,
        wait_secs: u32,
    ) -> Result<Vec<ReceivedMessage>, QueueError> {
        let out = self
            .client
            .receive_message()
            .queue_url(&self.url)
            .max_number_of_messages(max.clamp(1, 10) as i32)
            .visibility_timeout(visibility_timeout_secs as i32)
            .wait_time_seconds(wait_secs.min(20) as i32)
            .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
            .message_system_attribute_names(MessageSystemAttributeName::SentTimestamp)
            .message_attribute_names("All")
            .send()
            .await
            .map_err(|e| QueueError::new(&self.url, describe(&e)).with_source(e))?;
        let mut messages = Vec::new();
        for m in out.messages.unwrap_or_default() {
            let (Some(receipt_handle), Some(message_id)) = (m.receipt_handle, m.message_id) else {
                continue;
            };
            let system = m.attributes.unwrap_or_default();
            let receive_count = system
                .get(&MessageSystemAttributeName::ApproximateReceiveCount)
                .and_then(|v| v.parse().ok())
                .unwrap_or(1);
            let sent_at_ms = system
                .get(&MessageSystemAttributeName::SentTimestamp)
                .and_then(|v| v.parse().ok());
            let attributes = m
                .message_attributes
                .unwrap_or_default()
                .into_iter()
                .filter_map(|(k, v)| v.string_value.map(|s| (k, s)))
                .collect();
            messages.push(ReceivedMessage {
                message_id,
                receipt_handle,
                body: m.body.unwrap_or_default(),
                attributes,
                receive_count,
                sent_at_ms,
            });
        }
        Ok(messages)
    }

    async fn delete(&self, receipt_handle: &str) -> Result<(), QueueError> {
        self.client
            .delete_message()
            .queue_url(&self.url)
            .receipt_handle(receipt_handle)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| QueueError::new(&self.url, describe(&e)).with_source(e))
    }

    async fn release(&self, receipt_handle: &str) -> Result<(), QueueError> {
        self.client
            .change_message_visibility()
            .queue_url(&self.url)
            .receipt_handle(receipt_handle)
            .visibility_timeout(0)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| QueueError::new(&self.url, describe(&e)).with_source(e))
    }

    async fn depth(&self) -> Result<QueueDepth, QueueError> {
        let out = self
            .client
            .get_queue_attributes()
            .queue_url(&self.url)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
            .send()
            .await
            .map_err(|e| QueueError::new(&self.url, describe(&e)).with_source(e))?;
        depth_of(&self.url, &out.attributes.unwrap_or_default())
    }
}

/// The two counts GetQueueAttributes answered. A count missing or unreadable is an error, never
/// 0: the feeder's downstream gate and the runtime's settling read 0 as "nothing waits".
fn depth_of(
    url: &str,
    attrs: &std::collections::HashMap<QueueAttributeName, String>,
) -> Result<QueueDepth, QueueError> {
    let get = |n: QueueAttributeName| -> Result<u64, QueueError> {
        let raw = attrs.get(&n).ok_or_else(|| {
            QueueError::new(
                url,
                format!("GetQueueAttributes answered without {}", n.as_str()),
            )
        })?;
        raw.parse().map_err(|_| {
            QueueError::new(
                url,
                format!("GetQueueAttributes answered {} = {raw:?}", n.as_str()),
            )
        })
    };
    Ok(QueueDepth {
        visible: get(QueueAttributeName::ApproximateNumberOfMessages)?,
        in_flight: get(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)?,
    })
}

#[cfg(test)]
mod depth_tests {
    use super::*;

    #[test]
    fn a_missing_or_unreadable_count_is_an_error_not_zero() {
        let both = std::collections::HashMap::from([
            (
                QueueAttributeName::ApproximateNumberOfMessages,
                "7".to_owned(),
            ),
            (
                QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
                "2".to_owned(),
            ),
        ]);
        let d = depth_of("q", &both).unwrap();
        assert_eq!((d.visible, d.in_flight), (7, 2));
        let mut missing = both.clone();
        missing.remove(&QueueAttributeName::ApproximateNumberOfMessages);
        let e = depth_of("q", &missing).unwrap_err().to_string();
        assert!(e.contains("without ApproximateNumberOfMessages"), "{e}");
        let mut bad = both;
        bad.insert(
            QueueAttributeName::ApproximateNumberOfMessages,
            "many".into(),
        );
        assert!(depth_of("q", &bad).is_err());
    }
}
