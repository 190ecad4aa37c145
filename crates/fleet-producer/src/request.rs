//! A request as a producer builds it, before it becomes a Kafka message.

use fleet_image::{Format, ImageError, ImageLimits};
use fleet_proto::{ContentType, Destinations, JobId, Lane, RequestId, RerankRequest};

#[derive(Debug, Clone)]
pub struct Request {
    pub id: RequestId,
    pub content_type: ContentType,
    /// The raw input: UTF-8 text, or encoded image bytes. Never base64.
    pub payload: Vec<u8>,
    /// Absolute deadline, Unix epoch ms; the model's TTL applies when `None`.
    pub deadline_ms: Option<u64>,
    /// How many models this request is fanned out to (ce_parts).
    pub parts: u32,
    /// Which of the model's topics it goes to: interactive (`infer.<model>`,
    /// the default) or bulk (`infer.<model>.bulk`).
    pub lane: Lane,
    /// The job it belongs to (`ce_fleetjob`): cancelling the job cancels it.
    pub job: Option<JobId>,
    /// Where its answer goes (`ce_fleetreplyto`: Redis, the model's answers
    /// topic on Kafka, or both), within what the model allows; `None`: the
    /// lane's default (interactive: Redis, bulk: Kafka, unless the model's
    /// config says otherwise).
    pub reply_to: Option<Destinations>,
}

impl Request {
    pub fn text(id: RequestId, text: impl Into<String>) -> Self {
        Self::new(id, ContentType::Text, text.into().into_bytes())
    }

    fn new(id: RequestId, content_type: ContentType, payload: Vec<u8>) -> Self {
        Self {
            id,
            content_type,
            payload,
            deadline_ms: None,
            parts: 1,
            lane: Lane::Interactive,
            job: None,
            reply_to: None,
        }
    }

    /// A query and the documents a rerank model scores against it.
    pub fn rerank(id: RequestId, query: impl Into<String>, documents: Vec<String>) -> Self {
        let payload = RerankRequest { query: query.into(), documents }.to_json();
        Self::new(id, ContentType::Json, payload)
    }

    /// An encoded image (JPEG, PNG or WebP bytes), sent as it is.
    pub fn image(id: RequestId, content_type: ContentType, bytes: Vec<u8>) -> Self {
        Self::new(id, content_type, bytes)
    }

    /// An image shrunk on the producer's side first (the gateway cap): when
    /// its longer side is over `max_side` it is decoded at reduced scale,
    /// resized to fit and re-encoded as JPEG (quality 90), so Kafka and every
    /// worker carry a few hundred KB instead of the camera original. Smaller
    /// images are sent unchanged. Refuses what the worker would refuse.
    pub fn image_within(
        id: RequestId,
        content_type: ContentType,
        bytes: Vec<u8>,
        max_side: u32,
    ) -> Result<Self, ImageError> {
        let Some(declared) = Format::from_mime(content_type.as_str()) else {
            return Err(ImageError::Unsupported(format!("{content_type} is not an image")));
        };
        Ok(match fleet_image::shrink_for_transport(&bytes, Some(declared), &ImageLimits::default(), max_side, 90)? {
            Some(jpeg) => Self::image(id, ContentType::Jpeg, jpeg),
            None => Self::image(id, content_type, bytes),
        })
    }

    pub fn with_deadline_ms(mut self, deadline_ms: u64) -> Self {
        self.deadline_ms = Some(deadline_ms);
        self
    }

    /// Sends it on `lane` instead of the interactive one.
    pub fn in_lane(mut self, lane: Lane) -> Self {
        self.lane = lane;
        self
    }

    /// Makes it part of `job`, which one cancel stops.
    pub fn with_job(mut self, job: JobId) -> Self {
        self.job = Some(job);
        self
    }

    /// Asks for its answer in `destinations` (`ce_fleetreplyto`).
    pub fn reply_to(mut self, destinations: Destinations) -> Self {
        self.reply_to = Some(destinations);
        self
    }
}
