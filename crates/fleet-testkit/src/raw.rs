//! Messages the Rust clients will not build: header names that are not
//! UTF-8 (rdkafka's `Header` takes `&str`). Any librdkafka or kafka-python
//! producer can send them, so the worker's tests must too. This goes one
//! level down, to librdkafka's C produce call (`rd_kafka_produceva`), which
//! takes a header name as a NUL-terminated byte string.

use rdkafka::bindings as rdsys;
use rdkafka::producer::{BaseProducer, DeliveryResult, Producer, ProducerContext};
use rdkafka::{ClientConfig, ClientContext};
use std::ffi::CString;
use std::sync::Mutex;
use std::time::Duration;

/// One message as bytes. A header name must not contain a NUL byte (the C
/// call reads it up to the first one); any other bytes go.
#[derive(Debug, Clone, Default)]
pub struct RawRecord {
    pub partition: Option<i32>,
    pub key: Option<Vec<u8>>,
    pub headers: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    pub payload: Option<Vec<u8>>,
}

#[derive(Default)]
struct Deliveries(Mutex<Vec<Result<(), String>>>);

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        let outcome = result.as_ref().map(|_| ()).map_err(|(e, _)| e.to_string());
        self.0.lock().expect("deliveries").push(outcome);
    }
}

/// Produces `records` to `topic` and waits until each is delivered; the
/// first delivery failure is returned.
pub fn produce(config: &ClientConfig, topic: &str, records: &[RawRecord]) -> Result<(), String> {
    let producer: BaseProducer<Deliveries> = config
        .clone()
        .set("message.max.bytes", "67108864")
        .create_with_context(Deliveries::default())
        .map_err(|e| e.to_string())?;
    let topic = CString::new(topic).map_err(|e| e.to_string())?;
    for record in records {
        let names: Vec<CString> = record
            .headers
            .iter()
            .map(|(name, _)| CString::new(name.clone()).map_err(|_| "a header name holds a NUL byte".to_owned()))
            .collect::<Result<_, _>>()?;
        let mut vus = vec![
            vu(
                rdsys::rd_kafka_vtype_t::RD_KAFKA_VTYPE_TOPIC,
                rdsys::rd_kafka_vu_s__bindgen_ty_1 { cstr: topic.as_ptr() },
            ),
            vu(
                rdsys::rd_kafka_vtype_t::RD_KAFKA_VTYPE_MSGFLAGS,
                rdsys::rd_kafka_vu_s__bindgen_ty_1 { i: rdsys::RD_KAFKA_MSG_F_COPY },
            ),
        ];
        if let Some(partition) = record.partition {
            vus.push(vu(
                rdsys::rd_kafka_vtype_t::RD_KAFKA_VTYPE_PARTITION,
                rdsys::rd_kafka_vu_s__bindgen_ty_1 { i32_: partition },
            ));
        }
        for (kind, bytes) in [
            (rdsys::rd_kafka_vtype_t::RD_KAFKA_VTYPE_KEY, &record.key),
            (rdsys::rd_kafka_vtype_t::RD_KAFKA_VTYPE_VALUE, &record.payload),
        ] {
            if let Some(bytes) = bytes {
                let mem = rdsys::rd_kafka_vu_s__bindgen_ty_1__bindgen_ty_1 {
                    ptr: bytes.as_ptr() as *mut std::ffi::c_void,
                    size: bytes.len(),
                };
                vus.push(vu(kind, rdsys::rd_kafka_vu_s__bindgen_ty_1 { mem }));
            }
        }
        for (name, (_, value)) in names.iter().zip(&record.headers) {
            let (val, size) = match value {
                Some(v) => (v.as_ptr() as *const std::ffi::c_void, v.len() as isize),
                None => (std::ptr::null(), 0),
            };
            let header = rdsys::rd_kafka_vu_s__bindgen_ty_1__bindgen_ty_2 { name: name.as_ptr(), val, size };
            vus.push(vu(rdsys::rd_kafka_vtype_t::RD_KAFKA_VTYPE_HEADER, rdsys::rd_kafka_vu_s__bindgen_ty_1 { header }));
        }
        // SAFETY: every pointer in `vus` points into `topic`, `names` or
        // `record`, all alive across the call; MSG_F_COPY makes librdkafka
        // copy key, value and headers before it returns.
        let error = unsafe { rdsys::rd_kafka_produceva(producer.client().native_ptr(), vus.as_ptr(), vus.len()) };
        if !error.is_null() {
            // SAFETY: a non-null error is ours to read and destroy.
            let message = unsafe {
                let text = std::ffi::CStr::from_ptr(rdsys::rd_kafka_error_string(error)).to_string_lossy().into_owned();
                rdsys::rd_kafka_error_destroy(error);
                text
            };
            return Err(message);
        }
    }
    producer.flush(Duration::from_secs(30)).map_err(|e| e.to_string())?;
    let deliveries = std::mem::take(&mut *producer.context().0.lock().expect("deliveries"));
    if deliveries.len() != records.len() {
        return Err(format!("{} of {} records reported delivered", deliveries.len(), records.len()));
    }
    deliveries.into_iter().collect()
}

fn vu(vtype: rdsys::rd_kafka_vtype_t, u: rdsys::rd_kafka_vu_s__bindgen_ty_1) -> rdsys::rd_kafka_vu_t {
    rdsys::rd_kafka_vu_t { vtype, u }
}
