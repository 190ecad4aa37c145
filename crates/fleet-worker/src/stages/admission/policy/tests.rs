use super::*;
use crate::config::model::TtlConfig;
use crate::core::message::RawHeader;
use crate::stages::admission::decode_budget::DecodeBudget;
use crate::stages::admission::intake::Decoding;
use fleet_image::InputGeometry;
use fleet_proto::{headers as h, Status};
use std::sync::Arc;

const NOW: u64 = 1_764_000_001_000;

/// A real tokenizer of a few words (whitespace-split, one id per word),
/// made in the test: the model repository's are installed by setup.
fn word_tokenizer(max_seq_len: usize) -> TextTokenizer {
    let json = r#"{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],
        "normalizer":null,"pre_tokenizer":{"type":"Whitespace"},"post_processor":null,"decoder":null,
        "model":{"type":"WordLevel","vocab":{"[UNK]":0,"hello":1,"there":2,"a":3,"caption":4},
        "unk_token":"[UNK]"}}"#;
    TextTokenizer::from_bytes(std::path::Path::new("words.json"), json.as_bytes(), max_seq_len, false).unwrap()
}

fn policy_with(intake: Intake) -> AdmissionPolicy {
    AdmissionPolicy {
        model: ModelName::parse("minilm").unwrap(),
        version: 4,
        intake,
        request_ttls: TtlConfig::default().request_ttls(),
        answers: Default::default(),
        cancelled: Default::default(),
    }
}

fn policy() -> AdmissionPolicy {
    policy_with(Intake::Text { max_text_bytes: 64, tokenizer: Box::new(word_tokenizer(8)), documents: None })
}

fn image_policy() -> AdmissionPolicy {
    image_policy_with_budget(1 << 20)
}

fn image_policy_with_budget(budget_bytes: u64) -> AdmissionPolicy {
    let limits = ImageLimits { max_bytes: 1000, max_pixels: 10, formats: vec![Format::Png] };
    let decoding = Decoding {
        geometry: InputGeometry { resize_shorter: 3, crop: 3 },
        budget: DecodeBudget::new(budget_bytes),
        slots: Arc::new(tokio::sync::Semaphore::new(1)),
    };
    policy_with(Intake::Image { limits, decoding })
}

fn png(width: u32, height: u32) -> Vec<u8> {
    use image::ImageEncoder;
    let mut out = Vec::new();
    let pixels = vec![128u8; (width * height * 3) as usize];
    image::codecs::png::PngEncoder::new(&mut out)
        .write_image(&pixels, width, height, image::ExtendedColorType::Rgb8)
        .unwrap();
    out
}

fn envelope(content_type: ContentType) -> Envelope {
    Envelope {
        id: RequestId::parse("r1").unwrap(),
        source: "test".into(),
        created_ms: NOW - 1_000,
        content_type,
        deadline_ms: None,
        parts: 1,
        job: None,
        reply_to: None,
    }
}

fn inbound(envelope: &Envelope, payload: &[u8]) -> Inbound {
    Inbound {
        position: Position { lane: fleet_proto::Lane::Interactive, partition: 0, offset: 7, generation: 1 },
        key: Some(envelope.id.as_str().as_bytes().to_vec()),
        headers: envelope.to_headers().into_iter().map(|(k, v)| RawHeader::new(k, Some(v.into_bytes()))).collect(),
        payload: Some(payload.to_vec()),
        replayed: false,
    }
}

fn admit(policy: &AdmissionPolicy, mut message: Inbound) -> Admitted {
    policy.admit(&mut message, NOW)
}

fn error_code(admitted: Admitted) -> ErrorCode {
    match admitted {
        Admitted::Answer(Finished { answer, position, .. }) => {
            assert_eq!(answer.status, Status::Error);
            assert_eq!((answer.model.as_str(), answer.version), ("minilm", 4));
            assert_eq!(position.offset, 7, "the answer keeps its message's position");
            answer.error.unwrap().code
        }
        other => panic!("expected an error answer, got {other:?}"),
    }
}

