//! The messages the chaos tests send, built as bytes (`fleet_testkit::raw`)
//! so that any header a Kafka client can send is possible: a good text
//! request, the malformed ones with how each must end, and one without a
//! readable id. Apart from the tests so that the case table reads on its
//! own.

use fleet_proto::clock::now_ms;
use fleet_proto::{headers as h, ContentType, Envelope, RequestId, Status};
use fleet_testkit::raw::RawRecord;

/// A valid CloudEvents header set for a text request.
fn headers_for(id: &str) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let envelope = Envelope {
        id: RequestId::parse(id).unwrap(),
        source: "chaos-test".into(),
        created_ms: now_ms(),
        content_type: ContentType::Text,
        deadline_ms: None,
        parts: 1,
        job: None,
        reply_to: None,
    };
    envelope.to_headers().into_iter().map(|(k, v)| (k.as_bytes().to_vec(), Some(v.into_bytes()))).collect()
}

pub fn good(id: &str) -> RawRecord {
    RawRecord {
        key: Some(id.as_bytes().to_vec()),
        headers: headers_for(id),
        payload: Some(format!("a good request called {id}").into_bytes()),
        ..RawRecord::default()
    }
}

fn set_header(record: &mut RawRecord, name: &str, value: &[u8]) {
    record.headers.retain(|(n, _)| n != name.as_bytes());
    record.headers.push((name.as_bytes().to_vec(), Some(value.to_vec())));
}

fn drop_header(record: &mut RawRecord, name: &str) {
    record.headers.retain(|(n, _)| n != name.as_bytes());
}

/// How one bad message must end.
#[derive(Debug, Clone, PartialEq)]
pub enum Ending {
    /// An answer at this id, with this status and error code.
    Answer { id: &'static str, status: Status, code: Option<&'static str> },
    /// A dead letter with this reason, found by its payload.
    DeadLetter { reason: &'static str, payload: &'static str },
}

fn answer(id: &'static str, status: Status, code: Option<&'static str>) -> Ending {
    Ending::Answer { id, status, code }
}

/// The malformed-message cases: each a record and how it must end.
pub fn malformed_cases() -> Vec<(RawRecord, Ending)> {
    let mut cases = Vec::new();
    // A header name that is not UTF-8 (what crashed rdkafka's iterator).
    let mut r = good("bad-name");
    r.headers.push((b"x-\xff\xfe-trace".to_vec(), Some(b"1".to_vec())));
    cases.push((r, answer("bad-name", Status::Error, Some("bad_request"))));
    // The same without any readable id: only the DLQ can take it.
    let mut r = good("unused");
    r.key = None;
    drop_header(&mut r, h::ID);
    r.headers.push((b"\xc3\x28".to_vec(), None));
    r.payload = Some(b"no id and a bad header name".to_vec());
    cases.push((r, Ending::DeadLetter { reason: "malformed_header", payload: "no id and a bad header name" }));
    // A header value that is not UTF-8 where text is required.
    let mut r = good("bad-value");
    set_header(&mut r, h::SOURCE, b"\xff\xfe");
    cases.push((r, answer("bad-value", Status::Error, Some("bad_request"))));
    // Duplicate headers: the first one counts; a second ce_time is ignored.
    let mut r = good("dup-headers");
    r.headers.push((h::TIME.as_bytes().to_vec(), Some(b"not a time".to_vec())));
    r.headers.push((h::ID.as_bytes().to_vec(), Some(b"another-id".to_vec())));
    cases.push((r, answer("dup-headers", Status::Ok, None)));
    // An empty header name, with and without a value.
    let mut r = good("empty-name");
    r.headers.push((Vec::new(), Some(b"v".to_vec())));
    r.headers.push((Vec::new(), None));
    cases.push((r, answer("empty-name", Status::Ok, None)));
    // A 1 MiB header the worker does not know.
    let mut r = good("big-header");
    r.headers.push((b"x-attachment".to_vec(), Some(vec![b'a'; 1 << 20])));
    cases.push((r, answer("big-header", Status::Ok, None)));
    // A key of 0 bytes: ce_id still names the request.
    let mut r = good("empty-key");
    r.key = Some(Vec::new());
    cases.push((r, answer("empty-key", Status::Ok, None)));
    // A key of 0 bytes and no ce_id: no address at all.
    let mut r = good("unused");
    r.key = Some(Vec::new());
    drop_header(&mut r, h::ID);
    r.payload = Some(b"an empty key and no ce_id".to_vec());
    cases.push((r, Ending::DeadLetter { reason: "unreadable_request_id", payload: "an empty key and no ce_id" }));
    // ce_time and ce_deadline at the numeric extremes.
    let u64_max = u64::MAX.to_string();
    let extremes: [(&str, &str, &[u8], Ending); 7] = [
        ("time-far", h::TIME, b"9999-12-31T23:59:59.999Z", answer("time-far", Status::Ok, None)),
        ("time-epoch", h::TIME, b"1970-01-01T00:00:00Z", answer("time-epoch", Status::Expired, None)),
        (
            "time-before-epoch",
            h::TIME,
            b"0001-01-01T00:00:00Z",
            answer("time-before-epoch", Status::Error, Some("bad_request")),
        ),
        ("deadline-max", h::DEADLINE, u64_max.as_bytes(), answer("deadline-max", Status::Ok, None)),
        (
            "deadline-overflow",
            h::DEADLINE,
            b"18446744073709551616",
            answer("deadline-overflow", Status::Error, Some("bad_request")),
        ),
        ("deadline-zero", h::DEADLINE, b"0", answer("deadline-zero", Status::Expired, None)),
        ("deadline-negative", h::DEADLINE, b"-1", answer("deadline-negative", Status::Error, Some("bad_request"))),
    ];
    for (id, header, value, ending) in extremes {
        let mut r = good(id);
        set_header(&mut r, header, value);
        cases.push((r, ending));
    }
    cases
}

/// A message without a readable id and with `payload_bytes` of payload.
pub fn anonymous(marker: &str, payload_bytes: usize) -> RawRecord {
    let mut r = good("unused");
    r.key = None;
    drop_header(&mut r, h::ID);
    let mut payload = marker.as_bytes().to_vec();
    payload.resize(payload_bytes.max(marker.len()), b'.');
    r.payload = Some(payload);
    r
}
