//! One image on its way from encoded bytes to a job: its memory reserved
//! from the decode budget (waiting while the budget is spent holds up the
//! reading: backpressure, not buffering), a decode slot taken, the decode run
//! on a blocking thread; then the job, or an error answer, goes on.

use super::intake::Decoding;
use crate::core::input::ModelInput;
use crate::core::job::{error_answer, Finished, Job, Reply, SinkItem};
use crate::core::message::Position;
use crate::guard::{self, Stage};
use crate::stages::handover::Piped;
use fleet_image::{Header, ImageError};
use fleet_proto::clock::now_ms;
use fleet_proto::{ErrorCode, ModelName, RequestId};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

/// The stable answer code for each way an image is refused.
pub fn image_error_code(error: &ImageError) -> ErrorCode {
    match error {
        ImageError::TooLarge(_) => ErrorCode::ImageTooLarge,
        ImageError::Unsupported(_) => ErrorCode::UnsupportedFormat,
        ImageError::Malformed(_) => ErrorCode::DecodeFailed,
    }
}

/// Drops the decodes that have finished from `running`. A `JoinSet` keeps
/// each finished task (about 1 KiB) until it is joined, and the stage joins
/// them only at a handover or at the end: unreaped, an image worker's heap
/// grows with every image it answers (docs/soak.md). The decode slots
/// bound what is left running.
fn reap_finished(running: &mut JoinSet<()>) {
    while let Some(done) = running.try_join_next() {
        if let Err(e) = done {
            // The decode's own failures are answered inside it; only a
            // fault of the task itself (a panic past the decoder's guard) lands here.
            tracing::error!(error = %e, "an image decode task failed");
        }
    }
}

/// An admitted image: its header passed the limits; the bytes are decoded next.
#[derive(Debug)]
pub struct ImageDecode {
    pub position: Position,
    pub id: RequestId,
    pub created_ms: u64,
    pub deadline_ms: u64,
    /// Where its answer goes, the job it belongs to.
    pub reply: Reply,
    /// Probed from the bytes: format and canvas size.
    pub header: Header,
    pub bytes: Vec<u8>,
    pub decoding: Decoding,
    /// The version it was admitted for: a refusal is that version's answer.
    pub version: u64,
}

/// Where a decode's outcome goes.
#[derive(Clone)]
pub struct DecodeOutlets {
    pub model: ModelName,
    pub jobs: mpsc::Sender<Piped<Job>>,
    pub sink: mpsc::Sender<SinkItem>,
}

impl ImageDecode {
    /// Reserves the decode's memory and a slot, then decodes on a blocking
    /// thread in `running`; false when the pipeline is closed.
    pub async fn start(mut self, out: &DecodeOutlets, running: &mut JoinSet<()>) -> bool {
        let cost = self.header.decode_cost(self.decoding.geometry.resize_shorter);
        let reservation = match self.decoding.budget.reserve(cost).await {
            Ok(reservation) => reservation,
            Err(over) => {
                let answer = self.refusal(out, ErrorCode::ImageTooLarge, over.to_string());
                return out.sink.send(SinkItem::Answers(vec![answer])).await.is_ok();
            }
        };
        let Ok(slot) = self.decoding.slots.clone().acquire_owned().await else { return false };
        reap_finished(running);
        let out = out.clone();
        running.spawn(async move {
            // The bytes move to the decode thread and are freed with it.
            let bytes = std::mem::take(&mut self.bytes);
            let (header, geometry) = (self.header, self.decoding.geometry);
            let decoded = tokio::task::spawn_blocking(move || {
                let _held = (reservation, slot);
                let image = fleet_image::decode(&bytes, &header, geometry.resize_shorter)?;
                fleet_image::model_input(&image, geometry)
            })
            .await;
            let answer = match decoded {
                Ok(Ok(pixels)) => {
                    let input = ModelInput::Pixels(pixels);
                    let (created_ms, deadline_ms) = (self.created_ms, self.deadline_ms);
                    let job = Job::new(self.position, self.id, input, created_ms, deadline_ms, self.reply);
                    let _ = out.jobs.send(Piped::Work(job)).await;
                    return;
                }
                Ok(Err(e)) => self.refusal(&out, image_error_code(&e), e.to_string()),
                Err(e) => {
                    let panic =
                        if e.is_panic() { guard::panic_message(e.into_panic().as_ref()) } else { e.to_string() };
                    guard::record(Stage::Decode, &panic);
                    self.refusal(&out, ErrorCode::DecodeFailed, format!("the decoder failed: {panic}"))
                }
            };
            let _ = out.sink.send(SinkItem::Answers(vec![answer])).await;
        });
        true
    }

    fn refusal(&self, out: &DecodeOutlets, code: ErrorCode, message: String) -> Finished {
        let answer = error_answer(out.model.as_str(), self.version, code, message, Some(self.created_ms), now_ms());
        Finished::without_compute(self.position.clone(), self.id.clone(), self.reply.clone(), answer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn finished_decodes_are_not_kept() {
        let mut running = JoinSet::new();
        for _ in 0..100 {
            running.spawn(async {});
        }
        // Each yield lets the spawned tasks run to their end.
        for _ in 0..1000 {
            tokio::task::yield_now().await;
            reap_finished(&mut running);
            if running.is_empty() {
                break;
            }
        }
        assert_eq!(running.len(), 0, "finished tasks stay in the set until reaped");
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        running.spawn(async move {
            let _ = released.await;
        });
        tokio::task::yield_now().await;
        reap_finished(&mut running);
        assert_eq!(running.len(), 1, "a decode still running is kept");
        release.send(()).unwrap();
        while running.join_next().await.is_some() {}
    }
}