#[test]
fn admits_valid_text_tokenized_with_its_deadline() {
    match admit(&policy(), inbound(&envelope(ContentType::Text), "hello there".as_bytes())) {
        Admitted::Job(job) => {
            assert_eq!(job.input, ModelInput::Tokens { ids: vec![1, 2], truncated: false });
            assert_eq!(job.deadline_ms, NOW - 1_000 + 30_000);
            assert_eq!((job.id.as_str(), job.position.offset), ("r1", 7));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn each_bad_input_gets_its_stable_code() {
    let p = policy();
    let text = envelope(ContentType::Text);
    assert_eq!(error_code(admit(&p, inbound(&text, b""))), ErrorCode::EmptyInput);
    assert_eq!(error_code(admit(&p, inbound(&text, b" \n\t "))), ErrorCode::EmptyInput);
    assert_eq!(error_code(admit(&p, inbound(&text, b"caf\xe9"))), ErrorCode::DecodeFailed);
    assert_eq!(error_code(admit(&p, inbound(&text, &[b'a'; 65]))), ErrorCode::TextTooLong);
    let nine_words = "hello there a caption hello there a caption hello";
    assert_eq!(error_code(admit(&p, inbound(&text, nine_words.as_bytes()))), ErrorCode::TextTooLong);
    let image = envelope(ContentType::Png);
    assert_eq!(error_code(admit(&p, inbound(&image, b"\x89PNG"))), ErrorCode::UnsupportedFormat);

    let mut no_time = inbound(&text, b"hi");
    no_time.headers.retain(|header| header.name != h::TIME.as_bytes());
    assert_eq!(error_code(admit(&p, no_time)), ErrorCode::BadRequest);
    let mut unknown_type = inbound(&text, b"hi");
    for header in &mut unknown_type.headers {
        if header.name == h::CONTENT_TYPE.as_bytes() {
            header.value = Some(b"application/x-thing".to_vec());
        }
    }
    assert_eq!(error_code(admit(&p, unknown_type)), ErrorCode::UnsupportedFormat);
    let mut no_payload = inbound(&text, b"");
    no_payload.payload = None;
    assert_eq!(error_code(admit(&p, no_payload)), ErrorCode::EmptyInput);
}

#[test]
fn admits_an_image_within_limits_with_its_header_and_bytes() {
    let bytes = png(3, 3);
    let mut message = inbound(&envelope(ContentType::Png), &bytes);
    match image_policy().admit(&mut message, NOW) {
        Admitted::Decode(decode) => {
            assert_eq!((decode.header.format, decode.header.width, decode.header.height), (Format::Png, 3, 3));
            assert_eq!(decode.bytes, bytes);
            assert_eq!(decode.deadline_ms, NOW - 1_000 + 30_000);
        }
        other => panic!("{other:?}"),
    }
    assert!(message.payload.is_none(), "the bytes moved on with the decode, not copied");
}

#[test]
fn images_are_judged_by_their_header_before_any_decode() {
    let p = image_policy();
    let declared_png = envelope(ContentType::Png);
    assert_eq!(error_code(admit(&p, inbound(&declared_png, b""))), ErrorCode::EmptyInput);
    assert_eq!(error_code(admit(&p, inbound(&declared_png, &[0u8; 1001]))), ErrorCode::ImageTooLarge);
    assert_eq!(error_code(admit(&p, inbound(&declared_png, &png(4, 4)))), ErrorCode::ImageTooLarge);
    assert_eq!(error_code(admit(&p, inbound(&declared_png, b"GIF89a...."))), ErrorCode::UnsupportedFormat);
    assert_eq!(error_code(admit(&p, inbound(&declared_png, &png(3, 3)[..40]))), ErrorCode::DecodeFailed);
    let jpeg = envelope(ContentType::Jpeg);
    assert_eq!(error_code(admit(&p, inbound(&jpeg, &png(3, 3)))), ErrorCode::UnsupportedFormat);
    let text = envelope(ContentType::Text);
    assert_eq!(error_code(admit(&p, inbound(&text, b"a caption"))), ErrorCode::UnsupportedFormat);
}

fn expired(admitted: Admitted) -> bool {
    matches!(admitted, Admitted::Answer(Finished { answer, .. }) if answer.status == Status::Expired)
}

#[test]
fn past_deadline_is_expired_before_any_other_check() {
    let mut env = envelope(ContentType::Text);
    env.deadline_ms = Some(NOW);
    assert!(expired(admit(&policy(), inbound(&env, b""))));
}

#[test]
fn unreadable_id_goes_to_the_dead_letter_topic_whole() {
    let mut msg = inbound(&envelope(ContentType::Text), b"hi");
    msg.key = None;
    msg.headers.retain(|header| header.name != h::ID.as_bytes());
    match admit(&policy(), msg.clone()) {
        Admitted::DeadLetter(letter) => {
            assert_eq!(letter.reason, "unreadable_request_id");
            assert_eq!((letter.payload.as_deref(), letter.headers.len()), (Some(&b"hi"[..]), msg.headers.len()));
        }
        other => panic!("{other:?}"),
    }
    msg.headers.clear();
    msg.key = Some(b"bad key!".to_vec());
    assert!(matches!(admit(&policy(), msg), Admitted::DeadLetter(_)));
}

#[test]
fn a_header_name_that_is_not_utf8_is_a_bad_request_or_a_dead_letter() {
    let mut msg = inbound(&envelope(ContentType::Text), b"hi");
    msg.headers.push(RawHeader::new(b"x-\xff".to_vec(), Some(b"v".to_vec())));
    assert_eq!(error_code(admit(&policy(), msg.clone())), ErrorCode::BadRequest);
    // Without the key, ce_id still gives the answer an address.
    msg.key = None;
    assert_eq!(error_code(admit(&policy(), msg.clone())), ErrorCode::BadRequest);
    msg.headers.retain(|header| header.name != h::ID.as_bytes());
    match admit(&policy(), msg) {
        Admitted::DeadLetter(letter) => {
            assert_eq!(letter.reason, MALFORMED_HEADER);
            assert!(letter.detail.contains("x-\\xff"), "{}", letter.detail);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn times_at_the_numeric_extremes_are_answered_not_overflowed() {
    let p = policy();
    let mut far = envelope(ContentType::Text);
    far.deadline_ms = Some(u64::MAX);
    assert!(matches!(admit(&p, inbound(&far, b"hello")), Admitted::Job(_)));
    let mut past = envelope(ContentType::Text);
    past.deadline_ms = Some(0);
    assert!(expired(admit(&p, inbound(&past, b"hello"))));
    let mut huge = inbound(&envelope(ContentType::Text), b"hello");
    for header in &mut huge.headers {
        if header.name == h::TIME.as_bytes() {
            header.value = Some(b"9999-12-31T23:59:59.999Z".to_vec());
        }
    }
    huge.headers.push(RawHeader::new(h::DEADLINE, Some(b"99999999999999999999999".to_vec())));
    assert_eq!(error_code(admit(&p, huge.clone())), ErrorCode::BadRequest);
    huge.headers.pop();
    match admit(&p, huge) {
        Admitted::Job(job) => assert!(job.deadline_ms > NOW),
        other => panic!("{other:?}"),
    }
}

fn rerank_policy() -> AdmissionPolicy {
    policy_with(Intake::Text { max_text_bytes: 64, tokenizer: Box::new(word_tokenizer(6)), documents: Some(3) })
}

fn rerank(query: &str, documents: &[&str]) -> Vec<u8> {
    RerankRequest { query: query.into(), documents: documents.iter().map(|d| d.to_string()).collect() }.to_json()
}

#[test]
fn a_rerank_request_is_one_job_of_a_row_per_document() {
    let json = envelope(ContentType::Json);
    match admit(&rerank_policy(), inbound(&json, &rerank("hello", &["there", "a caption", "hello there"]))) {
        Admitted::Job(job) => {
            let ModelInput::Pairs { rows, truncated } = &job.input else { panic!("{:?}", job.input) };
            assert_eq!((rows.len(), *truncated), (3, false));
            assert_eq!(rows[1].ids, vec![1, 3, 4], "query then document");
            assert_eq!(rows[1].type_ids.len(), rows[1].ids.len());
            assert_eq!(job.input.rows(), 3);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_rerank_request_that_cannot_be_served_is_answered_with_its_code() {
    let (json, text) = (envelope(ContentType::Json), envelope(ContentType::Text));
    let cases: Vec<(Inbound, ErrorCode)> = vec![
        (inbound(&text, b"hello there"), ErrorCode::UnsupportedFormat),
        (inbound(&json, br#"{"query": "hello"}"#), ErrorCode::DecodeFailed),
        (inbound(&json, b"not json"), ErrorCode::DecodeFailed),
        (inbound(&json, &rerank("hello", &["a", "a", "a", "a"])), ErrorCode::BadRequest),
        (inbound(&json, &rerank("hello", &[])), ErrorCode::EmptyInput),
        (inbound(&json, &rerank("  ", &["a"])), ErrorCode::EmptyInput),
        (inbound(&json, &rerank("hello", &["a", " "])), ErrorCode::EmptyInput),
        (inbound(&json, &rerank("hello", &["a caption a caption a caption"])), ErrorCode::TextTooLong),
        (inbound(&json, &rerank("hello", &[&"a ".repeat(40)])), ErrorCode::TextTooLong),
    ];
    for (message, code) in cases {
        assert_eq!(error_code(admit(&rerank_policy(), message)), code);
    }
}

#[tokio::test]
async fn a_worker_decoding_image_after_image_keeps_only_the_decodes_under_way() {
    use crate::stages::admission::image::DecodeOutlets;
    const IMAGES: usize = 50;
    let (jobs, mut decoded) = tokio::sync::mpsc::channel(IMAGES);
    let (sink, mut answers) = tokio::sync::mpsc::channel(IMAGES);
    let outlets = DecodeOutlets { model: ModelName::parse("minilm").unwrap(), jobs, sink };
    let (policy, bytes) = (image_policy_with_budget(64 << 20), png(3, 3));
    let mut running = tokio::task::JoinSet::new();
    for _ in 0..IMAGES {
        let Admitted::Decode(decode) = admit(&policy, inbound(&envelope(ContentType::Png), &bytes)) else {
            panic!("the image was not admitted");
        };
        assert!(decode.start(&outlets, &mut running).await);
    }
    // One decode slot: each start waited for the one before to end its
    // decode. Kept until reaped, the finished ones would all be here.
    assert!(running.len() <= 10, "{} of {IMAGES} decodes still held", running.len());
    while running.join_next().await.is_some() {}
    drop(outlets);
    let mut jobs = 0;
    while let Some(piped) = decoded.recv().await {
        assert!(matches!(piped, crate::stages::handover::Piped::Work(_)));
        jobs += 1;
    }
    if let Ok(crate::core::job::SinkItem::Answers(refused)) = answers.try_recv() {
        panic!("a decode was refused: {:?}", refused[0].answer);
    }
    assert_eq!(jobs, IMAGES, "every image decoded into a job");
}

/// `message` read from `lane`'s topic.
fn on_lane(mut message: Inbound, lane: fleet_proto::Lane) -> Inbound {
    message.position.lane = lane;
    message
}

/// Where an admitted request's answer goes, whether it is answered now or computed.
fn reply_of(admitted: &Admitted) -> &Reply {
    match admitted {
        Admitted::Job(job) => &job.reply,
        Admitted::Answer(finished) => &finished.reply,
        other => panic!("expected a job or an answer, got {other:?}"),
    }
}

#[test]
fn each_lane_answers_where_the_model_says_unless_the_request_asks_within_what_it_allows() {
    use fleet_proto::Lane;
    let p = policy();
    let mut text = envelope(ContentType::Text);
    text.job = Some(JobId::parse("reembed-1").unwrap());
    let bulk = admit(&p, on_lane(inbound(&text, b"hello there"), Lane::Bulk));
    assert_eq!(reply_of(&bulk).to, Destinations::KAFKA);
    assert_eq!(reply_of(&bulk).job.as_ref().map(JobId::as_str), Some("reembed-1"));
    assert_eq!(reply_of(&admit(&p, inbound(&text, b"hello there"))).to, Destinations::REDIS);
    text.reply_to = Some(Destinations::BOTH);
    assert_eq!(reply_of(&admit(&p, on_lane(inbound(&text, b"hello"), Lane::Bulk))).to, Destinations::BOTH);

    let only_redis = AdmissionPolicy {
        answers: AnswersConfig { allowed: Destinations::REDIS, ..AnswersConfig::default() },
        ..policy()
    };
    let refused = admit(&only_redis, on_lane(inbound(&text, b"hello"), Lane::Bulk));
    // Refused where the lane's answers go, still counted in its job.
    assert_eq!(reply_of(&refused).to, Destinations::KAFKA);
    assert_eq!(reply_of(&refused).job.as_ref().map(JobId::as_str), Some("reembed-1"));
    assert_eq!(error_code(refused), ErrorCode::BadRequest);
}

#[test]
fn a_refused_header_still_names_the_job_of_its_answer() {
    let mut text = envelope(ContentType::Text);
    text.job = Some(JobId::parse("reembed-1").unwrap());
    let mut message = on_lane(inbound(&text, b"hello"), fleet_proto::Lane::Bulk);
    message.headers.push(RawHeader::new(h::REPLY_TO, Some(b"kafka:infer.elsewhere".to_vec())));
    let refused = admit(&policy(), message);
    assert_eq!(reply_of(&refused).job.as_ref().map(JobId::as_str), Some("reembed-1"));
    assert_eq!(reply_of(&refused).to, Destinations::KAFKA);
    assert_eq!(error_code(refused), ErrorCode::BadRequest);
}

#[test]
fn a_replayed_message_is_answered_again_only_where_redis_was_to_have_it() {
    let p = policy();
    let mut text = envelope(ContentType::Text);
    let replayed = |envelope: &Envelope, lane| Inbound { replayed: true, ..on_lane(inbound(envelope, b"hello"), lane) };
    let kafka_only = admit(&p, replayed(&text, fleet_proto::Lane::Bulk));
    assert!(matches!(kafka_only, Admitted::Delivered(ref at) if at.offset == 7), "{kafka_only:?}");
    assert_eq!(reply_of(&admit(&p, replayed(&text, fleet_proto::Lane::Interactive))).to, Destinations::REDIS);
    text.reply_to = Some(Destinations::BOTH);
    let both = admit(&p, replayed(&text, fleet_proto::Lane::Bulk));
    assert_eq!(reply_of(&both).to, Destinations::REDIS, "Kafka has it still");
    // Refused before its envelope is read: its refusal went where the
    // lane's answers go (Kafka), and is there still.
    let mut no_envelope = replayed(&text, fleet_proto::Lane::Bulk);
    no_envelope.headers.retain(|header| header.name != h::TIME.as_bytes());
    assert!(matches!(admit(&p, no_envelope), Admitted::Delivered(_)));
}
