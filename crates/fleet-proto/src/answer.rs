//! The answer JSON a worker writes into `fleet:result:{<id>}` (one hash field
//! per model). Clients in any language read it, so its shape and the error
//! codes are a contract: codes are stable snake_case words, never free text.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Ok,
    Error,
    /// The deadline passed before the request could be computed; it never was.
    Expired,
    /// Its job (`ce_fleetjob`) was cancelled before it was computed; it never was.
    Cancelled,
}

impl Status {
    pub const ALL: [Self; 4] = [Self::Ok, Self::Error, Self::Expired, Self::Cancelled];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Error => "error",
            Self::Expired => "expired",
            Self::Cancelled => "cancelled",
        }
    }
}

/// Stable error codes. Adding one is fine; renaming one breaks clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// A required header is missing or malformed.
    BadRequest,
    /// The value could not be decoded (text that is not UTF-8, a corrupt image).
    DecodeFailed,
    /// The content type is unknown or not served by this model.
    UnsupportedFormat,
    /// The input holds no content (an empty or all-whitespace text).
    EmptyInput,
    /// The text is longer than the model's `max_seq_len` and truncation is off.
    TextTooLong,
    /// The image exceeds the model's byte or pixel limits.
    ImageTooLarge,
    /// The model failed on this input after bounded retries.
    ModelFailed,
    /// The worker failed while preparing this request (a defect, caught and
    /// confined to this one request).
    InternalError,
}

impl ErrorCode {
    pub const ALL: [Self; 8] = [
        Self::BadRequest,
        Self::DecodeFailed,
        Self::UnsupportedFormat,
        Self::EmptyInput,
        Self::TextTooLong,
        Self::ImageTooLarge,
        Self::ModelFailed,
        Self::InternalError,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::BadRequest => "bad_request",
            Self::DecodeFailed => "decode_failed",
            Self::UnsupportedFormat => "unsupported_format",
            Self::EmptyInput => "empty_input",
            Self::TextTooLong => "text_too_long",
            Self::ImageTooLarge => "image_too_large",
            Self::ModelFailed => "model_failed",
            Self::InternalError => "internal_error",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorInfo {
    pub code: ErrorCode,
    pub message: String,
}

/// Milliseconds spent in each stage. `queue` runs from the request's creation
/// (`ce_time`) to the start of its model call, `infer` is the model call of
/// its batch, `total` runs from creation to the moment the answer was formed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Timings {
    pub queue: f64,
    pub infer: f64,
    pub total: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Answer {
    pub status: Status,
    pub model: String,
    /// The model version that computed (or refused) the request.
    pub version: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorInfo>,
    pub timings_ms: Timings,
}

impl Answer {
    pub fn ok(model: &str, version: u64, output: serde_json::Value, timings_ms: Timings) -> Self {
        Self { status: Status::Ok, model: model.to_owned(), version, output: Some(output), error: None, timings_ms }
    }

    pub fn error(model: &str, version: u64, code: ErrorCode, message: impl Into<String>, timings_ms: Timings) -> Self {
        Self {
            status: Status::Error,
            model: model.to_owned(),
            version,
            output: None,
            error: Some(ErrorInfo { code, message: message.into() }),
            timings_ms,
        }
    }

    pub fn expired(model: &str, version: u64, timings_ms: Timings) -> Self {
        Self { status: Status::Expired, model: model.to_owned(), version, output: None, error: None, timings_ms }
    }

    pub fn cancelled(model: &str, version: u64, timings_ms: Timings) -> Self {
        Self { status: Status::Cancelled, model: model.to_owned(), version, output: None, error: None, timings_ms }
    }

    pub fn to_json(&self) -> String {
        // An Answer holds only strings, numbers and JSON values: serialising
        // it cannot fail, so a failure here would be a bug in serde_json.
        serde_json::to_string(self).unwrap_or_else(|e| format!(r#"{{"status":"error","serialise_error":"{e}"}}"#))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Its position in `ErrorCode::ALL`; adding a code fails to compile
    /// here until it is listed.
    fn position(code: ErrorCode) -> usize {
        match code {
            ErrorCode::BadRequest => 0,
            ErrorCode::DecodeFailed => 1,
            ErrorCode::UnsupportedFormat => 2,
            ErrorCode::EmptyInput => 3,
            ErrorCode::TextTooLong => 4,
            ErrorCode::ImageTooLarge => 5,
            ErrorCode::ModelFailed => 6,
            ErrorCode::InternalError => 7,
        }
    }

    #[test]
    fn all_lists_every_code_once() {
        for (i, code) in ErrorCode::ALL.into_iter().enumerate() {
            assert_eq!(position(code), i, "{code}");
        }
    }

    #[test]
    fn ok_answer_has_the_documented_shape() {
        let a = Answer::ok("minilm", 3, json!({"embedding": [0.5]}), Timings { queue: 1.0, infer: 2.0, total: 3.5 });
        let v: serde_json::Value = serde_json::from_str(&a.to_json()).unwrap();
        assert_eq!(
            v,
            json!({"status":"ok","model":"minilm","version":3,"output":{"embedding":[0.5]},
                   "timings_ms":{"queue":1.0,"infer":2.0,"total":3.5}})
        );
    }

    #[test]
    fn error_answer_carries_a_snake_case_code() {
        let a = Answer::error("minilm", 1, ErrorCode::TextTooLong, "600 tokens > 256", Timings::default());
        let v: serde_json::Value = serde_json::from_str(&a.to_json()).unwrap();
        assert_eq!(v["status"], "error");
        assert_eq!(v["error"]["code"], "text_too_long");
        assert!(v.get("output").is_none());
        assert_eq!(serde_json::from_value::<Answer>(v).unwrap(), a);
    }

    #[test]
    fn codes_serialise_as_their_documented_words() {
        for code in [
            ErrorCode::BadRequest,
            ErrorCode::DecodeFailed,
            ErrorCode::UnsupportedFormat,
            ErrorCode::EmptyInput,
            ErrorCode::TextTooLong,
            ErrorCode::ImageTooLarge,
            ErrorCode::ModelFailed,
            ErrorCode::InternalError,
        ] {
            assert_eq!(serde_json::to_value(code).unwrap(), code.as_str());
        }
        for status in Status::ALL {
            assert_eq!(serde_json::to_value(status).unwrap(), status.as_str());
        }
    }
}
